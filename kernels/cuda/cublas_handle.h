// The cuBLAS handle of each device, created lazily on first use and shared by all threads.
//
// A CublasLease holds that device's mutex while the caller enqueues its cuBLAS calls: cuBLAS
// allows one handle on several threads, but serialising the (asynchronous, cheap) enqueue keeps
// any handle state a call sets from leaking into another thread's call. Handles are never
// destroyed: at process exit the CUDA context may already be gone (PyTorch does the same).
// Each lease points the handle at the current stream (kernels/cuda/stream.h); every handle
// forbids reduced-precision reductions so float16/bfloat16 GEMMs accumulate in float32 throughout.
//
// cuBLASLt handles keep no per-call state (stream, workspace and compute type are arguments of
// each cublasLtMatmul), so cublaslt_handle() shares one per device without a lock.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <mutex>

namespace mantissa::cuda {

class CublasLease {
 public:
  // Makes no device current: callers hold a DeviceGuard for `device` while using the handle.
  explicit CublasLease(int device);
  cublasHandle_t handle() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  cublasHandle_t handle_ = nullptr;
};

// The cuBLASLt handle of `device`, created on first use (the caller holds a DeviceGuard).
cublasLtHandle_t cublaslt_handle(int device);

}  // namespace mantissa::cuda
