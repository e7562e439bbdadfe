// What a CUDA device is: name, compute capability, memory, driver and runtime versions — the
// queries behind `mantissa devices` (torch.cuda.get_device_properties in spirit). Declared in
// every build; without CUDA (or for a device that does not exist) device_properties() throws.
#pragma once

#include <cstdint>
#include <string>

namespace mantissa::cuda {

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessor_count = 0;
  int64_t total_memory = 0;  // bytes
  int64_t free_memory = 0;   // bytes free on the device now (all processes)
  int driver_version = 0;    // CUDA version the driver supports, e.g. 12040 for 12.4
  int runtime_version = 0;   // CUDA runtime this library was built with
  std::string pci_bus_id;    // "0000:3B:00.0"; matches NVML's view of the device
};

DeviceProperties device_properties(int device = 0);

}  // namespace mantissa::cuda
