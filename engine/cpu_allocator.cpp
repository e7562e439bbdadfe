#include "engine/cpu_allocator.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "engine/error.h"

namespace mantissa {
namespace {

constexpr size_t kAlign = 64;
// Cached bytes beyond this go back to the system on free. Large enough for the activations and
// gradients of one step of a mid-sized model; MANTISSA_CPU_CACHE_MB overrides it (0: no cache).
constexpr size_t kDefaultCacheCap = size_t(1) << 30;

// Size classes: multiples of 64 bytes up to 1 KiB, then four classes per power of two (at most
// 25% rounding waste). Class index -> rounded size is size_of_class().
constexpr int kSmallClasses = 16;  // 64, 128, ..., 1024
constexpr int kNumClasses = kSmallClasses + 4 * 54;

int class_of(size_t n) {
  if (n <= 1024) return static_cast<int>((n + kAlign - 1) / kAlign) - 1;
  const int log = std::bit_width(n - 1) - 1;  // 2^log < n <= 2^(log+1)
  const size_t quarter = size_t(1) << (log - 2);
  const int sub = static_cast<int>((n - (size_t(1) << log) + quarter - 1) / quarter);  // 1..4
  return kSmallClasses + 4 * (log - 10) + sub - 1;
}

size_t size_of_class(int c) {
  if (c < kSmallClasses) return size_t(c + 1) * kAlign;
  const int log = (c - kSmallClasses) / 4 + 10, sub = (c - kSmallClasses) % 4 + 1;
  return (size_t(1) << log) + size_t(sub) * (size_t(1) << (log - 2));
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheByDefault = false;  // keep use-after-free visible to AddressSanitizer
#else
constexpr bool kCacheByDefault = true;
#endif

size_t cache_cap() {
  if (!kCacheByDefault) return 0;
  if (const char* env = std::getenv("MANTISSA_CPU_CACHE_MB")) {
    return static_cast<size_t>(std::strtoull(env, nullptr, 10)) << 20;
  }
  return kDefaultCacheCap;
}

class CachingCpuAllocator final : public Allocator {
 public:
  CachingCpuAllocator() : cap_(cache_cap()), free_(kNumClasses) {}
  ~CachingCpuAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    MT_CHECK(nbytes <= (size_t(1) << 48), "cpu: out of memory allocating ", nbytes, " bytes");
    const int c = class_of(nbytes);
    const size_t size = size_of_class(c);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.num_allocations;
      stats_.allocated_bytes += static_cast<int64_t>(size);
      stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
      auto& list = free_[c];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        ++stats_.num_cache_hits;
        stats_.cached_bytes -= static_cast<int64_t>(size);
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, size);
    if (p == nullptr) {  // give the cache back and try once more
      empty_cache();
      p = std::aligned_alloc(kAlign, size);
    }
    if (p == nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= static_cast<int64_t>(size);
      MT_THROW("cpu: out of memory allocating ", nbytes, " bytes");
    }
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    const int c = class_of(nbytes);
    const size_t size = size_of_class(c);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= static_cast<int64_t>(size);
      if (static_cast<size_t>(stats_.cached_bytes) + size <= cap_) {
        free_[c].push_back(ptr);
        stats_.cached_bytes += static_cast<int64_t>(size);
        return;
      }
    }
    std::free(ptr);
  }

  void empty_cache() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& list : free_) {
        blocks.insert(blocks.end(), list.begin(), list.end());
        list.clear();
      }
      stats_.cached_bytes = 0;
    }
    for (void* p : blocks) std::free(p);
  }

  CpuMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

 private:
  const size_t cap_;
  std::mutex mutex_;
  std::vector<std::vector<void*>> free_;
  CpuMemoryStats stats_;
};

CachingCpuAllocator& instance() {
  // Never destroyed: tensors in other static objects may be freed after this file's statics.
  static auto* alloc = new CachingCpuAllocator();
  return *alloc;
}

}  // namespace

namespace detail {
Allocator* caching_cpu_allocator() { return &instance(); }
}  // namespace detail

CpuMemoryStats cpu_memory_stats() { return instance().stats(); }
void reset_cpu_peak_memory_stats() { instance().reset_peak(); }
void cpu_empty_cache() { instance().empty_cache(); }

}  // namespace mantissa
