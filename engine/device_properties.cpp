#include "engine/device_properties.h"

#include "engine/backend_hooks.h"

namespace mantissa::cuda {

DeviceProperties device_properties(int device) {
  check_device_exists(Device::cuda(device));
  return cuda_hooks()->device_properties(device);
}

}  // namespace mantissa::cuda
