#include "kernels/cuda/cublas_handle.h"

#include <memory>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_guard.h"
#include "kernels/cuda/stream.h"

namespace mantissa::cuda {
namespace {

struct Slot {
  std::once_flag created;
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
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

}  // namespace

CublasLease::CublasLease(int device) {
  Slot& s = slot(device);
  // A failed creation throws out of call_once, which leaves the flag unset to retry next time.
  std::call_once(s.created, [&] {
    DeviceGuard guard(device);
    cublasHandle_t h = nullptr;
    MT_CUBLAS_CHECK(cublasCreate(&h));
    MT_CUBLAS_CHECK(cublasSetMathMode(
        h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    s.handle = h;
  });
  lock_ = std::unique_lock<std::mutex>(s.mutex);
  handle_ = s.handle;
  MT_CUBLAS_CHECK(cublasSetStream(handle_, detail::current_stream()));
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
