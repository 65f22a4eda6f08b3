// _tokfeed: the Python face of libtokfeed. The pure-Python package
// (tokfeed/) builds the Loader on top of this; nothing here imports torch.
//
// Tensors leave as DLPack capsules: each capsule's DLManagedTensor owns a
// shared reference to its batch, so the ring slot is released when the last
// tensor of the batch (or the Batch object itself) is freed, in any order.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "dlpack_abi.hpp"
#include "tokfeed/client.hpp"
#include "tokfeed/cuda.hpp"

namespace py = pybind11;
using tokfeed::Code;
using tokfeed::Status;

namespace {

// ---- errors: one Python type per Code, all under TokfeedError ----

struct StatusError {
  Code code;
  std::string message;
};

[[noreturn]] void raise(const Status& st) { throw StatusError{st.code(), st.message()}; }

PyObject* g_error_base = nullptr;
PyObject* g_error_by_code[8] = {};

void define_errors(py::module_& m) {
  g_error_base = PyErr_NewException("tokfeed.TokfeedError", PyExc_RuntimeError, nullptr);
  m.attr("TokfeedError") = py::handle(g_error_base);
  struct Sub {
    Code code;
    const char* name;
  };
  for (Sub s : {Sub{Code::kDaemonLost, "DaemonLost"}, Sub{Code::kCorrupt, "CorruptError"},
                Sub{Code::kRefused, "RefusedError"}, Sub{Code::kIoError, "IoError"},
                Sub{Code::kInvalidArgument, "InvalidArgument"}, Sub{Code::kEndOfStream, "EndOfStream"}}) {
    std::string qual = std::string("tokfeed.") + s.name;
    PyObject* t = PyErr_NewException(qual.c_str(), g_error_base, nullptr);
    g_error_by_code[static_cast<int>(s.code)] = t;
    m.attr(s.name) = py::handle(t);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* t = g_error_by_code[static_cast<int>(e.code)];
      PyErr_SetString(t ? t : g_error_base, e.message.c_str());
    }
  });
}

// ---- DLPack export ----

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

struct Exported {
  DLManagedTensor managed{};
  int64_t shape[2]{};
  std::shared_ptr<void> owner;  // the batch (host) or the device lease
};

void exported_deleter(DLManagedTensor* t) { delete static_cast<Exported*>(t->manager_ctx); }

// A capsule nobody consumed still owns its tensor; a consumed one was
// renamed by the consumer, which now owns it.
void capsule_destructor(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, kCapsuleName)) return;
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kCapsuleName));
  if (t && t->deleter) t->deleter(t);
}

py::object to_capsule(void* data, tokfeed::Dtype dtype, int ndim, const int64_t* shape, DLDevice device,
                      std::shared_ptr<void> owner) {
  auto* e = new Exported;
  e->owner = std::move(owner);
  for (int i = 0; i < ndim && i < 2; ++i) e->shape[i] = shape[i];
  DLTensor& t = e->managed.dl_tensor;
  t.data = data;
  t.device = device;
  t.ndim = ndim;
  t.dtype =
      DLDataType{static_cast<uint8_t>(kDLInt), static_cast<uint8_t>(dtype == tokfeed::Dtype::kInt32 ? 32 : 64), 1};
  t.shape = e->shape;
  t.strides = nullptr;  // compact row-major, as the slot lays them out
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = exported_deleter;
  PyObject* cap = PyCapsule_New(&e->managed, kCapsuleName, capsule_destructor);
  if (!cap) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

// ---- host client ----

// The stream indices of the batches a client handed out that are still
// alive, so the Loader can refuse to reposition while old tensors still
// point into slots the new session would overwrite, and name them.
struct LiveBatches {
  std::mutex mu;
  std::multiset<uint64_t> indices;

  void add(uint64_t i) {
    std::lock_guard lock(mu);
    indices.insert(i);
  }
  void remove(uint64_t i) {
    std::lock_guard lock(mu);
    indices.erase(indices.find(i));
  }
  std::vector<uint64_t> list() {
    std::lock_guard lock(mu);
    return {indices.begin(), indices.end()};
  }
};

struct HostBatch {
  std::shared_ptr<tokfeed::Batch> batch;

  py::dict tensors() const {
    py::dict d;
    const tokfeed::Batch& b = *batch;
    for (std::size_t i = 0; i < b.tensor_count(); ++i) {
      const tokfeed::TensorView& v = b.tensor(i);
      // The mapping is read-only; DLPack has no const, torch gets a writable
      // view of read-only pages (documented: never modify in place).
      d[py::str(std::string(v.name))] =
          to_capsule(const_cast<void*>(v.data), v.dtype, v.ndim, v.shape, DLDevice{kDLCPU, 0}, batch);
    }
    return d;
  }
};

class PyClient {
 public:
  PyClient(const std::string& socket, uint32_t rank, uint64_t epoch, uint64_t step, double liveness_timeout_s,
           bool verify_checksums, double attach_wait_s, uint64_t world_size, uint64_t base, bool copy_on_write,
           const std::string& split) {
    tokfeed::ClientOptions o;
    o.socket = socket;
    o.rank = rank;
    if (split != "train" && split != "eval")
      throw StatusError{Code::kInvalidArgument, "split '" + split + "': expected 'train' or 'eval'"};
    o.split = split == "eval" ? tokfeed::Split::kEval : tokfeed::Split::kTrain;
    o.start = {epoch, step, world_size, base};
    o.liveness_timeout = std::chrono::milliseconds(static_cast<int64_t>(liveness_timeout_s * 1000));
    o.verify_checksums = verify_checksums;
    o.copy_on_write = copy_on_write;
    Status st;
    {
      py::gil_scoped_release nogil;
      // A previous client of this rank that just closed is detached by the
      // daemon asynchronously: retry "already attached" for a short while.
      auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(attach_wait_s);
      for (;;) {
        st = tokfeed::Client::connect(o, client_);
        if (st.ok() || st.code() != Code::kRefused || st.message().find("already attached") == std::string::npos ||
            std::chrono::steady_clock::now() >= until)
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    if (!st.ok()) raise(st);
  }

  // The next batch, or None at the end of the stream. The GIL is released
  // while waiting.
  py::object next() {
    tokfeed::Client& c = get();
    auto b = std::make_unique<tokfeed::Batch>();
    Status st;
    {
      py::gil_scoped_release nogil;
      st = c.next(*b);
    }
    if (st.code() == Code::kEndOfStream) return py::none();
    if (!st.ok()) raise(st);
    const uint64_t index = b->index();
    live_->add(index);
    std::shared_ptr<LiveBatches> live = live_;
    HostBatch hb{std::shared_ptr<tokfeed::Batch>(b.release(), [live, index](tokfeed::Batch* p) {
      delete p;
      live->remove(index);
    })};
    return py::cast(std::move(hb));
  }

  tokfeed::Client& get() {
    if (!client_) throw StatusError{Code::kInvalidArgument, "the client is closed"};
    return *client_;
  }
  void close() { client_.reset(); }  // detaches once the batches still alive are freed too
  int64_t live_batches() const { return static_cast<int64_t>(live_->list().size()); }
  std::vector<uint64_t> live_indices() const { return live_->list(); }

 private:
  std::unique_ptr<tokfeed::Client> client_;
  std::shared_ptr<LiveBatches> live_ = std::make_shared<LiveBatches>();
};

// ---- CUDA ----

struct DeviceBatchRef {
  std::shared_ptr<tokfeed::cuda::DeviceBatch> batch;

  py::dict tensors() const {
    py::dict d;
    const auto& b = *batch;
    for (std::size_t i = 0; i < b.tensor_count; ++i) {
      const auto& t = b.tensors[i];
      d[py::str(t.name)] = to_capsule(t.data, t.dtype, t.ndim, t.shape, DLDevice{kDLCUDA, b.device}, batch);
    }
    return d;
  }
};

class PyDeviceStream {
 public:
  PyDeviceStream(PyClient& client, int device, unsigned prefetch) {
    tokfeed::cuda::StreamOptions o;
    o.device = device;
    o.prefetch = prefetch;
    Status st = tokfeed::cuda::DeviceStream::open(client.get(), o, stream_);
    if (!st.ok()) raise(st);
  }

  py::object next(uintptr_t consumer_stream) {
    if (!stream_) throw StatusError{Code::kInvalidArgument, "the device stream is closed"};
    auto b = std::make_shared<tokfeed::cuda::DeviceBatch>();
    Status st;
    {
      py::gil_scoped_release nogil;
      st = stream_->next(*b, reinterpret_cast<void*>(consumer_stream));
    }
    if (st.code() == Code::kEndOfStream) return py::none();
    if (!st.ok()) raise(st);
    return py::cast(DeviceBatchRef{std::move(b)});
  }

  void close() {
    py::gil_scoped_release nogil;
    stream_.reset();
  }
  bool host_registered() const { return stream_ && stream_->host_registered(); }
  std::size_t pool_buffers() const { return stream_ ? stream_->pool_buffers() : 0; }

 private:
  std::unique_ptr<tokfeed::cuda::DeviceStream> stream_;
};

}  // namespace

PYBIND11_MODULE(_tokfeed, m) {
  m.doc() = "tokfeed client binding (use the tokfeed package, not this module)";
  define_errors(m);

  py::class_<HostBatch>(m, "Batch")
      .def_property_readonly("epoch", [](const HostBatch& b) { return b.batch->epoch(); })
      .def_property_readonly("step", [](const HostBatch& b) { return b.batch->step(); })
      .def_property_readonly("index", [](const HostBatch& b) { return b.batch->index(); })
      .def_property_readonly("rows", [](const HostBatch& b) { return b.batch->rows(); })
      .def_property_readonly("seq_len", [](const HostBatch& b) { return b.batch->seq_len(); })
      .def_property_readonly("real_tokens", [](const HostBatch& b) { return b.batch->real_tokens(); })
      .def_property_readonly("checksum", [](const HostBatch& b) { return b.batch->checksum(); })
      .def("tensors", &HostBatch::tensors, "dict name -> DLPack capsule (zero-copy, read-only memory)");

  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, uint32_t, uint64_t, uint64_t, double, bool, double, uint64_t, uint64_t, bool,
                    const std::string&>(),
           py::arg("socket"), py::arg("rank") = 0, py::arg("epoch") = 0, py::arg("step") = 0,
           py::arg("liveness_timeout") = 1.5, py::arg("verify_checksums") = false, py::arg("attach_wait") = 2.0,
           py::arg("world_size") = 0, py::arg("base") = 0, py::arg("copy_on_write") = false, py::arg("split") = "train")
      .def("next", &PyClient::next, "the next Batch, or None at the end of the stream")
      .def("close", &PyClient::close)
      .def_property_readonly("live_batches", &PyClient::live_batches)
      .def_property_readonly("live_indices", &PyClient::live_indices, "stream indices of the batches still alive")
      .def_property_readonly("position",
                             [](PyClient& c) {
                               tokfeed::Position p = c.get().position();
                               return py::make_tuple(p.epoch, p.step, p.world_size, p.base);
                             })
      .def(
          "position_of",
          [](PyClient& c, uint64_t index) {
            tokfeed::Position p = c.get().position_of(index);
            return py::make_tuple(p.epoch, p.step, p.world_size, p.base);
          },
          "(epoch, step, world_size, base) of stream batch `index`")
      .def_property_readonly(
          "batches_per_epoch",
          [](PyClient& c) {
            // Blocks while the daemon still counts them (its token cache builds).
            py::gil_scoped_release nogil;
            return c.get().batches_per_epoch();
          },
          "batches of the current epoch; waits until the daemon knows them")
      .def_property_readonly("epochs", [](PyClient& c) { return c.get().epochs(); })
      .def_property_readonly("split",
                             [](PyClient& c) { return c.get().split() == tokfeed::Split::kEval ? "eval" : "train"; })
      .def_property_readonly("rank", [](PyClient& c) { return c.get().rank(); })
      .def_property_readonly("workers", [](PyClient& c) { return c.get().workers(); })
      .def_property_readonly("mapping_base",
                             [](PyClient& c) { return reinterpret_cast<uintptr_t>(c.get().mapping_base()); })
      .def_property_readonly("mapping_size", [](PyClient& c) { return c.get().mapping_size(); });

  py::class_<DeviceBatchRef>(m, "DeviceBatch")
      .def_property_readonly("epoch", [](const DeviceBatchRef& b) { return b.batch->epoch; })
      .def_property_readonly("step", [](const DeviceBatchRef& b) { return b.batch->step; })
      .def_property_readonly("index", [](const DeviceBatchRef& b) { return b.batch->index; })
      .def("tensors", &DeviceBatchRef::tensors, "dict name -> DLPack capsule on the device");

  py::class_<PyDeviceStream>(m, "DeviceStream")
      .def(py::init<PyClient&, int, unsigned>(), py::arg("client"), py::arg("device") = 0, py::arg("prefetch") = 2,
           py::keep_alive<1, 2>())
      .def("next", &PyDeviceStream::next, py::arg("consumer_stream"),
           "the next DeviceBatch (consumer_stream waits for its copies), or None at the end")
      .def("close", &PyDeviceStream::close)
      .def_property_readonly("host_registered", &PyDeviceStream::host_registered)
      .def_property_readonly("pool_buffers", &PyDeviceStream::pool_buffers);

  m.def(
      "cuda_device_count",
      [] {
        int n = 0;
        return tokfeed::cuda::device_count(n).ok() ? n : 0;
      },
      "number of CUDA devices: 0 without a driver, a device or a CUDA build (cuda_status() says why)");
  m.def(
      "cuda_status",
      [] {
        int n = 0;
        Status st = tokfeed::cuda::device_count(n);
        return st.ok() ? std::string() : st.message();
      },
      "why there is no CUDA device ('no CUDA device: ...'), or '' when there is one");
#ifdef TOKFEED_HAVE_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}
