// libtokfeed's CUDA path: streams batches from the shared-memory rings to a
// GPU. Optional: where libtokfeed was built without CUDA (no
// TOKFEED_HAVE_CUDA), every call returns a Status saying so.
//
//   std::unique_ptr<tokfeed::cuda::DeviceStream> ds;
//   tokfeed::cuda::StreamOptions o{.device = 0, .prefetch = 2};
//   if (auto st = tokfeed::cuda::DeviceStream::open(*client, o, ds); !st.ok()) die(st.message());
//   tokfeed::cuda::DeviceBatch b;
//   while (ds->next(b, my_stream).ok()) { ... b.find("input_ids")->data ... }
//
// How it works: the data mapping is registered once (cudaHostRegister,
// read-only); each host batch is copied with cudaMemcpyAsync on a private
// non-blocking stream into a device buffer taken from a reusable pool; an
// event recorded after the copies is what the consumer's stream waits on.
// The host slot is released once that event has completed; the device buffer
// returns to the pool when the DeviceBatch is dropped, fenced by an event on
// the consumer's stream so the next copy cannot overwrite it while kernels
// queued on that stream still read it.
//
// Types are CUDA-free here (streams and events as void*) so that including
// this header needs no CUDA toolkit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tokfeed/client.hpp"

namespace tokfeed::cuda {

// Number of visible CUDA devices; a failure (no driver, no device) is a
// Status whose message starts with "no CUDA device: ".
Status device_count(int& out) noexcept;

struct DeviceTensor {
  std::string name;
  Dtype dtype = Dtype::kInt64;
  int ndim = 0;
  int64_t shape[2]{};
  void* data = nullptr;  // device memory on DeviceBatch::device
  std::size_t nbytes = 0;
};

// clang-tidy names the loop variable of the implicit copy of `tensors` "__i0";
// the code has no such name.
// NOLINTNEXTLINE(bugprone-reserved-identifier,readability-identifier-naming)
class DeviceBatch {
 public:
  uint64_t epoch = 0, step = 0, index = 0;
  uint32_t rows = 0, seq_len = 0;
  int device = 0;
  std::size_t tensor_count = 0;
  DeviceTensor tensors[8];

  const DeviceTensor* find(std::string_view name) const noexcept;
  explicit operator bool() const noexcept { return lease_ != nullptr; }
  // Returns the device buffer to the pool (also done when the last copy of
  // the batch is destroyed). Any thread; the CUDA device is set and restored.
  void release() noexcept { lease_.reset(); }

 private:
  friend class DeviceStream;
  std::shared_ptr<void> lease_;
};

struct StreamOptions {
  int device = 0;
  unsigned prefetch = 2;  // host batches copied ahead of the one handed out
};

class DeviceStream {
 public:
  // `client` must outlive the stream. Fails with "no CUDA device: ..." when
  // `opt.device` does not exist.
  static Status open(Client& client, const StreamOptions& opt, std::unique_ptr<DeviceStream>& out) noexcept;
  ~DeviceStream();

  // The next batch, on the device. `consumer_stream` (a cudaStream_t; null is
  // the legacy default stream) is made to wait for its copies; the batch's
  // buffer is fenced on that same stream when the batch is dropped, so use
  // its tensors on that stream (or synchronise with it). kEndOfStream after
  // the last epoch; other codes as Client::next.
  Status next(DeviceBatch& out, void* consumer_stream) noexcept;

  bool host_registered() const noexcept;      // false: copies run from pageable memory
  std::size_t pool_buffers() const noexcept;  // device buffers allocated so far

  struct Impl;

 private:
  explicit DeviceStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokfeed::cuda
