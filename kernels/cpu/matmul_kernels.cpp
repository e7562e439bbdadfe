// CPU batched matrix multiply on OpenBLAS. Operands arrive as [B,M,K] x [B,K,N] with any strides
// (a batch stride of 0 is a broadcast operand); `out` is contiguous [B,M,N].
//
// A matrix whose rows or columns are dense goes to GEMM as it is, row-major with NoTrans or
// Trans and the leading dim read off its strides; anything else is packed into a contiguous
// buffer first. bfloat16 runs on the CPU's bf16 instructions where it has them
// (kernels/cpu/gemm/bf16_gemm.h); elsewhere, and for float16, half types are packed to float32,
// multiplied with float32 accumulation and rounded once on store (the same contract). Integers use
// a plain loop with int64 accumulation (BLAS has no integer GEMM).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/kernel_tables.h"
#include "engine/precision.h"
#include "kernels/cpu/convert_dense.h"
#include "kernels/cpu/gemm/bf16_gemm.h"
#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/gemm/sgemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/linear_composite.h"
#include "kernels/scaled_mm_math.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mantissa::cpu {
namespace {

// ---- TF32 emulation ---------------------------------------------------------------------------
// When float32 matmuls may use TF32 (set_float32_matmul_precision("high"), or a tf32 autocast
// scope), the CPU reproduces tensor cores' numerics: operands are packed and rounded to a
// 10-bit mantissa (nearest even), then multiplied with float32 accumulation.
static bool float32_operands_need_rounding() {
  return effective_matmul_precision(DeviceType::CPU) == MatmulPrecision::High;
}
static void round_float32_operands(float* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) data[i] = round_to_tf32(data[i]);
}

// One operand's matrices as GEMM sees them: matrix b starts at base + b * batch_stride.
template <typename C>
struct GemmOperand {
  const C* base = nullptr;
  int64_t batch_stride = 0;
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int64_t ld = 1;
};

// How a rows x cols matrix with strides (sr, sc) can be handed to row-major GEMM without a copy.
// Strides of size-1 dims are meaningless, so they never disqualify a layout.
bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, CBLAS_TRANSPOSE& trans,
                 int64_t& ld) {
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= std::max<int64_t>(1, cols))) {
    trans = CblasNoTrans;
    ld = rows == 1 ? std::max<int64_t>(1, cols) : sr;
    return true;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= std::max<int64_t>(1, rows))) {
    trans = CblasTrans;
    ld = cols == 1 ? std::max<int64_t>(1, rows) : sc;
    return true;
  }
  return false;
}

// Copies x (3-D, element type T) into a dense buffer of type Acc, Bx = 1 when the batch is
// broadcast: [Bx, R, C], or [Bx, C, R] (returns true) when x's columns are its dense dim, as for
// a transposed weight. Packing in memory order keeps the reads sequential; reading a transposed
// 4096x1024 matrix column by column costs a cache miss per element, several times the GEMM's
// own share of the step.
template <typename Acc, typename T>
bool pack(const Tensor& x, Scratch<Acc>& buf) {
  const int64_t batches = x.stride(0) == 0 ? 1 : x.size(0);
  const int64_t rows = x.size(1), cols = x.size(2);
  const int64_t sb = x.stride(0), sr = x.stride(1), sc = x.stride(2);
  const T* src = static_cast<const T*>(x.data_ptr());
  buf.resize(static_cast<size_t>(batches * rows * cols));
  const bool transposed = sr == 1 && sc != 1 && rows > 1;
  // Lines of the buffer: rows of x, or of x^T when transposed.
  const int64_t lines = transposed ? cols : rows, len = transposed ? rows : cols;
  const int64_t s_line = transposed ? sc : sr, s_elem = transposed ? sr : sc;
  // Serial on purpose: the conversion is O(n^2) next to the O(n^3) GEMM, and an OpenMP team
  // here competes with OpenBLAS's own (spinning) threads, which costs far more than it saves.
  for (int64_t l = 0; l < batches * lines; ++l) {
    const T* line = src + (l / lines) * sb + (l % lines) * s_line;
    Acc* dst = buf.data() + l * len;
    if constexpr (std::is_same_v<Acc, float> &&
                  (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)) {
      if (s_elem == 1) {
        convert_dense(line, dst, len);
        continue;
      }
    }
    for (int64_t c = 0; c < len; ++c)
      dst[c] = static_cast<Acc>(static_cast<opmath_t<T>>(line[c * s_elem]));
  }
  return transposed;
}

// Chooses between using x in place and packing it into `buf` (which must outlive the GEMM).
template <typename Acc, typename T>
GemmOperand<Acc> prepare(const Tensor& x, Scratch<Acc>& buf, bool must_pack) {
  const int64_t rows = x.size(1), cols = x.size(2);
  GemmOperand<Acc> op;
  if constexpr (std::is_same_v<Acc, T>) {
    if (!must_pack && blas_layout(rows, cols, x.stride(1), x.stride(2), op.trans, op.ld)) {
      op.base = static_cast<const Acc*>(x.data_ptr());
      op.batch_stride = x.stride(0);
      return op;
    }
  }
  const bool transposed = pack<Acc, T>(x, buf);
  op.base = buf.data();
  op.batch_stride = x.stride(0) == 0 ? 0 : rows * cols;
  op.trans = transposed ? CblasTrans : CblasNoTrans;
  op.ld = std::max<int64_t>(1, transposed ? rows : cols);
  return op;
}

inline void gemm(const GemmOperand<float>& a, const GemmOperand<float>& b, int64_t batch, int m,
                 int n, int k, float* c) {
  sgemm(a.trans, b.trans, m, n, k, a.base + batch * a.batch_stride, static_cast<int>(a.ld),
        b.base + batch * b.batch_stride, static_cast<int>(b.ld), c, std::max(1, n));
}
inline void gemm(const GemmOperand<double>& a, const GemmOperand<double>& b, int64_t batch, int m,
                 int n, int k, double* c) {
  blas_gemm(a.trans, b.trans, m, n, k, 1.0, a.base + batch * a.batch_stride, a.ld,
            b.base + batch * b.batch_stride, b.ld, 0.0, c, std::max(1, n));
}

bool fits_blas_int(std::initializer_list<int64_t> values) {
  for (int64_t v : values)
    if (v > INT_MAX) return false;
  return true;
}

// bfloat16 on the bf16 instructions: operands in place when GEMM can read them, else packed
// (still bf16); the float32 sums rounded once into `out` (dense) by the kernel's store. False
// when the emulation must run.
// A bfloat16 operand [B, rows, cols] as bf16_gemm reads it: in place when GEMM can, else packed
// into `buf` (still bf16).
Bf16Matrix bf16_matrix(const Tensor& x, Scratch<BFloat16>& buf) {
  const GemmOperand<BFloat16> op = prepare<BFloat16, BFloat16>(x, buf, false);
  return Bf16Matrix{op.base, op.batch_stride, op.trans == CblasTrans, op.ld};
}

bool bmm_bf16_hardware(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  thread_local Scratch<BFloat16> a_buf, b_buf;
  const Bf16Matrix ma = bf16_matrix(a, a_buf), mb = bf16_matrix(b, b_buf);
  return bf16_gemm(B, M, N, K, ma, mb, out.data<BFloat16>(), N, M * N);
}

// Both operands of a floating GEMM as GEMM reads them (packed into the buffers where needed),
// rounded to TF32 first when float32 matmuls may use it.
template <typename Acc, typename T>
std::pair<GemmOperand<Acc>, GemmOperand<Acc>> gemm_operands(const Tensor& a, const Tensor& b,
                                                            Scratch<Acc>& a_buf,
                                                            Scratch<Acc>& b_buf) {
  bool round_operands = false;
  if constexpr (std::is_same_v<T, float>) round_operands = float32_operands_need_rounding();
  const GemmOperand<Acc> ga = prepare<Acc, T>(a, a_buf, round_operands);
  const GemmOperand<Acc> gb = prepare<Acc, T>(b, b_buf, round_operands);
  if constexpr (std::is_same_v<Acc, float>) {
    if (round_operands) {
      round_float32_operands(a_buf.data(), static_cast<int64_t>(a_buf.size()));
      round_float32_operands(b_buf.data(), static_cast<int64_t>(b_buf.size()));
    }
  }
  return {ga, gb};
}

// Floating types: T is the storage type, Acc (float or double) the GEMM type.
template <typename T>
void bmm_floating(const Tensor& out, const Tensor& a, const Tensor& b) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (bmm_bf16_hardware(out, a, b)) return;
  }
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  constexpr bool kReduced = !std::is_same_v<T, Acc>;
  thread_local Scratch<Acc> a_buf, b_buf, out_buf;
  const auto [ga, gb] = gemm_operands<Acc, T>(a, b, a_buf, b_buf);
  MT_CHECK(fits_blas_int({M, N, K, ga.ld, gb.ld}), "bmm: matrix dimensions exceed the BLAS ",
           "integer range, got [", B, ", ", M, ", ", K, "] x [", B, ", ", K, ", ", N, "]");

  Acc* c = nullptr;
  if constexpr (kReduced) {
    out_buf.resize(static_cast<size_t>(B * M * N));
    c = out_buf.data();
  } else {
    c = out.data<T>();
  }
  for (int64_t i = 0; i < B; ++i) {
    gemm(ga, gb, i, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), c + i * M * N);
  }
  if constexpr (kReduced) {
    T* dst = out.data<T>();
    const int64_t total = B * M * N;
    convert_dense_parallel(c, dst, total);  // the one rounding of the result
  }
}

template <typename T>
void bmm_integral(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* po = out.data<T>();
  const int64_t as0 = a.stride(0), as1 = a.stride(1), as2 = a.stride(2);
  const int64_t bs0 = b.stride(0), bs1 = b.stride(1), bs2 = b.stride(2);
  const int64_t rows = B * M;
#pragma omp parallel for if (rows * N * K >= 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t batch = r / M, i = r % M;
    const T* arow = pa + batch * as0 + i * as1;
    const T* bmat = pb + batch * bs0;
    T* orow = po + r * N;
    for (int64_t j = 0; j < N; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<int64_t>(arow[k * as2]) * static_cast<int64_t>(bmat[k * bs1 + j * bs2]);
      orow[j] = static_cast<T>(acc);
    }
  }
}

void bmm_kernel_cpu(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  dispatch_dtype<kAllTypes>(out.dtype(), "bmm", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.size(2) == 0) {
      std::memset(out.data_ptr(), 0, static_cast<size_t>(out.nbytes()));
      return;
    }
    if constexpr (std::is_integral_v<T>) {
      bmm_integral<T>(out, a, b);
    } else {
      bmm_floating<T>(out, a, b);
    }
  });
}

// gemm_opmath: c (float32, or float64) = a @ b, or += with accumulate. bfloat16 on the bf16
// instructions where they run it (float32 C read back with beta 1), else the operands widened
// exactly to float32 for blas_gemm; float32 and float64 in place where GEMM can read them.
template <typename T>
void gemm_opmath_typed(const Tensor& c, const Tensor& a2, const Tensor& b2, bool accumulate) {
  using Acc = opmath_t<T>;
  const int64_t M = c.size(0), N = c.size(1), K = a2.size(1);
  const Tensor a = linear_composite::batch1(a2), b = linear_composite::batch1(b2);
  Acc* out = static_cast<Acc*>(c.data_ptr());
  const Acc beta = accumulate ? Acc(1) : Acc(0);
  if (K == 0) {
    if (!accumulate) std::memset(out, 0, static_cast<size_t>(c.nbytes()));
    return;
  }
  if constexpr (std::is_same_v<T, BFloat16>) {
    thread_local Scratch<BFloat16> a_buf, b_buf;
    if (bf16_gemm(1, M, N, K, bf16_matrix(a, a_buf), bf16_matrix(b, b_buf), out, N, 0, beta))
      return;
  }
  thread_local Scratch<Acc> a_buf, b_buf;
  const auto [ga, gb] = gemm_operands<Acc, T>(a, b, a_buf, b_buf);
  blas_gemm(ga.trans, gb.trans, M, N, K, Acc(1), ga.base, ga.ld, gb.base, gb.ld, beta, out,
            std::max<int64_t>(1, N));
}

void gemm_opmath_cpu(const Tensor& c, const Tensor& a, const Tensor& b, bool accumulate) {
  MT_ASSERT(c.dim() == 2 && a.dim() == 2 && b.dim() == 2 && c.is_contiguous() &&
                a.size(0) == c.size(0) && b.size(1) == c.size(1) && a.size(1) == b.size(0) &&
                a.dtype() == b.dtype(),
            "gemm_opmath: expected c [M,N] (contiguous) = a [M,K] @ b [K,N] of one dtype, got ",
            c.shape(), " = ", a.shape(), " ", a.dtype(), " @ ", b.shape(), " ", b.dtype());
  if (c.numel() == 0) return;
  dispatch_dtype<kFloatingTypes>(a.dtype(), "gemm_opmath", a.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    MT_ASSERT(c.dtype() == dtype_of_v<opmath_t<T>>, "gemm_opmath: c must be ",
              dtype_of_v<opmath_t<T>>, " for ", a.dtype(), " operands, got ", c.dtype());
    gemm_opmath_typed<T>(c, a, b, accumulate);
  });
}

// scaled_mm_epilogue: rows in parallel, each row's scale read once. A float32, bfloat16 or
// float16 output is made a block at a time: the element math in float32 (the same formula,
// which then vectorises), rounded to the output by the dense conversion (to nearest even, as the
// element's cast); the other dtypes round each element.
void scaled_mm_epilogue_cpu(const Tensor& out, const Tensor& acc, const Tensor& scale_a,
                            const Tensor& scale_b, const Tensor& bias) {
  const int64_t M = out.size(0), N = out.size(1);
  if (out.numel() == 0) return;
  dispatch_dtype<kScaledMmOutTypes>(out.dtype(), "scaled_mm", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const float* c = acc.data<float>();
    const float* sa = scale_a.data<float>();
    const float* sb = scale_b.data<float>();
    const bool row_scales = scale_a.numel() > 1, col_scales = scale_b.numel() > 1;
    const float* b = bias.defined() ? bias.data<float>() : nullptr;
    T* o = out.data<T>();
    constexpr bool kBlocks =
        std::is_same_v<T, float> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;
    parallel_tasks(M, M * N, [&](int64_t i) {
      const float a_scale = sa[row_scales ? i : 0];
      if constexpr (kBlocks) {
        constexpr int64_t kBlock = 512;
        float block[kBlock];
        for (int64_t j0 = 0; j0 < N; j0 += kBlock) {
          const int64_t n = std::min(kBlock, N - j0);
          const float* ci = c + i * N + j0;
          float* v = block;
          if constexpr (std::is_same_v<T, float>) v = o + i * N + j0;
          if (col_scales) {
            for (int64_t j = 0; j < n; ++j)
              v[j] = scaled_mm_math::element<float>(ci[j], a_scale, sb[j0 + j], b, j0 + j);
          } else {
            const float b_scale = sb[0];
            for (int64_t j = 0; j < n; ++j)
              v[j] = scaled_mm_math::element<float>(ci[j], a_scale, b_scale, b, j0 + j);
          }
          if constexpr (!std::is_same_v<T, float>) convert_dense(block, o + i * N + j0, n);
        }
      } else {
        for (int64_t j = 0; j < N; ++j)
          o[i * N + j] =
              scaled_mm_math::element<T>(c[i * N + j], a_scale, sb[col_scales ? j : 0], b, j);
      }
    });
  });
}

}  // namespace

MT_REGISTER_KERNEL(bmm_kernel, kCPU, &bmm_kernel_cpu);
MT_REGISTER_KERNEL(scaled_mm_epilogue_kernel, kCPU, &scaled_mm_epilogue_cpu);
MT_REGISTER_KERNEL(gemm_opmath_kernel, kCPU, &gemm_opmath_cpu);

}  // namespace mantissa::cpu
