#include "engine/cpu_allocator.h"

#include <atomic>
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

// Blocks of the smallest classes (up to 4 KiB) freed on a thread are kept in that thread's own
// lists first: a small model's step allocates and frees a dozen such tensors on one thread, and
// taking the shared lists' mutex for each costs more than the rest of the allocation.
constexpr int kThreadClasses = kSmallClasses + 4 * 2;  // sizes <= 4 KiB
constexpr size_t kThreadListMax = 64;                  // blocks per class and thread

class CachingCpuAllocator;

// 0: this thread's cache not made yet, 1: alive, 2: destroyed (thread exit; tensors freed later,
// by other thread-locals' or statics' destructors, go to the shared lists).
thread_local int thread_cache_state = 0;

struct ThreadCache {
  std::vector<void*> lists[kThreadClasses];
  int64_t bytes = 0;  // in the lists: counted here, not in the shared cached_ (no atomics)
  CachingCpuAllocator* owner = nullptr;
  ThreadCache() { thread_cache_state = 1; }
  ~ThreadCache();
};

class CachingCpuAllocator final : public Allocator {
 public:
  CachingCpuAllocator() : cap_(cache_cap()), free_(kNumClasses) {}
  ~CachingCpuAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    MT_CHECK(nbytes <= (size_t(1) << 48), "cpu: out of memory allocating ", nbytes, " bytes");
    const int c = class_of(nbytes);
    const size_t size = size_of_class(c);
    count_allocation(size);
    ThreadCache* tc = c < kThreadClasses && cap_ != 0 ? thread_cache() : nullptr;
    if (tc != nullptr) {
      auto& list = tc->lists[c];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        tc->bytes -= static_cast<int64_t>(size);
        return p;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& list = free_[c];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        cached_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
        return p;
      }
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    void* p = std::aligned_alloc(kAlign, size);
    if (p == nullptr) {  // give the cache back and try once more
      empty_cache();
      p = std::aligned_alloc(kAlign, size);
    }
    if (p == nullptr) {
      allocated_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
      MT_THROW("cpu: out of memory allocating ", nbytes, " bytes");
    }
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    const int c = class_of(nbytes);
    const size_t size = size_of_class(c);
    allocated_.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
    // A thread's own lists are bounded (kThreadListMax small blocks per class), so they are kept
    // outside the cap, which leaves the shared atomics out of a small tensor's free.
    ThreadCache* tc = c < kThreadClasses && cap_ != 0 ? thread_cache() : nullptr;
    if (tc != nullptr) {
      auto& list = tc->lists[c];
      if (list.size() < kThreadListMax) {
        list.push_back(ptr);
        tc->bytes += static_cast<int64_t>(size);
        return;
      }
    }
    if (!reserve_cache(size)) {
      std::free(ptr);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    free_[c].push_back(ptr);
  }

  // Takes a thread's cached blocks into the shared lists (at thread exit).
  void adopt(ThreadCache& tc) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int c = 0; c < kThreadClasses; ++c) {
      free_[c].insert(free_[c].end(), tc.lists[c].begin(), tc.lists[c].end());
      tc.lists[c].clear();
    }
    cached_.fetch_add(tc.bytes, std::memory_order_relaxed);
    tc.bytes = 0;
  }

  // Frees the shared lists and the calling thread's own (other threads keep theirs, at most
  // kThreadListMax small blocks per class).
  void empty_cache() {
    std::vector<void*> blocks;
    int64_t bytes = 0;
    if (ThreadCache* tc = thread_cache()) {
      for (int c = 0; c < kThreadClasses; ++c) {
        for (void* p : tc->lists[c]) blocks.push_back(p);
        tc->lists[c].clear();
      }
      tc->bytes = 0;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int c = 0; c < kNumClasses; ++c) {
        for (void* p : free_[c]) blocks.push_back(p), bytes += size_of_class(c);
        free_[c].clear();
      }
    }
    cached_.fetch_sub(bytes, std::memory_order_relaxed);
    for (void* p : blocks) std::free(p);
  }

  CpuMemoryStats stats() {
    CpuMemoryStats s;
    s.allocated_bytes = allocated_.load(std::memory_order_relaxed);
    s.cached_bytes = cached_.load(std::memory_order_relaxed);
    if (const ThreadCache* tc = thread_cache(); tc != nullptr) s.cached_bytes += tc->bytes;
    s.peak_allocated_bytes = peak_.load(std::memory_order_relaxed);
    s.num_allocations = allocations_.load(std::memory_order_relaxed);
    s.num_cache_hits = s.num_allocations - misses_.load(std::memory_order_relaxed);
    return s;
  }
  void reset_peak() { peak_.store(allocated_.load(std::memory_order_relaxed)); }

 private:
  // Null once this thread's cache is destroyed.
  ThreadCache* thread_cache() {
    if (thread_cache_state == 2) [[unlikely]]
      return nullptr;
    thread_local ThreadCache tc;
    tc.owner = this;
    return &tc;
  }
  void count_allocation(size_t size) {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    const int64_t now =
        allocated_.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed) +
        static_cast<int64_t>(size);
    int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  // Counts `size` more cached bytes if that stays within the cap.
  bool reserve_cache(size_t size) {
    int64_t cached = cached_.load(std::memory_order_relaxed);
    do {
      if (static_cast<size_t>(cached) + size > cap_) return false;
    } while (!cached_.compare_exchange_weak(cached, cached + static_cast<int64_t>(size),
                                            std::memory_order_relaxed));
    return true;
  }

  const size_t cap_;
  std::mutex mutex_;
  std::vector<std::vector<void*>> free_;
  // cached_: the shared lists only (each thread counts its own in ThreadCache::bytes); misses_:
  // allocations that went to the system (hits are the rest).
  std::atomic<int64_t> allocated_{0}, cached_{0}, peak_{0}, allocations_{0}, misses_{0};
};

ThreadCache::~ThreadCache() {
  thread_cache_state = 2;
  if (owner != nullptr) owner->adopt(*this);
}

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
