// The seam through which an optional backend (the CUDA runtime in cuda/) plugs into the engine
// without the engine depending on it. A CPU-only build has no hooks registered.
#pragma once

#include <cstddef>
#include <string>

#include "engine/allocator.h"
#include "engine/device.h"
#include "engine/device_properties.h"

namespace mantissa {

class CudaHooks {
 public:
  virtual ~CudaHooks() = default;
  virtual int device_count() const = 0;
  virtual Allocator* allocator(int device) const = 0;
  // Copies nbytes between any two devices (cpu<->cuda, cuda<->cuda) on the current stream(s).
  // The host waits for the copy unless `non_blocking` and the host side is pinned (PyTorch
  // semantics); copies between GPUs never make the host wait.
  virtual void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                          size_t nbytes, bool non_blocking) const = 0;
  virtual void synchronize(int device) const = 0;
  // Whether this thread's current stream of cuda:`device` is capturing a CUDA graph.
  virtual bool is_capturing(int device) const = 0;
  virtual std::string device_name(int device) const = 0;
  // Name, compute capability, memory and versions (engine/device_properties.h).
  virtual cuda::DeviceProperties device_properties(int device) const = 0;
  // Versions of the CUDA stack and, with no usable device, the runtime's reason.
  virtual cuda::RuntimeInfo runtime_info() const = 0;
  // The caching allocator's statistics and control (cuda/memory.h).
  virtual cuda::MemoryStats memory_stats(int device) const = 0;
  virtual void reset_peak_memory_stats(int device) const = 0;
  virtual void empty_cache() const = 0;
  // Pinned host memory (Tensor::pin_memory): its allocator, and whether `ptr` lies in it.
  virtual Allocator* pinned_allocator() const = 0;
  virtual bool is_pinned(const void* ptr) const = 0;
};

// nullptr in a build without CUDA.
const CudaHooks* cuda_hooks();
// Called once by the CUDA backend during static initialisation.
void register_cuda_hooks(const CudaHooks* hooks);

}  // namespace mantissa
