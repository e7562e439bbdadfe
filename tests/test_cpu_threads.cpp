// The CPU worker pool (kernels/cpu/worker_pool.h) and the loops split across it: every task runs
// exactly once, nested and concurrent calls work, and split loops give the serial result.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/worker_pool.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Tensor;

TEST(WorkerPool, EveryTaskRunsExactlyOnce) {
  for (int64_t tasks : {1, 2, 3, 7, 64, 1000}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
    mt::cpu::parallel_in_pool(tasks, [&](int64_t t) { runs[static_cast<size_t>(t)]++; });
    for (int64_t t = 0; t < tasks; ++t) EXPECT_EQ(runs[static_cast<size_t>(t)].load(), 1) << t;
  }
}

TEST(WorkerPool, NestedAndConcurrentCallsComplete) {
  // A task that itself splits work: the inner call finds the pool busy and runs serially.
  std::atomic<int64_t> inner{0};
  mt::cpu::parallel_in_pool(
      4, [&](int64_t) { mt::cpu::parallel_in_pool(5, [&](int64_t t) { inner += t + 1; }); });
  EXPECT_EQ(inner.load(), 4 * 15);
  // Two threads splitting at once: one gets the pool, the other runs its tasks itself.
  std::atomic<int64_t> sum_a{0}, sum_b{0};
  std::thread other([&] {
    for (int r = 0; r < 200; ++r) mt::cpu::parallel_in_pool(8, [&](int64_t t) { sum_a += t; });
  });
  for (int r = 0; r < 200; ++r) mt::cpu::parallel_in_pool(8, [&](int64_t t) { sum_b += t; });
  other.join();
  EXPECT_EQ(sum_a.load(), 200 * 28);
  EXPECT_EQ(sum_b.load(), 200 * 28);
}

TEST(WorkerPool, ATaskExceptionReachesTheCaller) {
  std::atomic<int> ran{0};
  EXPECT_THROW(mt::cpu::parallel_in_pool(6,
                                         [&](int64_t t) {
                                           ++ran;
                                           if (t == 3) throw std::runtime_error("task 3");
                                         }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 6);
  // The pool is usable afterwards.
  std::atomic<int> again{0};
  mt::cpu::parallel_in_pool(6, [&](int64_t) { ++again; });
  EXPECT_EQ(again.load(), 6);
}

// After fork() the pool's workers do not exist in the child (and one may have held its mutex):
// the child must still finish its split loops, on its own thread.
TEST(WorkerPool, UsableInAForkedChild) {
  std::atomic<int64_t> parent{0};
  mt::cpu::parallel_in_pool(8, [&](int64_t t) { parent += t; });  // the pool exists now
  ASSERT_EQ(parent.load(), 28);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a deadlock ends the child instead of hanging the test
    std::atomic<int64_t> child{0};
    mt::cpu::parallel_in_pool(8, [&](int64_t t) { child += t; });
    _exit(child.load() == 28 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

TEST(WorkerPool, ParallelRangesCoverEachIndexOnce) {
  for (int64_t n : {int64_t(1), int64_t(10), mt::cpu::kPoolGrain - 1, mt::cpu::kPoolGrain,
                    3 * mt::cpu::kPoolGrain + 5}) {
    std::vector<char> seen(static_cast<size_t>(n), 0);
    std::atomic<int> ranges{0};
    mt::cpu::parallel_ranges(n, [&](int64_t b, int64_t e) {
      ++ranges;
      for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << n << " " << i;
    const int want = n < mt::cpu::kPoolGrain ? 1 : mt::cpu::pool_threads();
    EXPECT_EQ(ranges.load(), want) << n;
  }
}

// An SGD update large enough to be split across the pool equals the formula run serially.
TEST(WorkerPool, SplitOptimizerStepEqualsSerialFormula) {
  const int64_t n = 3 * mt::cpu::kPoolGrain + 11;
  for (double momentum : {0.0, 0.9}) {
    mt::manual_seed(5);
    Tensor p = mt::randn({n}).requires_grad_();
    const Tensor g = mt::randn({n});
    const std::vector<float> p0 = p.detach().to_vector<float>(), gv = g.to_vector<float>();
    mt::optim::SGD opt({p}, 0.01, {.momentum = momentum});
    for (int step = 0; step < 2; ++step) {
      p.set_grad(g.clone());
      opt.step();
    }
    // torch.optim.SGD's arithmetic in float: buf = g, then buf = buf * m + g; p += -lr * buf.
    std::vector<float> want = p0;
    const float neg_lr = -0.01f, m = static_cast<float>(momentum);
    for (size_t i = 0; i < want.size(); ++i) {
      float buf = gv[i];
      want[i] = want[i] + neg_lr * (momentum != 0.0 ? buf : gv[i]);
      if (momentum != 0.0) buf = buf * m + gv[i];
      want[i] = want[i] + neg_lr * (momentum != 0.0 ? buf : gv[i]);
    }
    EXPECT_EQ(p.detach().to_vector<float>(), want) << "momentum " << momentum;
  }
}
