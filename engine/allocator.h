// Allocators: where tensor memory comes from. The CPU allocator is 64-byte aligned; the CUDA
// backend (the cuda/ runtime) registers its caching allocator through the backend hooks.
#pragma once

#include <cstddef>

#include "engine/device.h"

namespace mantissa {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

// The allocator for a device; throws if the device does not exist in this build/machine.
Allocator* allocator_for(Device device);
Allocator* cpu_allocator();

}  // namespace mantissa
