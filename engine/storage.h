// Storage: a reference-counted block of memory on one device, shared by a tensor and its views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/allocator.h"
#include "engine/device.h"

namespace mantissa {

struct StorageImpl {
  StorageImpl(size_t nbytes, Device device);  // allocates
  StorageImpl(void* external, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  Allocator* allocator = nullptr;  // owning allocator, or nullptr for external memory
  std::function<void(void*)> deleter;
  // Bumped by every in-place write; autograd compares it with the version saved at record time.
  uint32_t version = 0;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace mantissa
