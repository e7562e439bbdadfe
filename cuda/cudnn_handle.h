// The cuDNN handle of each device, created on first use and kept for the life of the process
// (like the cuBLAS handles, cuda/cublas_handle.h), used under a mutex so that concurrent threads
// never share the handle's per-call state (its stream).
#pragma once

#include <cudnn.h>

#include <mutex>
#include <string>

namespace mantissa::cuda {

// Holds the device's handle mutex while the caller enqueues its cuDNN calls, with the handle
// pointed at the current stream. Makes no device current: callers hold a DeviceGuard.
class CudnnLease {
 public:
  explicit CudnnLease(int device);
  cudnnHandle_t handle() const { return handle_; }
  // Gives the handle back early (a fallback that needs no cuDNN must not hold up other threads).
  void release() {
    if (lock_.owns_lock()) lock_.unlock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
  cudnnHandle_t handle_ = nullptr;
};

// The cuDNN frontend version this build's fused attention was compiled with ("1.32.0"), or ""
// without the frontend. The attention kernels, the one file that includes the frontend's headers,
// set it at start-up (kernels/cuda/cudnn_attention.cpp); the device report reads it.
void set_cudnn_frontend_version(std::string version);
std::string cudnn_frontend_version();

}  // namespace mantissa::cuda
