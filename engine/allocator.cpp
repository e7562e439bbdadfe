#include "engine/allocator.h"

#include <cstdlib>
#include <new>

#include "engine/backend_hooks.h"
#include "engine/error.h"

namespace mantissa {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    constexpr size_t kAlign = 64;
    const size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    MT_CHECK(p != nullptr, "cpu: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
};

const CudaHooks*& hooks_slot() {
  static const CudaHooks* hooks = nullptr;
  return hooks;
}

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator alloc;
  return &alloc;
}

Allocator* allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  check_device_exists(device);
  return cuda_hooks()->allocator(device.index());
}

const CudaHooks* cuda_hooks() { return hooks_slot(); }
void register_cuda_hooks(const CudaHooks* hooks) { hooks_slot() = hooks; }

}  // namespace mantissa
