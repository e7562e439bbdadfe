// The CUDA caching allocator: cuda/block_allocator.h does the bookkeeping (segments, best-fit,
// split and merge, per-stream reuse, graph pools, statistics, the out-of-memory retry); this
// file plugs in cudaMalloc/cudaFree, CUDA events and the device's free-memory figure.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronises the device, so in a steady training
// loop every allocation is served from the cache. A block is handed out for the current stream of
// its device and, once freed, reused only on that stream: later work there is ordered after its
// last use, so no synchronisation is needed.
//
// MANTISSA_CUDA_ALLOCATOR_BYPASS=1 (read once, when the allocators are made) turns the cache off
// so that compute-sanitizer's memcheck sees every tensor as its own allocation (docs/cuda.md).
#include "cuda/allocator.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/current_stream.h"
#include "cuda/device_guard.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/logging.h"

namespace mantissa::cuda {
namespace {

class CudaRawMemory final : public mantissa::detail::RawMemory {
 public:
  explicit CudaRawMemory(int device) : device_(device) {}

  void* alloc(size_t nbytes) override {
    DeviceGuard guard(device_);
    return raw_cuda_malloc(nbytes);
  }

  // Reached from BlockAllocator::free, which must not throw (a storage destructor calls it, for
  // every tensor when the cache is bypassed). cudaFree fails only once the device has, and that
  // sticky error reaches the user through the next checked call.
  void free(void* ptr) override {
    int previous = -1;
    if (cudaGetDevice(&previous) == cudaSuccess && previous != device_)
      (void)cudaSetDevice(device_);
    const cudaError_t err = cudaFree(ptr);
    if (previous >= 0 && previous != device_) (void)cudaSetDevice(previous);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      log().error("cuda:{} allocator: cudaFree({}) failed: {}", device_, ptr,
                  cudaGetErrorString(err));
    }
  }

  mantissa::detail::EventHandle record_event(mantissa::detail::StreamId stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t event = nullptr;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream)));
    return event;
  }

  bool event_done(mantissa::detail::EventHandle event) override {
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    MT_CUDA_CHECK(err);
    return true;
  }

  void destroy_event(mantissa::detail::EventHandle event) override {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  std::string device_memory_info() override {
    DeviceGuard guard(device_);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return "";
    }
    return mantissa::detail::format_bytes(static_cast<double>(free_bytes)) + " free of " +
           mantissa::detail::format_bytes(static_cast<double>(total_bytes)) + " total";
  }

 private:
  const int device_;
};

class DeviceCachingAllocator final : public Allocator {
 public:
  DeviceCachingAllocator(int device, mantissa::detail::CacheMode mode)
      : device_(device), raw_(device), blocks_("cuda:" + std::to_string(device), &raw_, mode) {}

  void* allocate(size_t nbytes) override {
    return blocks_.allocate(
        nbytes, reinterpret_cast<mantissa::detail::StreamId>(detail::current_stream(device_)));
  }
  // Called from storage destructors: BlockAllocator::free does not throw.
  void deallocate(void* ptr, size_t) override { blocks_.free(ptr); }

  mantissa::detail::BlockAllocator& blocks() { return blocks_; }

 private:
  const int device_;
  CudaRawMemory raw_;
  mantissa::detail::BlockAllocator blocks_;
};

// Deliberately leaked: tensors with static storage duration may be destroyed after any other
// static, and their storage still needs a live allocator to return memory to.
const std::vector<DeviceCachingAllocator*>& allocators() {
  static const auto* all = [] {
    const mantissa::detail::CacheMode mode = mantissa::detail::cache_mode_from_env();
    if (mode == mantissa::detail::CacheMode::Bypass)
      log().warn("{}=1: the CUDA caching allocator is bypassed (one cudaMalloc per tensor)",
                 mantissa::detail::kAllocatorBypassEnv);
    auto* v = new std::vector<DeviceCachingAllocator*>();
    for (int i = 0; i < device_count(); ++i) v->push_back(new DeviceCachingAllocator(i, mode));
    return v;
  }();
  return *all;
}

DeviceCachingAllocator& allocator_of(int device) {
  MT_CHECK(device >= 0, "cuda memory: invalid device index ", device);
  check_device_exists(Device::cuda(device));
  return *allocators()[static_cast<size_t>(device)];
}

}  // namespace

// A graph capture in this thread forbids cudaMalloc unless the mode is relaxed; the memory goes
// to the graph's private pool and is never freed during the capture (as PyTorch does).
void* raw_cuda_malloc(size_t nbytes) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  MT_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, nbytes);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later launch checks stay clean
    return nullptr;
  }
  MT_CUDA_CHECK(err);
  return ptr;
}

Allocator* caching_allocator(int device) { return &allocator_of(device); }
mantissa::detail::BlockAllocator& block_allocator(int device) {
  return allocator_of(device).blocks();
}

void caching_allocator_empty_cache() {
  for (DeviceCachingAllocator* a : allocators()) a->blocks().empty_cache();
}

}  // namespace mantissa::cuda
