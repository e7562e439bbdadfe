#include "kernels/cpu/gemm/bf16_gemm.h"

#include <algorithm>
#include <atomic>
#include <climits>

#include "engine/cpu_matmul_paths.h"
#include "engine/error.h"
#include "engine/fast_path_stats.h"
#include "kernels/cpu/gemm/onednn_matmul.h"
#include "kernels/cpu/gemm/sgemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/worker_pool.h"

namespace mantissa::cpu {
namespace {

// Multiply-adds from which a product is split across the pool. The bf16 instructions run about
// ten times SGEMM's rate, so a wake-up of the pool's workers pays off later than for blas_gemm.
constexpr int64_t kBf16SplitMacs = int64_t(1) << 23;
// Slab boundaries fall on multiples of an AMX tile's rows.
constexpr int64_t kBf16SlabAlign = 16;

const BFloat16* offset(const void* base, int64_t elements) {
  return static_cast<const BFloat16*>(base) + elements;
}
void* offset_c(const OneDnnProduct& p, int64_t elements) {
  if (p.c_type == OneDnnType::BFloat16) return static_cast<BFloat16*>(p.c) + elements;
  return static_cast<float*>(p.c) + elements;
}

// The part of `k` that task t of `tasks` computes: a range of the batch, or a slab of rows of a
// single product. Row slabs keep C's rows dense, which oneDNN's AMX kernels need (a column slab
// of C has a row stride longer than its rows: those run on its vector kernels, several times
// slower). A slab of op(A) that is not dense (a transposed A, whose slab is a range of columns)
// is copied into `pack`, dense, for the same reason: O(M K) next to the product's O(M N K). With
// no `pack`, only the part's layout is made (its A has no data): enough to plan it.
OneDnnProduct part(const OneDnnProduct& k, int64_t t, int64_t tasks, Scratch<BFloat16>* pack) {
  OneDnnProduct p = k;
  if (k.batch > 1) {
    const int64_t per = (k.batch + tasks - 1) / tasks;
    const int64_t b0 = std::min(k.batch, t * per), b1 = std::min(k.batch, b0 + per);
    p.batch = b1 - b0;
    p.a.base = offset(k.a.base, b0 * k.a.batch_stride);
    p.b.base = offset(k.b.base, b0 * k.b.batch_stride);
    p.c = offset_c(k, b0 * k.c_batch);
    return p;
  }
  if (tasks == 1) return p;
  const int64_t units = (k.M + kBf16SlabAlign - 1) / kBf16SlabAlign;
  const int64_t per = (units + tasks - 1) / tasks * kBf16SlabAlign;
  const int64_t b0 = std::min(k.M, t * per), b1 = std::min(k.M, b0 + per);
  p.M = b1 - b0;  // rows b0..b1 of op(A) and C
  p.c = offset_c(k, b0 * k.ldc);
  const BFloat16* a = static_cast<const BFloat16*>(k.a.base);
  if (!k.a.trans) {
    p.a.base = a + b0 * k.a.ld;  // whole rows: dense when A is
    return p;
  }
  // op(A)'s rows b0..b1 are columns b0..b1 of the stored [K, M] matrix: one run per k.
  p.a.base = nullptr;
  p.a.ld = p.M;
  if (pack == nullptr) return p;
  pack->resize(static_cast<size_t>(p.M * k.K));
  for (int64_t kk = 0; kk < k.K; ++kk)
    std::copy(a + kk * k.a.ld + b0, a + kk * k.a.ld + b1, pack->data() + kk * p.M);
  p.a.base = pack->data();
  return p;
}

OneDnnOperand operand(const Bf16Matrix& m) { return {m.base, m.batch_stride, m.trans, m.ld}; }

bool product(int64_t batch, int64_t M, int64_t N, int64_t K, const Bf16Matrix& a,
             const Bf16Matrix& b, OneDnnType c_type, void* c, int64_t ldc, int64_t c_batch,
             float beta) {
  if (K <= 0) return false;  // C = beta C: the caller's float path does it
  // A single product small enough for sgemm's in-house loops runs there (with its fused
  // epilogues): a oneDNN call costs more than its arithmetic (docs/performance.md).
  const bool small = batch == 1 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX &&
                     sgemm_is_small(int(M), int(N), int(K));
  if (small || cpu_bf16_matmul_isa() == Bf16MatmulIsa::Emulated) {
    (void)::mantissa::detail::count_fallback("cpu.bf16_matmul", "emulated", /*refusal=*/false);
    return false;
  }
  if (batch <= 0 || M <= 0 || N <= 0) return true;
  OneDnnProduct k;
  k.type = OneDnnType::BFloat16;
  k.batch = batch;
  k.M = M;
  k.N = N;
  k.K = K;
  k.a = operand(a);
  k.b = operand(b);
  k.c_type = c_type;
  k.c = c;
  k.ldc = ldc;
  k.c_batch = c_batch;
  k.beta = beta;
  const int64_t extent = batch > 1 ? batch : (M + kBf16SlabAlign - 1) / kBf16SlabAlign;
  const int64_t tasks =
      batch * M * N * K >= kBf16SplitMacs ? std::min<int64_t>(pool_threads(), extent) : int64_t(1);
  std::atomic<bool> refused{false}, vector{false};
  // With beta != 0 a slab that ran has added into C, so a refusal found after it could not be
  // emulated without counting those products twice: every slab's layout is checked first.
  if (beta != 0.0f && tasks > 1) {
    for (int64_t t = 0; t < tasks && !refused.load(std::memory_order_relaxed); ++t) {
      const OneDnnProduct p = part(k, t, tasks, nullptr);
      if (p.batch > 0 && p.M > 0 && p.N > 0 && onednn_matmul_plan(p) == OneDnnRun::Refused)
        refused.store(true, std::memory_order_relaxed);
    }
  }
  auto task = [&](int64_t t) {
    thread_local Scratch<BFloat16> pack;
    const OneDnnProduct p = part(k, t, tasks, &pack);
    if (p.batch <= 0 || p.M <= 0 || p.N <= 0) return;
    const OneDnnRun run = onednn_matmul(p);
    if (run == OneDnnRun::Refused) refused.store(true, std::memory_order_relaxed);
    if (run == OneDnnRun::Vector) vector.store(true, std::memory_order_relaxed);
  };
  if (!refused.load(std::memory_order_relaxed)) {  // else checked above, and nothing ran
    if (tasks <= 1) {
      task(0);
    } else {
      parallel_in_pool(tasks, task);
    }
  }
  if (!refused.load(std::memory_order_relaxed)) {
    ::mantissa::detail::count_fast_path(
        "cpu.bf16_matmul", vector.load(std::memory_order_relaxed) ? "avx512_bf16" : "amx");
    return true;
  }
  if (::mantissa::detail::count_fallback("cpu.bf16_matmul", "NoKernel", /*refusal=*/true)) {
    MT_THROW("bf16 matmul: oneDNN offers no bf16 kernel for [", batch, ", ", M, ", ", K, "] x [",
             batch, ", ", K, ", ", N, "] (A ", a.trans ? "transposed" : "row-major", ", ld ", a.ld,
             "; B ", b.trans ? "transposed" : "row-major", ", ld ", b.ld,
             "); strict fast paths are on (MANTISSA_STRICT_FAST_PATHS=1), without them the "
             "float32 emulation would run");
  }
  return false;
}

}  // namespace

bool bf16_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const Bf16Matrix& a,
               const Bf16Matrix& b, float* c, int64_t ldc, int64_t c_batch, float beta) {
  return product(batch, M, N, K, a, b, OneDnnType::Float32, c, ldc, c_batch, beta);
}

bool bf16_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const Bf16Matrix& a,
               const Bf16Matrix& b, BFloat16* c, int64_t ldc, int64_t c_batch) {
  return product(batch, M, N, K, a, b, OneDnnType::BFloat16, c, ldc, c_batch, 0.0f);
}

}  // namespace mantissa::cpu
