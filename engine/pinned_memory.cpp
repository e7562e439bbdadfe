// Tensor::is_pinned and pin_memory: pinned host memory comes from the CUDA backend, reached
// through its hooks (a build without CUDA has none and says so).
#include <memory>

#include "engine/backend_hooks.h"
#include "engine/error.h"
#include "engine/factory.h"
#include "engine/tensor.h"

namespace mantissa {

bool Tensor::is_pinned() const {
  if (!defined() || !device().is_cpu() || storage()->data == nullptr) return false;
  const CudaHooks* hooks = cuda_hooks();
  return hooks != nullptr && hooks->device_count() > 0 && hooks->is_pinned(storage()->data);
}

Tensor Tensor::pin_memory() const {
  MT_CHECK(defined(), "pin_memory: undefined tensor");
  MT_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got a tensor on ",
           device());
  const CudaHooks* hooks = cuda_hooks();
  MT_CHECK(hooks != nullptr,
           "pin_memory: pinned host memory needs CUDA, but this build of mantissa has no CUDA "
           "support (rebuild with nvcc available and -DMANTISSA_CUDA=ON)");
  MT_CHECK(hooks->device_count() > 0,
           "pin_memory: pinned host memory needs a CUDA device, and this machine has none");
  if (is_pinned()) return *this;
  Allocator* pinned = hooks->pinned_allocator();
  const size_t nbytes = static_cast<size_t>(this->nbytes());
  auto storage =
      std::make_shared<StorageImpl>(pinned->allocate(nbytes), nbytes, Device::cpu(),
                                    [pinned, nbytes](void* p) { pinned->deallocate(p, nbytes); });
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = shape();
  impl->strides = contiguous_strides(shape());
  impl->dtype = dtype();
  impl->refresh_contiguous();
  Tensor out(std::move(impl));
  detail::copy_into(out, *this);
  return out;
}

}  // namespace mantissa
