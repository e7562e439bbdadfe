// cuda/memory.h, through the backend hooks (engine/backend_hooks.h): compiled in every build.
#include "cuda/memory.h"

#include "engine/backend_hooks.h"
#include "engine/error.h"

namespace mantissa::cuda {

MemoryStats memory_stats(int device) {
  check_device_exists(Device::cuda(device));
  return cuda_hooks()->memory_stats(device);
}

void reset_peak_memory_stats(int device) {
  check_device_exists(Device::cuda(device));
  cuda_hooks()->reset_peak_memory_stats(device);
}

void empty_cache() {
  if (const CudaHooks* hooks = cuda_hooks()) hooks->empty_cache();
}

}  // namespace mantissa::cuda
