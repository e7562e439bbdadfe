// The CUDA backend's entry into the engine (engine/backend_hooks.h): device discovery, the
// per-device allocators, copies between devices, and synchronisation. Registered during static
// initialisation, so merely linking the library with CUDA makes cuda:i usable.
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <string>

#include "engine/backend_hooks.h"
#include "engine/error.h"
#include "engine/logging.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_guard.h"

namespace mantissa::cuda {
namespace {

// Asks the runtime once: the count cannot change within a process (CUDA_VISIBLE_DEVICES is read
// at initialisation). Any failure means "no usable GPU", never an exception: callers such as
// try_gpu() must work on machines without a driver.
int query_device_count() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess) return count;
  (void)cudaGetLastError();
  if (err != cudaErrorNoDevice && err != cudaErrorInsufficientDriver) {
    log().warn("CUDA is unavailable: cudaGetDeviceCount failed with {} ({}); using 0 devices",
               cudaGetErrorName(err), cudaGetErrorString(err));
  }
  return 0;
}

class CudaHooksImpl final : public CudaHooks {
 public:
  int device_count() const override {
    static const int count = query_device_count();
    return count;
  }

  Allocator* allocator(int device) const override { return caching_allocator(device); }
  cuda::MemoryStats memory_stats(int device) const override {
    return caching_allocator_stats(device);
  }
  void reset_peak_memory_stats(int device) const override { caching_allocator_reset_peaks(device); }
  void empty_cache() const override { caching_allocator_empty_cache(); }

  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                  size_t nbytes) const override {
    if (nbytes == 0) return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
      std::memcpy(dst, src, nbytes);
    } else if (dst_device.is_cpu()) {
      // Device to pageable host memory: cudaMemcpy returns once the data is on the host.
      DeviceGuard guard(src_device.index());
      MT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
    } else if (src_device.is_cpu()) {
      // From pageable host memory cudaMemcpy returns once `src` has been staged, so the caller
      // may reuse it at once; kernels queued later on the default stream see the data.
      DeviceGuard guard(dst_device.index());
      MT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
    } else if (dst_device == src_device) {
      DeviceGuard guard(dst_device.index());
      MT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToDevice));
    } else {
      // Works with or without peer access (the driver stages through the host if needed) and is
      // ordered after pending work on both devices.
      DeviceGuard guard(dst_device.index());
      MT_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index(), src, src_device.index(), nbytes));
    }
  }

  void synchronize(int device) const override {
    check_device_exists(Device::cuda(device));
    DeviceGuard guard(device);
    MT_CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::string device_name(int device) const override {
    check_device_exists(Device::cuda(device));
    cudaDeviceProp prop;
    MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return prop.name;
  }

  cuda::DeviceProperties device_properties(int device) const override {
    check_device_exists(Device::cuda(device));
    DeviceGuard guard(device);
    cudaDeviceProp prop;
    MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    cuda::DeviceProperties p;
    p.name = prop.name;
    p.major = prop.major;
    p.minor = prop.minor;
    p.multiprocessor_count = prop.multiProcessorCount;
    size_t free_bytes = 0, total_bytes = 0;
    MT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    p.total_memory = static_cast<int64_t>(total_bytes);
    p.free_memory = static_cast<int64_t>(free_bytes);
    MT_CUDA_CHECK(cudaDriverGetVersion(&p.driver_version));
    MT_CUDA_CHECK(cudaRuntimeGetVersion(&p.runtime_version));
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) == cudaSuccess) p.pci_bus_id = bus;
    (void)cudaGetLastError();
    return p;
  }
};

const CudaHooksImpl kHooks;

[[maybe_unused]] const bool kRegistered = [] {
  register_cuda_hooks(&kHooks);
  return true;
}();

}  // namespace
}  // namespace mantissa::cuda
