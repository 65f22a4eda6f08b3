// Internal: one attached client's view of the daemon's segments.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tokfeed/client.hpp"
#include "tokfeed/shm/layout.hpp"
#include "tokfeed/shm/ring.hpp"
#include "tokfeed/shm/segment.hpp"

namespace tokfeed::detail {

class Attachment : public std::enable_shared_from_this<Attachment> {
 public:
  Attachment() = default;
  ~Attachment();

  Status open(const ClientOptions& opt);
  Status next(Batch& out);
  // Marks (ring, seq) released; advances the ring's tail over every
  // contiguous released seq. Any thread.
  void release(uint32_t ring, uint64_t seq) noexcept;

  uint64_t next_index() const { return next_index_; }
  // Batches of `epoch`: blocks while the daemon still counts them (its
  // token cache builds), until they arrive or the daemon is lost (0).
  uint64_t batches_in(uint64_t epoch);
  // Blocks until the batch counts are known; false when the daemon is lost.
  bool wait_counts();
  Position position_of(uint64_t index);
  uint64_t epochs() const { return epochs_; }
  Split split() const { return opt_.split; }
  uint32_t rank() const { return rank_; }
  uint32_t workers() const { return workers_; }
  const shm::Mapping& data() const { return data_; }
  bool copy_on_write() const { return static_cast<bool>(cow_); }
  // The mapping tensor views point into (same size as data()).
  const void* view_base() const { return cow_ ? cow_.base() : data_.base(); }

 private:
  struct Ring {
    shm::RingConsumer consumer;
    uint64_t tail = 0;              // every seq below is released
    std::vector<uint8_t> released;  // by seq % slots, for seqs in [tail, tail + slots)
  };

  Status validate_segments(uint32_t ring_base);
  void map_copy_on_write(int fd);
  // Drops the private copies of a released slot's written pages.
  void drop_private_pages(char* slot) noexcept;
  // The slot's bytes in the mapping tensor views point into.
  char* view_of(const char* slot) const;
  Status position_at(uint64_t index, bool fresh);
  Status check_liveness(bool force);
  // Reads batch counts that arrived after attach from the consumer segment;
  // true once they are known.
  bool refresh_counts();
  Status corrupt(uint32_t w, uint64_t seq, std::string_view what) const;

  ClientOptions opt_;
  int sock_ = -1;
  shm::Mapping data_;
  shm::Mapping cow_;  // MAP_PRIVATE view of data_ (ClientOptions::copy_on_write)
  int pagemap_ = -1;  // /proc/self/pagemap: which of cow_'s pages were written
  std::vector<uint64_t> pagemap_buf_;
  shm::Mapping consumer_;
  const shm::SegmentHeader* header_ = nullptr;
  shm::ConsumerHeader* consumer_header_ = nullptr;
  std::vector<Ring> rings_;
  std::mutex release_mu_;  // process-local: guards Ring::tail and released
  uint32_t rank_ = 0, workers_ = 0, slots_ = 0;
  uint64_t epochs_ = 0, total_ = 0;
  uint64_t first_epoch_ = 0, start_base_ = 0, world_size_ = 0;
  std::vector<uint64_t> epoch_batches_;  // from first_epoch_ on
  bool passes_ = false;                  // the eval split: passes of epoch_batches_[0] repeat
  bool counts_pending_ = false;          // epoch_batches_ not known yet (total_ is UINT64_MAX)
  bool have_last_ = false;               // a batch was returned: its index, epoch and step
  uint64_t last_index_ = 0, last_epoch_ = 0, last_step_ = 0;
  uint64_t next_index_ = 0;
  uint64_t last_poll_ns_ = 0;
  uint64_t last_batch_ns_ = 0;  // when a batch was last found ready: as good a sign of life as a heartbeat
  uint64_t last_return_ns_ = 0;
};

}  // namespace tokfeed::detail
