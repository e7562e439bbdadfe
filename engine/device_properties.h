// What a CUDA device is: name, compute capability, memory, driver and runtime versions — the
// queries behind `mantissa devices` (torch.cuda.get_device_properties in spirit). Declared in
// every build; without CUDA (or for a device that does not exist) device_properties() throws.
#pragma once

#include <cstdint>
#include <string>

namespace mantissa::cuda {

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessor_count = 0;
  int64_t total_memory = 0;  // bytes
  int64_t free_memory = 0;   // bytes free on the device now (all processes)
  int driver_version = 0;    // CUDA version the driver supports, e.g. 12040 for 12.4
  int runtime_version = 0;   // CUDA runtime this library was built with
  std::string pci_bus_id;    // "0000:3B:00.0"; matches NVML's view of the device
};

DeviceProperties device_properties(int device = 0);

// The caching allocator's statistics (cuda::memory_stats() in cuda/memory.h). Declared here, with
// the other values the CUDA backend reports through engine/backend_hooks.h, so that the engine
// needs nothing from cuda/.
struct MemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors (block sizes, after rounding)
  int64_t reserved_bytes = 0;        // obtained from cudaMalloc: allocated + cached
  int64_t cached_bytes = 0;          // reserved but free, kept for reuse
  int64_t peak_allocated_bytes = 0;  // since start or the last reset_peak_memory_stats()
  int64_t peak_reserved_bytes = 0;
  int64_t requested_bytes = 0;  // held by live tensors, as requested (before rounding)
  int64_t num_allocations = 0;  // allocate() calls that returned memory
  int64_t num_cache_hits = 0;   // ... of which were served from the cache
  int64_t num_cuda_mallocs = 0;
  int64_t num_cuda_frees = 0;
  int64_t num_oom_retries = 0;      // cudaMalloc failures retried after emptying the cache
  int64_t num_segments = 0;         // cudaMalloc'd segments currently held
  int64_t num_splits = 0;           // blocks split to serve a smaller request
  int64_t num_merges = 0;           // freed blocks merged with a free neighbour
  int64_t num_capture_mallocs = 0;  // cudaMalloc calls made while a CUDA graph was captured
  int64_t graph_pool_bytes = 0;     // reserved bytes held by private pools of CUDA graphs
  // MANTISSA_CUDA_ALLOCATOR_BYPASS=1: one cudaMalloc/cudaFree per tensor, nothing cached (for
  // memory checkers; see docs/cuda.md). Tests of caching behaviour skip when it is set.
  bool cache_bypassed = false;
};

// The CUDA stack this process sees: what a log or a test binary's banner needs to say which
// driver and libraries a result came from, and why no GPU is usable when none is. Never throws.
struct RuntimeInfo {
  bool compiled = false;  // this build has the CUDA backend
  int device_count = 0;
  // Why device_count is 0: the runtime's error name and text from cudaGetDeviceCount, or "CPU-only
  // build"; empty when a device is usable.
  std::string unavailable_reason;
  int driver_version = 0;   // CUDA version the driver supports (0: no driver)
  int runtime_version = 0;  // the CUDA runtime loaded
  // Versions of the libraries loaded, as each library reports them (0: not in this build).
  int64_t cublaslt_version = 0;  // e.g. 130100 for 13.1.0
  int64_t cudnn_version = 0;     // e.g. 91300 for 9.13.0
  // The cuDNN the build compiled against (its headers' CUDNN_VERSION), which the one loaded at run
  // time may differ from; and the cuDNN frontend behind the fused attention ("" without it).
  int64_t cudnn_build_version = 0;
  std::string cudnn_frontend_version;
  int64_t nccl_version = 0;  // e.g. 22703 for 2.27.3
};
RuntimeInfo runtime_info();

// One line for logs: device 0's name and compute capability (or why there is none), then the
// driver, runtime, cuBLASLt, cuDNN (loaded, and built against, with the fused attention's
// frontend) and NCCL versions.
std::string runtime_banner();

}  // namespace mantissa::cuda
