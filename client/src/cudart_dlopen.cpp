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
#define TOKFEED_CUDART_FN(name) decltype(&::name) name = nullptr;
#define TOKFEED_CUDART_FNS(X)                                                                                          \
  X(cudaDeviceGetAttribute)                                                                                            \
  X(cudaEventCreateWithFlags) X(cudaEventDestroy) X(cudaEventQuery) X(cudaEventRecord) X(cudaEventSynchronize)         \
      X(cudaFree) X(cudaGetDevice) X(cudaGetDeviceCount) X(cudaGetErrorName) X(cudaGetErrorString) X(cudaGetLastError) \
          X(cudaHostRegister) X(cudaHostUnregister) X(cudaMalloc) X(cudaMemcpyAsync) X(cudaSetDevice)                  \
              X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaStreamSynchronize) X(cudaStreamWaitEvent)
  TOKFEED_CUDART_FNS(TOKFEED_CUDART_FN)
#undef TOKFEED_CUDART_FN
  bool ok = false;
  std::string why;  // when !ok: what was tried
};

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
#define TOKFEED_CUDART_SYM(name)                                                 \
  c.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));                 \
  if (!c.name) {                                                                 \
    c.why = std::string("the CUDA runtime found lacks " #name ": ") + dlerror(); \
    return;                                                                      \
  }
    TOKFEED_CUDART_FNS(TOKFEED_CUDART_SYM)
#undef TOKFEED_CUDART_SYM
    c.ok = true;
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
