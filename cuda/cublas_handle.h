// The cuBLAS handle of each device, created lazily on first use and shared by all threads.
//
// A CublasLease holds that device's mutex while the caller enqueues its cuBLAS calls: cuBLAS
// allows one handle on several threads, but serialising the (asynchronous, cheap) enqueue keeps
// any handle state a call sets from leaking into another thread's call. Handles are never
// destroyed: at process exit the CUDA context may already be gone (PyTorch does the same).
// Each lease points the handle at the current stream (cuda/stream.h) and at that
// stream's own workspace. Work on two streams may run at the same time, so they must not share
// one; and cuBLAS documents that without a workspace per stream its results may differ once
// several streams are active (it then picks internal workspaces, and kernels, per stream), which
// would break the bit-for-bit agreement of an eager step and its CUDA graph replay. A workspace is
// cudaMalloc'd on a stream's first cuBLAS call (even inside a capture) and kept for the process,
// outside the caching allocator's statistics; a later stream with the same handle takes it over
// (a Stream is synchronised before it is destroyed). Every handle forbids reduced-precision
// reductions so float16/bfloat16 GEMMs accumulate in float32 throughout.
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
