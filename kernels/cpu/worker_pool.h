// A small pool of worker threads for memory-bound CPU loops (optimizer updates, bias/activation
// passes over large layers) that wait blocked, never spinning.
//
// OpenMP would do the splitting, but libgomp's idle workers spin-wait after every parallel
// region (OMP_WAIT_POLICY's default, fixed when libgomp starts), and on a machine with few cores
// they take the cores OpenBLAS's threads need for the next GEMM. These workers go back to sleep
// as soon as their share is done, so a second thread can help a loop of a few hundred thousand
// elements without slowing the GEMM after it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mantissa::cpu {

// Elements from which a memory-bound loop is worth splitting across the pool (a wake-up costs
// tens of microseconds; below this the loop itself takes about that long).
inline constexpr int64_t kPoolGrain = int64_t(1) << 17;

// The threads a split loop uses, the caller included: OpenMP's max thread count (so
// OMP_NUM_THREADS limits both), at least 1.
int pool_threads();

// Calls fn(ctx, task) for every task in [0, tasks), on the calling thread and the pool's workers.
// Runs everything on the calling thread when there is one thread, one task, or the pool is
// already busy (a nested or concurrent call). Tasks must be independent. If tasks throw, the
// remaining ones still run and the first exception is rethrown to the caller.
void run_in_pool(int64_t tasks, void (*fn)(void* ctx, int64_t task), void* ctx);

// run_in_pool for a callable: fn(task).
template <typename Fn>
void parallel_in_pool(int64_t tasks, const Fn& fn) {
  run_in_pool(
      tasks, [](void* ctx, int64_t task) { (*static_cast<const Fn*>(ctx))(task); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

// Calls fn(begin, end) over [0, n) in one contiguous range per pool thread when the loop's
// `work` (elements touched, n by default) is at least `grain`, in one range otherwise. For loops
// whose results do not depend on the split (elementwise, or each index owning its outputs).
template <typename Fn>
void parallel_ranges(int64_t n, const Fn& fn, int64_t work = -1, int64_t grain = kPoolGrain) {
  if (work < 0) work = n;
  const int64_t threads = work >= grain && n > 1 ? std::min<int64_t>(pool_threads(), n) : 1;
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
  const int64_t chunk = (n + threads - 1) / threads;
  parallel_in_pool(threads, [&](int64_t t) {
    const int64_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) fn(b, e);
  });
}

}  // namespace mantissa::cpu
