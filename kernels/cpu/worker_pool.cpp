#include "kernels/cpu/worker_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mantissa::cpu {
namespace {

class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 1; i < threads; ++i) {
      try {
        std::thread([this] { work(); }).detach();  // the pool lives until exit; see pool()
      } catch (const std::system_error&) {
        break;  // no more threads (a process limit): fewer workers, the caller does the rest
      }
    }
  }

  // False when another job is running (the caller then runs its tasks itself).
  bool run(int64_t tasks, void (*fn)(void*, int64_t), void* ctx) {
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = fn;
      ctx_ = ctx;
      tasks_ = tasks;
      next_.store(0, std::memory_order_relaxed);
      done_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    const int64_t mine = drain();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_ += mine;
      // Also waits for every woken worker to leave drain(), so none touches the next job's
      // fields before it is set up.
      finished_.wait(lock, [&] { return done_ == tasks_ && active_ == 0; });
      fn_ = nullptr;
    }
    std::exception_ptr error = std::exchange(error_, nullptr);
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);  // a task's exception reaches the caller
    return true;
  }

 private:
  // Takes tasks until none are left; returns how many this thread ran.
  // An exception is kept (the first one) for run() to rethrow; it must not escape a worker.
  int64_t drain() {
    int64_t ran = 0;
    for (int64_t t = next_.fetch_add(1); t < tasks_; t = next_.fetch_add(1)) {
      try {
        fn_(ctx_, t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      ++ran;
    }
    return ran;
  }

  void work() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen && fn_ != nullptr; });
      seen = generation_;
      ++active_;
      lock.unlock();
      const int64_t ran = drain();
      lock.lock();
      done_ += ran;
      --active_;
      if (done_ == tasks_ && active_ == 0) finished_.notify_one();
    }
  }

  std::atomic<bool> busy_{false};
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  void (*fn_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  int64_t tasks_ = 0;  // written under mutex_ before the workers are woken
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;  // the first task exception of the current job
  int64_t done_ = 0;          // tasks finished in this job
  int active_ = 0;            // workers inside drain()
  uint64_t generation_ = 0;
};

// Set in a child process after fork(): the pool's workers do not exist there and its mutex may
// have been held by one of them, so the child runs every split loop on its own thread.
std::atomic<bool> forked_child{false};

WorkerPool& pool() {
  // Never destroyed: its workers block forever and are reclaimed at process exit.
  static auto* p = [] {
    pthread_atfork(nullptr, nullptr, [] { forked_child.store(true, std::memory_order_relaxed); });
    return new WorkerPool(pool_threads());
  }();
  return *p;
}

}  // namespace

int pool_threads() {
#if defined(_OPENMP)
  static const int n = std::max(1, omp_get_max_threads());
#else
  static const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
#endif
  return n;
}

void run_in_pool(int64_t tasks, void (*fn)(void* ctx, int64_t task), void* ctx) {
  if (tasks <= 0) return;
  if (tasks == 1) return fn(ctx, 0);
  if (pool_threads() > 1 && !forked_child.load(std::memory_order_relaxed) &&
      pool().run(tasks, fn, ctx)) {
    return;
  }
  // On this thread, with the pool's contract: every task runs, the first exception is rethrown.
  std::exception_ptr error;
  for (int64_t t = 0; t < tasks; ++t) {
    try {
      fn(ctx, t);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace mantissa::cpu
