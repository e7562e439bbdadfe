#include "engine/allocator.h"

#include "engine/backend_hooks.h"
#include "engine/cpu_allocator.h"
#include "engine/error.h"

namespace mantissa {
namespace {

const CudaHooks*& hooks_slot() {
  static const CudaHooks* hooks = nullptr;
  return hooks;
}

}  // namespace

Allocator* cpu_allocator() { return detail::caching_cpu_allocator(); }

Allocator* allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  check_device_exists(device);
  return cuda_hooks()->allocator(device.index());
}

const CudaHooks* cuda_hooks() { return hooks_slot(); }
void register_cuda_hooks(const CudaHooks* hooks) { hooks_slot() = hooks; }

}  // namespace mantissa
