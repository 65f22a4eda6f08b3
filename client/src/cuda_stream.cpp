// The CUDA streaming path (see tokfeed/cuda.hpp for the contract).
#include "tokfeed/cuda.hpp"

#include <deque>
#include <mutex>
#include <vector>

#ifdef TOKFEED_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tokfeed::cuda {

const DeviceTensor* DeviceBatch::find(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < tensor_count; ++i)
    if (tensors[i].name == name) return &tensors[i];
  return nullptr;
}

#ifndef TOKFEED_HAVE_CUDA

struct DeviceStream::Impl {};
DeviceStream::DeviceStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceStream::~DeviceStream() = default;

Status device_count(int& out) noexcept {
  out = 0;
  return {Code::kInvalidArgument, "no CUDA device: this libtokfeed was built without CUDA"};
}
Status DeviceStream::open(Client&, const StreamOptions&, std::unique_ptr<DeviceStream>&) noexcept {
  int n = 0;
  return device_count(n);
}
Status DeviceStream::next(DeviceBatch&, void*) noexcept { return {Code::kInvalidArgument, "built without CUDA"}; }
bool DeviceStream::host_registered() const noexcept { return false; }
std::size_t DeviceStream::pool_buffers() const noexcept { return 0; }

#else

namespace {

constexpr std::size_t kAlign = 256;          // cudaMalloc's own alignment; keeps every tensor aligned
constexpr std::size_t kMinBuffer = 1 << 20;  // small batches share one size class

Status cuda_fail(const char* what, cudaError_t e) {
  return {Code::kIoError, std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
}

// Makes `device` current for a scope: release() may run on any thread,
// whose current device is the caller's business.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) cudaSetDevice(device);
    else prev_ = -1;
  }
  ~DeviceScope() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

std::size_t size_class(std::size_t bytes) {
  std::size_t c = kMinBuffer;
  while (c < bytes) c <<= 1;
  return c;
}

struct Buffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  cudaEvent_t ready = nullptr;  // recorded on the copy stream after the copies into it
  cudaEvent_t freed = nullptr;  // recorded on the consumer's stream when its batch was dropped
};

// Device buffers, reused across steps. Shared with every DeviceBatch alive,
// so a batch may outlive its DeviceStream.
struct Pool {
  int device = 0;
  std::mutex mu;
  std::vector<Buffer> idle;
  std::size_t allocated = 0;

  ~Pool() {
    DeviceScope scope(device);
    for (Buffer& b : idle) destroy(b);
  }

  void destroy(Buffer& b) {
    if (b.freed) cudaEventSynchronize(b.freed);
    cudaFree(b.ptr);
    cudaEventDestroy(b.ready);
    cudaEventDestroy(b.freed);
  }

  // Called with the device current. Reuses an idle buffer that is large
  // enough; otherwise replaces a too-small one, so the pool's size stays
  // bounded by how many batches are alive at once.
  Status acquire(std::size_t bytes, Buffer& out) {
    {
      std::lock_guard lock(mu);
      for (std::size_t i = 0; i < idle.size(); ++i) {
        if (idle[i].bytes >= bytes) {
          out = idle[i];
          idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
          return {};
        }
      }
      if (!idle.empty()) {
        destroy(idle.back());
        idle.pop_back();
        --allocated;
      }
    }
    Buffer b;
    b.bytes = size_class(bytes);
    if (cudaError_t e = cudaMalloc(&b.ptr, b.bytes); e != cudaSuccess) return cuda_fail("cudaMalloc", e);
    cudaEventCreateWithFlags(&b.ready, cudaEventDisableTiming);
    cudaEventCreateWithFlags(&b.freed, cudaEventDisableTiming);
    std::lock_guard lock(mu);
    ++allocated;
    out = b;
    return {};
  }

  void give_back(Buffer b) {
    std::lock_guard lock(mu);
    idle.push_back(b);
  }
};

// What a DeviceBatch holds: its buffer, returned fenced on the consumer stream.
struct Lease {
  std::shared_ptr<Pool> pool;
  Buffer buf;
  cudaStream_t consumer = nullptr;
  ~Lease() {
    DeviceScope scope(pool->device);
    cudaEventRecord(buf.freed, consumer);
    pool->give_back(buf);
  }
};

}  // namespace

struct DeviceStream::Impl {
  Client* client = nullptr;
  StreamOptions opt;
  cudaStream_t copy = nullptr;
  bool registered = false;
  void* host_base = nullptr;
  std::shared_ptr<Pool> pool = std::make_shared<Pool>();

  struct Staged {
    Batch host;
    Buffer buf;
    DeviceBatch dev;  // tensors filled, no lease yet
  };
  std::deque<Staged> queued;    // copies queued, not yet handed out
  std::deque<Staged> draining;  // handed out; host slot held until `buf.ready` completes
  bool ended = false;

  ~Impl() {
    DeviceScope scope(opt.device);
    if (copy) cudaStreamSynchronize(copy);
    draining.clear();
    for (Staged& s : queued) pool->give_back(s.buf);
    queued.clear();
    if (copy) cudaStreamDestroy(copy);
    if (registered) cudaHostUnregister(host_base);
  }

  // Releases host slots whose copies are done. `force`: also waits for the
  // oldest one, to bound how many slots the stream holds.
  void reap(bool force) {
    while (!draining.empty()) {
      cudaError_t e =
          force ? cudaEventSynchronize(draining.front().buf.ready) : cudaEventQuery(draining.front().buf.ready);
      if (e == cudaErrorNotReady) return;
      draining.pop_front();  // releases the host Batch (its slot)
      force = false;
    }
  }

  Status stage(Batch&& host) {
    Staged s;
    std::size_t total = 0;
    std::size_t offsets[8];
    for (std::size_t i = 0; i < host.tensor_count(); ++i) {
      offsets[i] = total;
      total += (host.tensor(i).nbytes + kAlign - 1) / kAlign * kAlign;
    }
    if (Status st = pool->acquire(std::max<std::size_t>(total, 1), s.buf); !st.ok()) return st;
    // The buffer's previous batch may still be read by kernels on the consumer stream.
    cudaStreamWaitEvent(copy, s.buf.freed, 0);
    s.dev.epoch = host.epoch();
    s.dev.step = host.step();
    s.dev.index = host.index();
    s.dev.rows = host.rows();
    s.dev.seq_len = host.seq_len();
    s.dev.device = opt.device;
    s.dev.tensor_count = host.tensor_count();
    for (std::size_t i = 0; i < host.tensor_count(); ++i) {
      const TensorView& v = host.tensor(i);
      DeviceTensor& d = s.dev.tensors[i];
      d.name.assign(v.name);
      d.dtype = v.dtype;
      d.ndim = v.ndim;
      d.shape[0] = v.shape[0];
      d.shape[1] = v.shape[1];
      d.nbytes = v.nbytes;
      d.data = static_cast<char*>(s.buf.ptr) + offsets[i];
      if (v.nbytes == 0) continue;
      if (cudaError_t e = cudaMemcpyAsync(d.data, v.data, v.nbytes, cudaMemcpyHostToDevice, copy); e != cudaSuccess) {
        pool->give_back(s.buf);
        return cuda_fail("cudaMemcpyAsync", e);
      }
    }
    cudaEventRecord(s.buf.ready, copy);
    s.host = std::move(host);
    queued.push_back(std::move(s));
    return {};
  }

  Status fill() {
    while (!ended && queued.size() < std::max(1u, opt.prefetch)) {
      reap(queued.size() + draining.size() > opt.prefetch);
      Batch host;
      Status st = client->next(host);
      if (st.code() == Code::kEndOfStream) {
        ended = true;
        break;
      }
      if (!st.ok()) return st;
      if (st = stage(std::move(host)); !st.ok()) return st;
    }
    return {};
  }
};

DeviceStream::DeviceStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceStream::~DeviceStream() = default;

Status device_count(int& out) noexcept {
  out = 0;
  cudaError_t e = cudaGetDeviceCount(&out);
  if (e != cudaSuccess) {
    out = 0;
    return {Code::kInvalidArgument,
            std::string("no CUDA device: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e)};
  }
  if (out == 0) return {Code::kInvalidArgument, "no CUDA device: cudaGetDeviceCount found none"};
  return {};
}

Status DeviceStream::open(Client& client, const StreamOptions& opt, std::unique_ptr<DeviceStream>& out) noexcept {
  try {
    int n = 0;
    if (Status st = device_count(n); !st.ok()) return st;
    if (opt.device < 0 || opt.device >= n)
      return {Code::kInvalidArgument,
              "no CUDA device: cuda:" + std::to_string(opt.device) + " requested, " + std::to_string(n) + " present"};
    auto impl = std::make_unique<Impl>();
    impl->client = &client;
    impl->opt = opt;
    impl->pool->device = opt.device;
    DeviceScope scope(opt.device);
    if (cudaError_t e = cudaStreamCreateWithFlags(&impl->copy, cudaStreamNonBlocking); e != cudaSuccess)
      return cuda_fail("cudaStreamCreate", e);
    // Register the whole read-only mapping once: copies then run by DMA from
    // the rings, with no staging copy and no per-batch registration. The
    // mapping is PROT_READ, so the read-only flag is required; where the
    // device cannot do that, copies fall back to pageable memory.
    int ro = 0;
    cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, opt.device);
    impl->host_base = const_cast<void*>(client.mapping_base());
    if (ro && impl->host_base && client.mapping_size()) {
      cudaError_t e =
          cudaHostRegister(impl->host_base, client.mapping_size(), cudaHostRegisterPortable | cudaHostRegisterReadOnly);
      impl->registered = e == cudaSuccess;
      if (!impl->registered) cudaGetLastError();  // clear it, so later calls do not report it
    }
    out.reset(new DeviceStream(std::move(impl)));
    return {};
  } catch (const std::exception& e) {
    return {Code::kIoError, e.what()};
  }
}

Status DeviceStream::next(DeviceBatch& out, void* consumer_stream) noexcept {
  try {
    out.release();
    Impl& m = *impl_;
    DeviceScope scope(m.opt.device);
    if (Status st = m.fill(); !st.ok()) return st;
    if (m.queued.empty()) return {Code::kEndOfStream, "end of stream"};
    Impl::Staged s = std::move(m.queued.front());
    m.queued.pop_front();
    auto consumer = static_cast<cudaStream_t>(consumer_stream);
    if (cudaError_t e = cudaStreamWaitEvent(consumer, s.buf.ready, 0); e != cudaSuccess) {
      m.pool->give_back(s.buf);
      return cuda_fail("cudaStreamWaitEvent", e);
    }
    auto lease = std::make_shared<Lease>();
    lease->pool = m.pool;
    lease->buf = s.buf;
    lease->consumer = consumer;
    out = std::move(s.dev);
    out.lease_ = std::move(lease);
    m.draining.push_back(std::move(s));
    // Queue the next copies now, so they overlap the consumer's step. A
    // failure here (daemon lost, ...) comes back from the next call: this
    // batch is already complete and handed out.
    (void)m.fill();
    m.reap(false);
    return {};
  } catch (const std::exception& e) {
    return {Code::kIoError, e.what()};
  }
}

bool DeviceStream::host_registered() const noexcept { return impl_->registered; }
std::size_t DeviceStream::pool_buffers() const noexcept {
  std::lock_guard lock(impl_->pool->mu);
  return impl_->pool->allocated;
}

#endif

}  // namespace tokfeed::cuda
