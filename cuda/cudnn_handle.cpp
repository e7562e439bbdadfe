#include "cuda/cudnn_handle.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "engine/device.h"
#include "engine/error.h"

namespace mantissa::cuda {
namespace {

struct HandleSlot {
  std::once_flag created;
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
};

HandleSlot& handle_slot(int device) {
  static const std::vector<std::unique_ptr<HandleSlot>> slots = [] {
    std::vector<std::unique_ptr<HandleSlot>> v;
    for (int i = 0; i < device_count(); ++i) v.push_back(std::make_unique<HandleSlot>());
    return v;
  }();
  MT_CHECK(device >= 0 && device < static_cast<int>(slots.size()), "cuDNN: no device cuda:", device,
           " (", slots.size(), " visible)");
  return *slots[device];
}

std::mutex& frontend_version_mutex() {
  static std::mutex m;
  return m;
}

std::string& frontend_version_slot() {
  static std::string version;
  return version;
}

}  // namespace

void set_cudnn_frontend_version(std::string version) {
  std::lock_guard<std::mutex> lock(frontend_version_mutex());
  frontend_version_slot() = std::move(version);
}

std::string cudnn_frontend_version() {
  std::lock_guard<std::mutex> lock(frontend_version_mutex());
  return frontend_version_slot();
}

CudnnLease::CudnnLease(int device) {
  HandleSlot& s = handle_slot(device);
  std::call_once(s.created, [&] {
    cudnnHandle_t h = nullptr;
    MT_CUDNN_CHECK(cudnnCreate(&h));
    s.handle = h;
  });
  lock_ = std::unique_lock<std::mutex>(s.mutex);
  handle_ = s.handle;
  MT_CUDNN_CHECK(cudnnSetStream(handle_, detail::current_stream()));
}

}  // namespace mantissa::cuda
