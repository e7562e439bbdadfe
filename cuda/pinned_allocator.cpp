// Pinned host memory, cached like device memory: cudaHostAlloc is slow (it maps the pages for
// every device), so freed blocks are kept and handed out again. Sizes are rounded up to a power of
// two so that blocks fit many requests. An asynchronous copy to or from a pinned block records
// its stream; when the block is freed, an event is recorded on each such stream and the block is
// reused only once they have completed, so the host can never overwrite data a copy still reads.
#include "cuda/pinned_allocator.h"

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_guard.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/logging.h"

namespace mantissa::cuda {
namespace {

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    MT_CHECK(is_available(), "pin_memory: pinned host memory needs a CUDA device, and ",
             is_compiled() ? "none is visible" : "this build has no CUDA support");
    const size_t size = std::bit_ceil(std::max<size_t>(nbytes, 512));
    std::lock_guard<std::mutex> lock(mutex_);
    process_events();
    auto& list = free_[size];
    void* ptr = nullptr;
    if (!list.empty()) {
      ptr = list.back();
      list.pop_back();
    } else {
      const cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        release_cache();
        MT_CUDA_CHECK(cudaHostAlloc(&ptr, size, cudaHostAllocPortable));
      } else {
        MT_CUDA_CHECK(err);
      }
    }
    live_.emplace(reinterpret_cast<uintptr_t>(ptr), Block{size, {}});
    return ptr;
  }

  void deallocate(void* ptr, size_t) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == live_.end()) {
      log().error("pinned allocator: free of unknown pointer {} ignored", ptr);
      return;
    }
    Block block = std::move(it->second);
    live_.erase(it);
    std::vector<cudaEvent_t> events;
    for (auto [device, stream] : block.uses) {
      cudaEvent_t event = nullptr;
      int previous = 0;
      if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(device) == cudaSuccess &&
          cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess &&
          cudaEventRecord(event, stream) == cudaSuccess) {
        events.push_back(event);
      } else {
        // Cannot prove the copy is done: wait for the device rather than risk reuse.
        (void)cudaGetLastError();
        (void)cudaDeviceSynchronize();
      }
      (void)cudaSetDevice(previous);
    }
    if (events.empty()) {
      free_[block.size].push_back(ptr);
    } else {
      pending_.push_back({ptr, block.size, std::move(events)});
    }
  }

  bool owns(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    return find(ptr) != nullptr;
  }

  void record_stream(const void* ptr, int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = find(ptr);
    if (block == nullptr) return;
    const std::pair<int, cudaStream_t> use{device, stream};
    for (const auto& u : block->uses)
      if (u == use) return;
    block->uses.push_back(use);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    process_events();
    release_cache();
  }

 private:
  struct Block {
    size_t size;
    std::vector<std::pair<int, cudaStream_t>> uses;
  };
  struct Pending {
    void* ptr;
    size_t size;
    std::vector<cudaEvent_t> events;
  };

  // The live block containing `ptr` (tensors may be views into a block).
  Block* find(const void* ptr) {
    const auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = live_.upper_bound(p);
    if (it == live_.begin()) return nullptr;
    --it;
    return p < it->first + it->second.size ? &it->second : nullptr;
  }

  void process_events() {
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = pending_[i];
      std::erase_if(p.events, [](cudaEvent_t e) {
        const cudaError_t err = cudaEventQuery(e);
        if (err == cudaErrorNotReady) {
          (void)cudaGetLastError();
          return false;
        }
        (void)cudaEventDestroy(e);
        return true;
      });
      if (p.events.empty()) {
        free_[p.size].push_back(p.ptr);
        pending_[i] = std::move(pending_.back());
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }

  void release_cache() {
    for (auto& [size, list] : free_) {
      for (void* p : list) (void)cudaFreeHost(p);
      list.clear();
    }
  }

  std::mutex mutex_;
  std::map<uintptr_t, Block> live_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::vector<Pending> pending_;
};

PinnedAllocator& instance() {
  static auto* a = new PinnedAllocator();  // leaked, like the device allocators
  return *a;
}

}  // namespace

Allocator* pinned_allocator() { return &instance(); }
bool is_pinned_ptr(const void* ptr) { return ptr != nullptr && instance().owns(ptr); }
void pinned_record_stream(const void* ptr, int device, cudaStream_t stream) {
  instance().record_stream(ptr, device, stream);
}
void pinned_empty_cache() { instance().empty_cache(); }

}  // namespace mantissa::cuda
