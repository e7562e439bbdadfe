#include "cuda/cublas_handle.h"

#include <memory>
#include <unordered_map>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/device_guard.h"
#include "engine/device.h"
#include "engine/error.h"

namespace mantissa::cuda {
namespace {

struct Slot {
  std::once_flag created;
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
  size_t workspace_bytes = 0;
  std::unordered_map<cudaStream_t, void*> workspaces;  // under `mutex`
  std::once_flag lt_created;
  cublasLtHandle_t lt_handle = nullptr;
};

Slot& slot(int device) {
  // The device count cannot change within a process, so the slots are made once.
  static const std::vector<std::unique_ptr<Slot>> slots = [] {
    std::vector<std::unique_ptr<Slot>> v;
    for (int i = 0; i < device_count(); ++i) v.push_back(std::make_unique<Slot>());
    return v;
  }();
  MT_CHECK(device >= 0 && device < static_cast<int>(slots.size()),
           "cuBLAS: no device cuda:", device, " (", slots.size(), " visible)");
  return *slots[device];
}

// The cuBLAS documentation (cublasSetWorkspace) recommends 32 MiB on Hopper and later, 4 MiB on
// earlier architectures: what its default pool gives a stream, so kernel choice is unchanged.
size_t workspace_bytes_for(int device) {
  int major = 0;
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return (major >= 9 ? size_t{32} : size_t{4}) << 20;
}

// The workspace of `stream` (made on its first cuBLAS call); the caller holds s.mutex.
void* workspace_of(Slot& s, int device, cudaStream_t stream) {
  auto it = s.workspaces.find(stream);
  if (it != s.workspaces.end()) return it->second;
  DeviceGuard guard(device);
  void* ptr = raw_cuda_malloc(s.workspace_bytes);
  if (ptr == nullptr) {
    // Cached blocks may hold the memory (a no-op during a capture, which cannot free).
    block_allocator(device).empty_cache();
    ptr = raw_cuda_malloc(s.workspace_bytes);
  }
  MT_CHECK(ptr != nullptr, "cuBLAS: CUDA out of memory on cuda:", device, " for the ",
           s.workspace_bytes >> 20, " MiB cuBLAS workspace of a stream");
  s.workspaces.emplace(stream, ptr);
  return ptr;
}

}  // namespace

CublasLease::CublasLease(int device) {
  Slot& s = slot(device);
  // A failed creation throws out of call_once, which leaves the flag unset to retry next time.
  std::call_once(s.created, [&] {
    DeviceGuard guard(device);
    const size_t workspace_bytes = workspace_bytes_for(device);
    cublasHandle_t h = nullptr;
    MT_CUBLAS_CHECK(cublasCreate(&h));
    MT_CUBLAS_CHECK(cublasSetMathMode(
        h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    s.workspace_bytes = workspace_bytes;
    s.handle = h;
  });
  lock_ = std::unique_lock<std::mutex>(s.mutex);
  handle_ = s.handle;
  const cudaStream_t stream = detail::current_stream(device);
  MT_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  // cublasSetStream puts the handle back on cuBLAS's default workspace, so this follows it on
  // every lease.
  MT_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_of(s, device, stream), s.workspace_bytes));
}

cublasLtHandle_t cublaslt_handle(int device) {
  Slot& s = slot(device);
  std::call_once(s.lt_created, [&] {
    DeviceGuard guard(device);
    cublasLtHandle_t h = nullptr;
    MT_CUBLAS_CHECK(cublasLtCreate(&h));
    s.lt_handle = h;
  });
  return s.lt_handle;
}

}  // namespace mantissa::cuda
