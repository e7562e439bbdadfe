#include "engine/storage.h"

namespace mantissa {

StorageImpl::StorageImpl(size_t n, Device d) : nbytes(n), device(d), allocator(allocator_for(d)) {
  data = allocator->allocate(n);
}

StorageImpl::StorageImpl(void* external, size_t n, Device d, std::function<void(void*)> del)
    : data(external), nbytes(n), device(d), deleter(std::move(del)) {}

StorageImpl::~StorageImpl() {
  if (allocator) {
    allocator->deallocate(data, nbytes);
  } else if (deleter) {
    deleter(data);
  }
}

}  // namespace mantissa
