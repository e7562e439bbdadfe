// The CPU worker pool (kernels/cpu/worker_pool.h) and the loops split across it: every task runs
// exactly once, nested and concurrent calls work, and split loops give the serial result.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/kernel_tables.h"
#include "kernels/cpu/gemm/blas.h"
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

// Products large enough to be split across the pool, by rows (M >= N) and by columns, in every
// transpose combination, with padded leading dimensions, alpha and beta: each equals the
// float64 sum within the float rounding of K products, and OpenBLAS is left single-threaded.
template <typename T>
void check_split_gemm(double tol_per_k) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  struct Case {
    int64_t M, N, K;
  };
  for (const Case c : {Case{200, 64, 96}, Case{48, 300, 80}, Case{1, 8, 4}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
        const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
        const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = c.N + 7;
        std::vector<T> A(size_t(a_rows * lda)), B(size_t(b_rows * ldb)), C(size_t(c.M * ldc));
        for (auto& x : A) x = T(u(rng));
        for (auto& x : B) x = T(u(rng));
        for (auto& x : C) x = T(u(rng));
        const std::vector<T> C0 = C;
        mt::cpu::blas_gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, c.M, c.N,
                           c.K, T(0.5), A.data(), lda, B.data(), ldb, T(2), C.data(), ldc);
        for (int64_t i = 0; i < c.M; ++i) {
          for (int64_t j = 0; j < c.N; ++j) {
            double want = 2.0 * double(C0[size_t(i * ldc + j)]);
            for (int64_t k = 0; k < c.K; ++k) {
              const double a = ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
              const double b = tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
              want += 0.5 * a * b;
            }
            ASSERT_NEAR(double(C[size_t(i * ldc + j)]), want, tol_per_k * double(c.K))
                << c.M << "x" << c.N << "x" << c.K << " ta " << ta << " tb " << tb << " at " << i
                << "," << j;
          }
        }
        // The padding between rows of C is never written.
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = c.N; j < ldc; ++j)
            ASSERT_EQ(C[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]);
      }
    }
  }
  EXPECT_EQ(openblas_get_num_threads(), 1);
}

TEST(BlasGemm, SplitProductsMatchTheFloat64SumFloat) {
  if (mt::cpu::pool_threads() < 2) GTEST_SKIP() << "one pool thread: no product is split";
  check_split_gemm<float>(1e-6);
}
TEST(BlasGemm, SplitProductsMatchTheFloat64SumDouble) {
  if (mt::cpu::pool_threads() < 2) GTEST_SKIP() << "one pool thread: no product is split";
  check_split_gemm<double>(1e-14);
}

// GELU and its backward run per-instruction-set loops on float values, which fuse multiply-adds
// where the CPU has FMA; a non-contiguous view goes through dense copies into the same loops, so
// both layouts give the same bits in every floating dtype.
TEST(DenseGelu, MatchesTheGenericLoopBitForBit) {
  mt::manual_seed(3);
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
    // 3 * kPoolGrain + 64 elements: split across the pool, ending in a partial block.
    const int64_t rows = 3 * mt::cpu::kPoolGrain / 64 + 1, cols = 64;
    const Tensor x = (mt::randn({cols, rows}) * 3.0).to(dt);  // holds tails and large values
    const Tensor g = mt::randn({cols, rows}).to(dt);
    const Tensor xt = x.t(), gt = g.t();  // non-contiguous [rows, cols] views
    const Tensor xd = xt.contiguous(), gd = gt.contiguous();
    const Tensor y_dense = mt::gelu(xd).to(mt::kFloat64), y_view = mt::gelu(xt).to(mt::kFloat64);
    EXPECT_EQ(y_dense.to_vector<double>(), y_view.to_vector<double>()) << mt::dtype_name(dt);
    Tensor d_dense = mt::empty_like(xd), d_view = mt::empty_like(xd);
    mt::gelu_backward_kernel(mt::kCPU)(d_dense, gd, xd);
    mt::gelu_backward_kernel(mt::kCPU)(d_view, gt, xt);
    EXPECT_EQ(d_dense.to(mt::kFloat64).to_vector<double>(),
              d_view.to(mt::kFloat64).to_vector<double>())
        << mt::dtype_name(dt);
  }
}
