// The cuDNN handle of each device, created on first use and kept for the life of the process
// (like the cuBLAS handles, cuda/cublas_handle.h), used under a mutex so that concurrent threads
// never share the handle's per-call state (its stream).
#pragma once

#include <cudnn.h>

#include <mutex>

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

}  // namespace mantissa::cuda
