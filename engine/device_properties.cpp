#include "engine/device_properties.h"

#include <sstream>

#include "engine/backend_hooks.h"

namespace mantissa::cuda {

DeviceProperties device_properties(int device) {
  check_device_exists(Device::cuda(device));
  return cuda_hooks()->device_properties(device);
}

RuntimeInfo runtime_info() {
  if (cuda_hooks() == nullptr) {
    RuntimeInfo info;
    info.unavailable_reason = "CPU-only build";
    return info;
  }
  return cuda_hooks()->runtime_info();
}

namespace {

// CUDA's 13000 -> "13.0"; 0 -> "none".
std::string cuda_version(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
// Libraries that encode major * scale + minor * 100 + patch (cuBLASLt, cuDNN 9 and NCCL 2.9+:
// 10000; cuDNN 8: 1000) -> "M.m.p"; 0 -> "none".
std::string library_version(int64_t v, int64_t scale) {
  if (v <= 0) return "none";
  return std::to_string(v / scale) + "." + std::to_string((v % scale) / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

std::string runtime_banner() {
  const RuntimeInfo info = runtime_info();
  std::ostringstream os;
  os << "CUDA: ";
  if (info.device_count > 0) {
    try {
      const DeviceProperties p = device_properties(0);
      os << p.name << " (sm_" << p.major << p.minor << ", " << p.multiprocessor_count << " SMs, "
         << info.device_count << (info.device_count == 1 ? " device" : " devices") << ")";
    } catch (const std::exception& e) {
      os << info.device_count << " device(s), cuda:0 unreadable (" << e.what() << ")";
    }
  } else {
    os << "no usable device (" << info.unavailable_reason << ")";
  }
  if (info.compiled) {
    os << " | driver " << cuda_version(info.driver_version) << " | runtime "
       << cuda_version(info.runtime_version) << " | cuBLASLt "
       << library_version(info.cublaslt_version, 10000) << " | cuDNN "
       << library_version(info.cudnn_version, info.cudnn_version < 90000 ? 1000 : 10000)
       << " (built against "
       << library_version(info.cudnn_build_version, info.cudnn_build_version < 90000 ? 1000 : 10000)
       << "; fused attention: "
       << (info.cudnn_frontend_version.empty() ? std::string("not built")
                                               : "frontend " + info.cudnn_frontend_version)
       << ") | NCCL " << library_version(info.nccl_version, 10000);
  }
  return os.str();
}

}  // namespace mantissa::cuda
