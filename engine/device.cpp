#include "engine/device.h"

#include <charconv>
#include <ostream>

#include "engine/backend_hooks.h"
#include "engine/error.h"

namespace mantissa {

Device::Device(std::string_view spec) {
  auto bad = [&] { MT_THROW("invalid device string '", spec, "' (expected cpu, cuda or cuda:N)"); };
  if (spec == "cpu") {
    *this = Device::cpu();
    return;
  }
  if (spec.substr(0, 4) != "cuda") bad();
  if (spec.size() == 4) {
    *this = Device::cuda(0);
    return;
  }
  if (spec[4] != ':' || spec.size() == 5) bad();
  int index = -1;
  auto digits = spec.substr(5);
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || index < 0 || index > 1024) bad();
  *this = Device::cuda(index);
}

std::string_view device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index_); }

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << device_type_name(t); }

void check_device_exists(Device d) {
  if (d.is_cpu()) return;
  MT_CHECK(cuda::is_compiled(), "device ", d,
           " requested, but this build of mantissa has no CUDA support "
           "(rebuild with nvcc available and -DMANTISSA_CUDA=ON)");
  const int n = cuda::device_count();
  MT_CHECK(d.index() < n, "device ", d, " requested, but this machine has ", n, " CUDA device",
           n == 1 ? "" : "s",
           n > 0 ? " (valid: cuda:0 to cuda:" + std::to_string(n - 1) + ")" : "");
}

namespace cuda {
bool is_compiled() { return cuda_hooks() != nullptr; }
int device_count() { return cuda_hooks() ? cuda_hooks()->device_count() : 0; }
bool is_available() { return device_count() > 0; }
}  // namespace cuda

Device try_gpu(int i) {
  return i >= 0 && i < cuda::device_count() ? Device::cuda(i) : Device::cpu();
}

std::vector<Device> try_all_gpus() {
  std::vector<Device> out;
  for (int i = 0; i < cuda::device_count(); ++i) out.push_back(Device::cuda(i));
  if (out.empty()) out.push_back(Device::cpu());
  return out;
}

}  // namespace mantissa
