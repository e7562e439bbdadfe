// Devices: cpu and cuda:i, parsing, and the queries users make before choosing one.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

class Device {
 public:
  constexpr Device() = default;
  constexpr Device(DeviceType type, int index = 0)
      : type_(type), index_(static_cast<int16_t>(type == DeviceType::CPU ? 0 : index)) {}
  // "cpu", "cuda", "cuda:1". Throws mantissa::Error on anything else.
  Device(std::string_view spec);  // NOLINT: implicit, like torch.device("cuda:0")
  Device(const char* spec) : Device(std::string_view(spec)) {}  // NOLINT

  static constexpr Device cpu() { return Device(DeviceType::CPU); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }

 private:
  DeviceType type_ = DeviceType::CPU;
  int16_t index_ = 0;
};

std::ostream& operator<<(std::ostream& os, Device d);
std::ostream& operator<<(std::ostream& os, DeviceType t);
std::string_view device_type_name(DeviceType t);

// Throws a clear error if `d` does not exist here (no CUDA in this build, or index out of range).
void check_device_exists(Device d);

namespace cuda {
// True when this build has CUDA and a usable GPU is visible.
bool is_available();
int device_count();
// True when the library was compiled with the CUDA backend.
bool is_compiled();
}  // namespace cuda

// cuda:i if it exists, else cpu.
Device try_gpu(int i = 0);
// Every GPU, or {cpu} when there is none.
std::vector<Device> try_all_gpus();

}  // namespace mantissa
