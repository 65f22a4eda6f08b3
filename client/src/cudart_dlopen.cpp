// The CUDA runtime, loaded at run time: libtokfeed links no CUDA library, so
// one build (and one wheel) serves CPU-only machines and every CUDA version
// torch ships. The functions cuda_stream.cpp calls are defined here, hidden
// inside libtokfeed's users, and forward to the libcudart found by:
//   1. TOKFEED_CUDART (a path or a soname), when set;
//   2. a libcudart already in the process (the one `import torch` loaded);
//   3. libcudart.so.13, .12, .11.0, then libcudart.so, by the loader's search
//      (LD_LIBRARY_PATH, ldconfig), then the build machine's toolkit.
// Without one, every call returns cudaErrorInsufficientDriver and
// cudaGetErrorString says what was looked for.
#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

// The C API only: cuda_runtime.h adds C++ template overloads (cudaMalloc<T>).
#pragma GCC visibility push(hidden)
#include <cuda_runtime_api.h>
#pragma GCC visibility pop

namespace {

struct Cudart {
  decltype(&::cudaDeviceGetAttribute) cudaDeviceGetAttribute = nullptr;
  decltype(&::cudaEventCreateWithFlags) cudaEventCreateWithFlags = nullptr;
  decltype(&::cudaEventDestroy) cudaEventDestroy = nullptr;
  decltype(&::cudaEventQuery) cudaEventQuery = nullptr;
  decltype(&::cudaEventRecord) cudaEventRecord = nullptr;
  decltype(&::cudaEventSynchronize) cudaEventSynchronize = nullptr;
  decltype(&::cudaFree) cudaFree = nullptr;
  decltype(&::cudaGetDevice) cudaGetDevice = nullptr;
  decltype(&::cudaGetDeviceCount) cudaGetDeviceCount = nullptr;
  decltype(&::cudaGetErrorName) cudaGetErrorName = nullptr;
  decltype(&::cudaGetErrorString) cudaGetErrorString = nullptr;
  decltype(&::cudaGetLastError) cudaGetLastError = nullptr;
  decltype(&::cudaHostRegister) cudaHostRegister = nullptr;
  decltype(&::cudaHostUnregister) cudaHostUnregister = nullptr;
  decltype(&::cudaMalloc) cudaMalloc = nullptr;
  decltype(&::cudaMemcpyAsync) cudaMemcpyAsync = nullptr;
  decltype(&::cudaSetDevice) cudaSetDevice = nullptr;
  decltype(&::cudaStreamCreateWithFlags) cudaStreamCreateWithFlags = nullptr;
  decltype(&::cudaStreamDestroy) cudaStreamDestroy = nullptr;
  decltype(&::cudaStreamSynchronize) cudaStreamSynchronize = nullptr;
  decltype(&::cudaStreamWaitEvent) cudaStreamWaitEvent = nullptr;
  bool ok = false;
  std::string why;  // when !ok: what was tried
};

template <class F>
bool sym(void* lib, const char* name, F& out, std::string& why) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (!out) why = std::string("the CUDA runtime found lacks ") + name + ": " + dlerror();
  return out != nullptr;
}

int find_loaded(dl_phdr_info* info, std::size_t, void* out) {
  const char* name = info->dlpi_name;
  const char* base = name ? std::strrchr(name, '/') : nullptr;
  base = base ? base + 1 : name;
  if (base && std::strncmp(base, "libcudart.so", 12) == 0) {
    *static_cast<std::string*>(out) = name;
    return 1;
  }
  return 0;
}

void* open_cudart(std::string& tried) {
  if (const char* env = std::getenv("TOKFEED_CUDART"); env && *env) {
    if (void* h = dlopen(env, RTLD_NOW | RTLD_LOCAL)) return h;
    tried = std::string("TOKFEED_CUDART=") + env + ": " + dlerror();
    return nullptr;
  }
  std::string loaded;
  dl_iterate_phdr(find_loaded, &loaded);
  if (!loaded.empty())
    if (void* h = dlopen(loaded.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const char* names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so",
#ifdef TOKFEED_CUDART_HINT
                         TOKFEED_CUDART_HINT
#endif
  };
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  tried =
      "no CUDA runtime (libcudart) found: none loaded in the process (import torch with CUDA first), none of "
      "libcudart.so.13/.12/.11.0 on the library path; set TOKFEED_CUDART to its path";
  return nullptr;
}

const Cudart& rt() {
  static Cudart c;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = open_cudart(c.why);
    if (!h) return;
    c.ok = sym(h, "cudaDeviceGetAttribute", c.cudaDeviceGetAttribute, c.why) &&
           sym(h, "cudaEventCreateWithFlags", c.cudaEventCreateWithFlags, c.why) &&
           sym(h, "cudaEventDestroy", c.cudaEventDestroy, c.why) && sym(h, "cudaEventQuery", c.cudaEventQuery, c.why) &&
           sym(h, "cudaEventRecord", c.cudaEventRecord, c.why) &&
           sym(h, "cudaEventSynchronize", c.cudaEventSynchronize, c.why) && sym(h, "cudaFree", c.cudaFree, c.why) &&
           sym(h, "cudaGetDevice", c.cudaGetDevice, c.why) &&
           sym(h, "cudaGetDeviceCount", c.cudaGetDeviceCount, c.why) &&
           sym(h, "cudaGetErrorName", c.cudaGetErrorName, c.why) &&
           sym(h, "cudaGetErrorString", c.cudaGetErrorString, c.why) &&
           sym(h, "cudaGetLastError", c.cudaGetLastError, c.why) &&
           sym(h, "cudaHostRegister", c.cudaHostRegister, c.why) &&
           sym(h, "cudaHostUnregister", c.cudaHostUnregister, c.why) && sym(h, "cudaMalloc", c.cudaMalloc, c.why) &&
           sym(h, "cudaMemcpyAsync", c.cudaMemcpyAsync, c.why) && sym(h, "cudaSetDevice", c.cudaSetDevice, c.why) &&
           sym(h, "cudaStreamCreateWithFlags", c.cudaStreamCreateWithFlags, c.why) &&
           sym(h, "cudaStreamDestroy", c.cudaStreamDestroy, c.why) &&
           sym(h, "cudaStreamSynchronize", c.cudaStreamSynchronize, c.why) &&
           sym(h, "cudaStreamWaitEvent", c.cudaStreamWaitEvent, c.why);
  });
  return c;
}

constexpr cudaError_t kMissing = cudaErrorInsufficientDriver;

}  // namespace

#define TOKFEED_FORWARD(name, params, args) \
  cudaError_t name params {                 \
    const Cudart& c = rt();                 \
    return c.ok ? c.name args : kMissing;   \
  }

extern "C" {
TOKFEED_FORWARD(cudaDeviceGetAttribute, (int* v, cudaDeviceAttr a, int d), (v, a, d))
TOKFEED_FORWARD(cudaEventCreateWithFlags, (cudaEvent_t * e, unsigned f), (e, f))
TOKFEED_FORWARD(cudaEventDestroy, (cudaEvent_t e), (e))
TOKFEED_FORWARD(cudaEventQuery, (cudaEvent_t e), (e))
TOKFEED_FORWARD(cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (e, s))
TOKFEED_FORWARD(cudaEventSynchronize, (cudaEvent_t e), (e))
TOKFEED_FORWARD(cudaFree, (void* p), (p))
TOKFEED_FORWARD(cudaGetDevice, (int* d), (d))
TOKFEED_FORWARD(cudaGetDeviceCount, (int* n), (n))
TOKFEED_FORWARD(cudaGetLastError, (), ())
TOKFEED_FORWARD(cudaHostRegister, (void* p, size_t n, unsigned f), (p, n, f))
TOKFEED_FORWARD(cudaHostUnregister, (void* p), (p))
TOKFEED_FORWARD(cudaMalloc, (void** p, size_t n), (p, n))
TOKFEED_FORWARD(cudaMemcpyAsync, (void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st),
                (d, s, n, k, st))
TOKFEED_FORWARD(cudaSetDevice, (int d), (d))
TOKFEED_FORWARD(cudaStreamCreateWithFlags, (cudaStream_t * s, unsigned f), (s, f))
TOKFEED_FORWARD(cudaStreamDestroy, (cudaStream_t s), (s))
TOKFEED_FORWARD(cudaStreamSynchronize, (cudaStream_t s), (s))
TOKFEED_FORWARD(cudaStreamWaitEvent, (cudaStream_t s, cudaEvent_t e, unsigned f), (s, e, f))

const char* cudaGetErrorName(cudaError_t e) {
  const Cudart& c = rt();
  return c.ok ? c.cudaGetErrorName(e) : "no CUDA runtime";
}

const char* cudaGetErrorString(cudaError_t e) {
  const Cudart& c = rt();
  return c.ok ? c.cudaGetErrorString(e) : c.why.c_str();
}
}
