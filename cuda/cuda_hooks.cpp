// The CUDA backend's entry into the engine (engine/backend_hooks.h): device discovery, the
// per-device allocators, pinned memory, copies between devices, and synchronisation. Registered
// during static initialisation, so merely linking the library with CUDA makes cuda:i usable.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#if MANTISSA_HAS_NCCL
#include <nccl.h>
#endif

#include <cstring>
#include <mutex>
#include <string>

#include "cuda/allocator.h"
#include "cuda/cuda_check.h"
#include "cuda/cudnn_handle.h"
#include "cuda/current_stream.h"
#include "cuda/deferred_index_checks.h"
#include "cuda/device_guard.h"
#include "cuda/pinned_allocator.h"
#include "cuda/stream.h"
#include "engine/backend_hooks.h"
#include "engine/error.h"
#include "engine/logging.h"

namespace mantissa::cuda {
namespace {

// Asks the runtime once: the count cannot change within a process (CUDA_VISIBLE_DEVICES is read
// at initialisation). Any failure means "no usable GPU", never an exception: callers such as
// try_gpu() must work on machines without a driver. The failure is kept, with the runtime's own
// words, for runtime_info(): a GPU machine on which the runtime cannot start must say why.
struct DeviceQuery {
  int count = 0;
  std::string reason;  // empty when count > 0
};

DeviceQuery query_devices() {
  DeviceQuery q;
  const cudaError_t err = cudaGetDeviceCount(&q.count);
  if (err == cudaSuccess) {
    if (q.count == 0) q.reason = "cudaGetDeviceCount found 0 devices";
    return q;
  }
  (void)cudaGetLastError();
  q.count = 0;
  q.reason = std::string("cudaGetDeviceCount failed with ") + cudaGetErrorName(err) + " (" +
             cudaGetErrorString(err) + ")";
  if (err != cudaErrorNoDevice && err != cudaErrorInsufficientDriver) {
    log().warn("CUDA is unavailable: {}; using 0 devices", q.reason);
  }
  return q;
}

const DeviceQuery& device_query() {
  static const DeviceQuery q = query_devices();
  return q;
}

class CudaHooksImpl final : public CudaHooks {
 public:
  int device_count() const override { return device_query().count; }

  Allocator* allocator(int device) const override { return caching_allocator(device); }
  cuda::MemoryStats memory_stats(int device) const override {
    return block_allocator(device).stats();
  }
  void reset_peak_memory_stats(int device) const override { block_allocator(device).reset_peaks(); }
  void empty_cache() const override {
    caching_allocator_empty_cache();
    pinned_empty_cache();
  }
  Allocator* pinned_allocator() const override { return cuda::pinned_allocator(); }
  bool is_pinned(const void* ptr) const override { return is_pinned_ptr(ptr); }

  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                  bool non_blocking) const override {
    if (nbytes == 0) return;
    if (dst_device.is_cpu() && src_device.is_cpu()) {
      std::memcpy(dst, src, nbytes);
    } else if (dst_device.is_cpu() || src_device.is_cpu()) {
      // Host <-> device on the device's current stream. Only a pinned host buffer lets the copy
      // run while the host goes on; with pageable memory the host waits (as in PyTorch), and so
      // does it unless non_blocking was asked for.
      const bool to_host = dst_device.is_cpu();
      const int device = to_host ? src_device.index() : dst_device.index();
      const void* host = to_host ? dst : src;
      const bool async = non_blocking && is_pinned_ptr(host);
      DeviceGuard guard(device);
      const cudaStream_t stream = detail::current_stream(device);
      if (!async) {
        detail::check_not_capturing(stream, to_host ? "copy from CUDA to the CPU"
                                                    : "copy from pageable CPU memory to CUDA");
      }
      MT_CUDA_CHECK(cudaMemcpyAsync(
          dst, src, nbytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream));
      if (async) {
        // The pinned block must outlive the copy: it is reused only after this stream's work.
        pinned_record_stream(host, device, stream);
      } else {
        MT_CUDA_CHECK(cudaStreamSynchronize(stream));
        // A host that has waited for the device hears of a bad index a replayed graph met.
        if (to_host) detail::raise_deferred_index_errors(device);
      }
    } else if (dst_device == src_device) {
      DeviceGuard guard(dst_device.index());
      MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice,
                                    detail::current_stream(dst_device.index())));
    } else {
      // Between GPUs, on the destination's current stream, after the work queued on the source's
      // current stream; the source's stream then waits for the copy, so the source block (which
      // the allocator reuses on that stream) is not overwritten before it has been read. Works
      // with or without peer access (the driver stages through the host if needed).
      const Stream dst_stream = current_stream(dst_device.index());
      const Stream src_stream = current_stream(src_device.index());
      dst_stream.wait(src_stream);
      {
        DeviceGuard guard(dst_device.index());
        MT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index(), src, src_device.index(), nbytes,
                                          static_cast<cudaStream_t>(dst_stream.handle())));
      }
      src_stream.wait(dst_stream);
    }
  }

  void synchronize(int device) const override { cuda::synchronize(device); }

  bool is_capturing(int device) const override {
    return detail::is_capturing(detail::current_stream(device));
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

  cuda::RuntimeInfo runtime_info() const override {
    cuda::RuntimeInfo info;
    info.compiled = true;
    info.device_count = device_query().count;
    info.unavailable_reason = device_query().reason;
    // Each query answers without a device; a failure leaves 0 ("none").
    if (cudaDriverGetVersion(&info.driver_version) != cudaSuccess) info.driver_version = 0;
    if (cudaRuntimeGetVersion(&info.runtime_version) != cudaSuccess) info.runtime_version = 0;
    (void)cudaGetLastError();
    info.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
    info.cudnn_version = static_cast<int64_t>(cudnnGetVersion());
    info.cudnn_build_version = CUDNN_VERSION;
    info.cudnn_frontend_version = cudnn_frontend_version();
#if MANTISSA_HAS_NCCL
    int nccl = 0;
    if (ncclGetVersion(&nccl) == ncclSuccess) info.nccl_version = nccl;
#endif
    return info;
  }
};

const CudaHooksImpl kHooks;

[[maybe_unused]] const bool kRegistered = [] {
  register_cuda_hooks(&kHooks);
  return true;
}();

}  // namespace
}  // namespace mantissa::cuda
