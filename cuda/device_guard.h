// DeviceGuard: makes `device` current for a scope and restores the previous device on exit, so
// work on cuda:1 never leaves the caller's thread pointed somewhere it did not choose.
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"

namespace mantissa::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MT_CUDA_CHECK(cudaSetDevice(device));
    current_ = device;
  }
  ~DeviceGuard() {
    // Restoring can only fail if the device just failed; a destructor must not throw, and the
    // original error has already been reported.
    if (previous_ != current_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int current_ = 0;
};

}  // namespace mantissa::cuda
