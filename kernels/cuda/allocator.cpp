// A simple caching allocator for CUDA memory, one per device.
//
// cudaMalloc and cudaFree are slow and cudaFree synchronises the device, so freed blocks are kept
// and handed out again. Requests are rounded (512 B up to 1 MiB, 2 MiB multiples above) so that
// freed blocks can be reused by requests of a similar size, and each rounded size has its own free
// list; a block is reused only for its exact rounded size (no splitting yet). All kernels run on
// the legacy default stream, so a block freed by the host can be handed out at once: any later
// kernel that uses it is ordered after the kernels that used it before.
//
// When cudaMalloc runs out of memory the device's cache is returned to CUDA and the call is
// retried once; a second failure throws an out-of-memory error with the numbers needed to act.
#include "kernels/cuda/allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"
#include "engine/logging.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_guard.h"
#include "engine/cuda_memory.h"

namespace mantissa::cuda {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;  // requests up to 1 MiB are "small"
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }
size_t rounded_size(size_t n) {
  return n <= kSmallLimit ? round_up(n, kSmallRound) : round_up(n, kLargeRound);
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

class DeviceCachingAllocator final : public Allocator {
 public:
  explicit DeviceCachingAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    // Beyond this, rounding would overflow; no device has that much memory anyway.
    if (nbytes > std::numeric_limits<size_t>::max() / 2) throw_oom(nbytes, nbytes);
    const size_t size = rounded_size(nbytes);
    void* ptr = nullptr;
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(size);
      ++stats_.num_cache_hits;
    } else {
      ptr = cuda_malloc(size);
      if (ptr == nullptr) {
        ++stats_.num_oom_retries;
        release_cache();
        ptr = cuda_malloc(size);
      }
      if (ptr == nullptr) throw_oom(nbytes, size);
    }
    live_.emplace(ptr, Block{size, nbytes});
    ++stats_.num_allocations;
    stats_.allocated_bytes += static_cast<int64_t>(size);
    stats_.requested_bytes += static_cast<int64_t>(nbytes);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return ptr;
  }

  // Called from storage destructors, so it must not throw.
  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      log().error("cuda:{} allocator: free of unknown pointer {} ignored", device_, ptr);
      return;
    }
    const Block block = it->second;
    live_.erase(it);
    free_blocks_[block.size].push_back(ptr);
    stats_.allocated_bytes -= static_cast<int64_t>(block.size);
    stats_.requested_bytes -= static_cast<int64_t>(block.requested);
    stats_.cached_bytes += static_cast<int64_t>(block.size);
  }

  MemoryStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cache();
  }

 private:
  struct Block {
    size_t size;       // rounded
    size_t requested;  // as asked for
  };

  // nullptr when the device is out of memory; any other failure throws.
  void* cuda_malloc(size_t size) {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so later launch checks stay clean
      return nullptr;
    }
    MT_CUDA_CHECK(err);
    ++stats_.num_cuda_mallocs;
    stats_.reserved_bytes += static_cast<int64_t>(size);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    return ptr;
  }

  void release_cache() {
    if (stats_.cached_bytes == 0) return;
    DeviceGuard guard(device_);
    for (auto& [size, blocks] : free_blocks_) {
      while (!blocks.empty()) {
        MT_CUDA_CHECK(cudaFree(blocks.back()));
        blocks.pop_back();
        ++stats_.num_cuda_frees;
        stats_.reserved_bytes -= static_cast<int64_t>(size);
        stats_.cached_bytes -= static_cast<int64_t>(size);
      }
    }
    free_blocks_.clear();
  }

  [[noreturn]] void throw_oom(size_t requested, size_t rounded) {
    std::string device_info;
    size_t free_bytes = 0, total_bytes = 0;
    {
      DeviceGuard guard(device_);
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        device_info = "; the device has " + format_bytes(static_cast<double>(free_bytes)) +
                      " free of " + format_bytes(static_cast<double>(total_bytes)) + " total";
      } else {
        (void)cudaGetLastError();
      }
    }
    MT_THROW("CUDA out of memory on cuda:", device_, ": tried to allocate ",
             format_bytes(static_cast<double>(requested)), " (", requested, " bytes, ",
             format_bytes(static_cast<double>(rounded)), " after rounding); mantissa has ",
             format_bytes(static_cast<double>(stats_.allocated_bytes)), " allocated and ",
             format_bytes(static_cast<double>(stats_.reserved_bytes)),
             " reserved on this device (the cache was emptied and the allocation retried)",
             device_info);
  }

  const int device_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // rounded size -> cached blocks
  std::unordered_map<void*, Block> live_;
  MemoryStats stats_;
};

// Deliberately leaked: tensors with static storage duration may be destroyed after any other
// static, and their storage still needs a live allocator to return memory to.
const std::vector<DeviceCachingAllocator*>& allocators() {
  static const auto* all = [] {
    auto* v = new std::vector<DeviceCachingAllocator*>();
    for (int i = 0; i < device_count(); ++i) v->push_back(new DeviceCachingAllocator(i));
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

Allocator* caching_allocator(int device) { return &allocator_of(device); }

MemoryStats caching_allocator_stats(int device) { return allocator_of(device).stats(); }
void caching_allocator_reset_peaks(int device) { allocator_of(device).reset_peaks(); }
void caching_allocator_empty_cache() {
  for (DeviceCachingAllocator* a : allocators()) a->empty_cache();
}

}  // namespace mantissa::cuda
