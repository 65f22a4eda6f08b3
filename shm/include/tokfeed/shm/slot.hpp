// Writing a slot (producer) and validating one (consumer).
//
// The consumer never trusts the shared bytes: it copies the header out of the
// segment first, then checks every field of that copy against the slot's
// bounds, so a producer that changes the header afterwards cannot make it
// read out of bounds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokfeed/shm/layout.hpp"

namespace tokfeed::shm {

enum class SlotFault {
  kNone = 0,
  kBadMagic,
  kBadHeaderSize,
  kWrongSeq,
  kWrongSession,
  kBadTensorCount,
  kBadTensorName,
  kBadDtype,
  kBadShape,
  kBadSize,
  kOutOfBounds,
  kMisaligned,
  kBadChecksum,
};

std::string_view slot_fault_name(SlotFault f) noexcept;

// Checks a copied header against a slot of `slot_bytes`. On success the
// tensor table may be used to build views at slot + tensors[i].offset.
SlotFault validate_slot_header(const SlotHeader& h, uint64_t slot_bytes, uint64_t expected_seq,
                               uint64_t expected_session) noexcept;

// XXH3-64 of the payload bytes of a slot (after its header).
uint64_t slot_checksum(const char* slot, const SlotHeader& h) noexcept;

// Producer side: lays out tensors after the header, 64-byte aligned.
class SlotWriter {
 public:
  SlotWriter(char* slot, uint64_t slot_bytes) noexcept : slot_(slot), slot_bytes_(slot_bytes) {}

  // Reserves a tensor; returns its data pointer, or nullptr when the slot is
  // too small (the caller sized slots from the config, so that is a bug).
  void* add(std::string_view name, Dtype dtype, uint32_t ndim, int64_t d0, int64_t d1) noexcept;

  // Fills the header (checksum included); the caller then publishes.
  void finish(uint64_t seq, uint64_t session, uint64_t stream_index, uint32_t epoch, uint32_t step, uint32_t rows,
              uint32_t seq_len, uint64_t real_tokens) noexcept;

 private:
  char* slot_;
  uint64_t slot_bytes_;
  SlotHeader header_{};
  uint64_t cursor_ = align_up(sizeof(SlotHeader), kCacheLine);
};

// Bytes a slot needs for `rows` x `seq_len` tensors of the given count and
// dtype, plus extra 1-D tensors of up to `extra_elems` elements each.
uint64_t slot_bytes_for(uint32_t tensors_2d, uint64_t rows, uint64_t seq_len, Dtype dtype, uint32_t tensors_1d,
                        uint64_t extra_elems) noexcept;

}  // namespace tokfeed::shm
