// The device flag through which the CUDA index kernels (embedding, gather, scatter_add,
// index_select, index_add) report an out-of-range index: {set, index}, set once by the first
// thread that meets one (atomicCAS), which then skips its element.
//
// Eagerly the flag is a fresh zeroed pair and check() reads it back at once and throws the CPU's
// message, so each of these ops costs one host round trip. Under a CUDA graph capture, which
// cannot wait for the device, the flag is a slot of cuda/deferred_index_checks.h that the next
// host read on the device reports, and check() does nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/current_stream.h"
#include "cuda/deferred_index_checks.h"
#include "engine/factory.h"
#include "engine/tensor.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/index_views.h"

namespace mantissa::cuda {

class BadIndexFlag {
 public:
  // For `op`'s indices into dimension `dim` of size `size`, on the current stream of `device`.
  BadIndexFlag(Device device, const char* op, int64_t dim, int64_t size)
      : op_(op), dim_(dim), size_(size), stream_(detail::current_stream()) {
    if (detail::is_capturing(stream_)) {
      ptr_ = detail::index_check_slot(device.index(), op, dim, size);
      return;
    }
    buf_ = empty(Shape{2}, TensorOptions(device).dtype(kInt64));
    ptr_ = static_cast<unsigned long long*>(buf_.data_ptr());
    MT_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, 2 * sizeof(int64_t), stream_));
  }
  unsigned long long* device_ptr() const { return ptr_; }
  // Eagerly: waits for the kernels queued so far and throws if one met a bad index.
  void check() const {
    if (!buf_.defined()) return;  // captured: reported by the next host read
    int64_t host[2] = {0, 0};
    MT_CUDA_CHECK(cudaMemcpyAsync(host, ptr_, sizeof(host), cudaMemcpyDeviceToHost, stream_));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (host[0] != 0) index_views::throw_out_of_bounds(op_, host[1], dim_, size_);
  }

 private:
  const char* op_;
  int64_t dim_, size_;
  cudaStream_t stream_;
  Tensor buf_;
  unsigned long long* ptr_ = nullptr;
};

__device__ __forceinline__ void record_bad_index(unsigned long long* flag, int64_t idx) {
  if (atomicCAS(flag, 0ull, 1ull) == 0ull) flag[1] = static_cast<unsigned long long>(idx);
}

}  // namespace mantissa::cuda
