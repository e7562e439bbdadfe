#include "kernels/cpu/gemm/sgemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/gemm/lanes.h"

namespace mantissa::cpu {
namespace {

// Up to this many multiply-adds (and this many output columns) a product is "small": past it
// OpenBLAS's register blocking outruns the loop below (bench/NOTES.md).
constexpr int64_t kSmallWork = 32 * 32 * 32;
constexpr int kSmallMaxN = 128;
constexpr int64_t kPackedMax = 4096;  // floats of op(B), padded, on the stack
constexpr int64_t kOutMax = 8192;     // floats of C, padded, on the stack

using Vec8 = float __attribute__((vector_size(32)));
using Vec16 = float __attribute__((vector_size(64)));
constexpr int kRows = 4;  // independent accumulator chains per column block

// The rows of C from op(A) and Bp, op(B) packed as [K, Np] (Np a multiple of W floats, zero
// padded, 64-byte aligned), stored as whole vectors only:
// - padded: into Cp, [M rounded up to kRows, Np] with row stride ldo; the caller copies out;
// - direct (one column block, C dense with ldo == N): row i straight into C, its last W - N
//   lanes spilling into row i + 1, which is stored after it and overwrites them; the last row,
//   which would spill past C, goes to `last` for the caller to copy.
// The file is built without FMA contraction and every product is rounded before its sum, so each
// clone (and each machine) computes the same bits: lanes are independent columns, and every
// element sums k = 0, 1, ... K-1 in order.
template <int W>
__attribute__((always_inline)) inline void small_kernel_body(int M, int K, const float* A,
                                                             int64_t a_row, int64_t a_col,
                                                             const float* Bp, int Np, float* Cp,
                                                             int64_t ldo, bool direct,
                                                             float* last) {
  using Vec = std::conditional_t<W == 16, Vec16, Vec8>;
  for (int i0 = 0; i0 < M; i0 += kRows) {
    // Rows past the end repeat the last row (valid memory); their results are dropped.
    const float* a[kRows];
    for (int r = 0; r < kRows; ++r) a[r] = A + std::min(i0 + r, M - 1) * a_row;
    for (int jb = 0; jb < Np; jb += W) {
      Vec acc[kRows] = {};
      for (int k = 0; k < K; ++k) {
        const Vec b = *reinterpret_cast<const Vec*>(Bp + static_cast<int64_t>(k) * Np + jb);
        const int64_t ak = k * a_col;
        acc[0] += a[0][ak] * b;
        acc[1] += a[1][ak] * b;
        acc[2] += a[2][ak] * b;
        acc[3] += a[3][ak] * b;
      }
      for (int r = 0; r < kRows; ++r) {
        const int i = i0 + r;
        float* dst = !direct      ? Cp + i * ldo + jb
                     : i < M - 1  ? Cp + i * ldo
                     : i == M - 1 ? last
                                  : nullptr;
        if (dst != nullptr) std::memcpy(dst, &acc[r], sizeof(Vec));
      }
    }
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void small_kernel(
    int W, int M, int K, const float* A, int64_t a_row, int64_t a_col, const float* Bp, int Np,
    float* Cp, int64_t ldo, bool direct, float* last) {
  if (W == 16) {
    small_kernel_body<16>(M, K, A, a_row, a_col, Bp, Np, Cp, ldo, direct, last);
  } else {
    small_kernel_body<8>(M, K, A, a_row, a_col, Bp, Np, Cp, ldo, direct, last);
  }
}

// GCC 12 reports the intrinsics' internal _mm*_undefined_*() as maybe-uninitialized (GCC bug
// 105593).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define MT_AVX512 MT_LANES_TARGET
using lanes::in_register;
using lanes::Lanes16;
using lanes::Lanes8;
using lanes::load_row;
using lanes::round_to;

// The epilogue's steps, copied out of the GemmEpilogue into registers: read through the
// reference, they would be reloaded after every store (which might have written them).
struct Steps {
  Rounding round;
  bool bias, relu, sums;
};

// One row's epilogue (see GemmEpilogue); Half: the layer stores a 16-bit type.
template <bool Half, typename L>
MT_AVX512 inline void finish_row(const L lanes, const Steps steps, typename L::Reg v,
                                 typename L::Reg bias, const void* mask_row, float* c_row,
                                 void* out16_row, __m512d sums[2]) {
  const Rounding rnd = Half ? steps.round : Rounding::None;
  v = round_to<L>(v, rnd);
  if (steps.bias) v = L::add(v, bias);
  if (steps.relu) {
    if (steps.bias) v = round_to<L>(v, rnd);  // rounded again after the bias
    v = L::zero_if_negative(v, v);
  }
  const bool rounded = !steps.bias || steps.relu;  // else the store rounds
  if (mask_row != nullptr) v = L::zero_if_not_positive(v, load_row(lanes, mask_row, rnd));
  if (Half && out16_row != nullptr) {
    if (rnd == Rounding::Float16) {
      lanes.store_half(out16_row, v);
    } else {
      lanes.store_bf16(out16_row, rounded ? v : L::round_bf16(v));
    }
  } else {
    lanes.store(c_row, v);
  }
  if (steps.sums) L::add_sums(sums, v);
}

// R rows of C = op(A) @ B for a B of at most one register's width, B's rows `ldb` apart, each
// row finished by the epilogue in registers before it is stored.
template <int R, bool Half, typename L>
MT_AVX512 void masked_rows(const L& lanes, int K, const float* A, int64_t a_row, int64_t a_col,
                           const float* B, int64_t ldb, float* C, int64_t ldc,
                           const GemmEpilogue& ep, int row) {
  A += row * a_row;
  C += row * ldc;
  typename L::Reg acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = L::zero();
  for (int k = 0; k < K; ++k) {
    const typename L::Reg b = lanes.load(B + k * ldb);
    const float* a = A + k * a_col;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = L::add(acc[r], L::mul(L::broadcast(a[r * a_row]), b));
  }
  __m512d sums[2] = {};
  double* const col_sums = ep.col_sums.sums;
  if (col_sums != nullptr) lanes.load_sums(col_sums, sums);
  const typename L::Reg bias = ep.bias.values != nullptr ? lanes.load(ep.bias.values) : L::zero();
  const int64_t mask_row_bytes = ep.relu_grad.ld * (Half ? 2 : 4);
  const L ln = lanes;
  const Steps steps{ep.store.round, ep.bias.values != nullptr,
                    ep.act == GemmEpilogue::Activation::Relu, col_sums != nullptr};
  const char* mask = ep.relu_grad.h == nullptr
                         ? nullptr
                         : static_cast<const char*>(ep.relu_grad.h) + row * mask_row_bytes;
  char* out16 = Half && ep.store.narrow != nullptr
                    ? static_cast<char*>(ep.store.narrow) + row * ldc * 2
                    : nullptr;
  if constexpr (!Half) {
    // Unrolled, like the products: the float32 epilogue is a few instructions per row.
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      finish_row<false>(ln, steps, acc[r], bias, mask ? mask + r * mask_row_bytes : nullptr,
                        C + r * ldc, nullptr, sums);
    }
  } else {
    // A loop: unrolled, the rounding variants made each instantiation kilobytes long, and a
    // step's few GEMMs then missed the instruction cache.
    typename L::Reg rows[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) rows[r] = acc[r];
#pragma GCC unroll 1
    for (int r = 0; r < R; ++r) {
      finish_row<true>(ln, steps, rows[r], bias, mask ? mask + r * mask_row_bytes : nullptr,
                       C + r * ldc, out16 ? out16 + r * ldc * 2 : nullptr, sums);
    }
  }
  if (col_sums != nullptr) lanes.store_sums(col_sums, sums);
}

// Blocks of 8 rows, then one block of the rest: no padded rows are computed.
template <bool Half, typename L>
MT_AVX512 void masked_kernel(const L& lanes, int M, int K, const float* A, int64_t a_row,
                             int64_t a_col, const float* B, int64_t ldb, float* C, int64_t ldc,
                             const GemmEpilogue& ep) {
  constexpr int kBlock = 8;
  int i = 0;
  for (; i + kBlock <= M; i += kBlock)
    masked_rows<kBlock, Half>(lanes, K, A, a_row, a_col, B, ldb, C, ldc, ep, i);
  using Block = void (*)(const L&, int, const float*, int64_t, int64_t, const float*, int64_t,
                         float*, int64_t, const GemmEpilogue&, int);
  static constexpr Block kRest[kBlock] = {nullptr,
                                          &masked_rows<1, Half, L>,
                                          &masked_rows<2, Half, L>,
                                          &masked_rows<3, Half, L>,
                                          &masked_rows<4, Half, L>,
                                          &masked_rows<5, Half, L>,
                                          &masked_rows<6, Half, L>,
                                          &masked_rows<7, Half, L>};
  if (i < M) kRest[M - i](lanes, K, A, a_row, a_col, B, ldb, C, ldc, ep, i);
}

template <typename L>
MT_AVX512 void masked_kernel_for(const L& lanes, int M, int K, const float* A, int64_t a_row,
                                 int64_t a_col, const float* B, int64_t ldb, float* C, int64_t ldc,
                                 const GemmEpilogue& ep) {
  if (ep.store.round == Rounding::None) {
    masked_kernel<false>(lanes, M, K, A, a_row, a_col, B, ldb, C, ldc, ep);
  } else {
    masked_kernel<true>(lanes, M, K, A, a_row, a_col, B, ldb, C, ldc, ep);
  }
}

MT_AVX512 void masked_gemm(int M, int N, int K, const float* A, int64_t a_row, int64_t a_col,
                           const float* B, int64_t ldb, float* C, int64_t ldc,
                           const GemmEpilogue& ep) {
  if (N > 8) {
    masked_kernel_for(Lanes16{static_cast<__mmask16>((1u << N) - 1)}, M, K, A, a_row, a_col, B, ldb,
                      C, ldc, ep);
  } else {
    masked_kernel_for(Lanes8{static_cast<__mmask8>((1u << N) - 1)}, M, K, A, a_row, a_col, B, ldb,
                      C, ldc, ep);
  }
}
#undef MT_AVX512
#pragma GCC diagnostic pop

// The masked path, for small products (sgemm_is_small) at most 16 columns wide.
bool masked_width(int N) { return N <= 16 && cpu_has_avx512_vl_bw_f16c(); }

void run_masked(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A,
                int lda, const float* B, int ldb, float* C, int ldc, const GemmEpilogue& ep) {
  // op(A)(i, k) = A[i * a_row + k * a_col].
  const int64_t a_row = ta == CblasTrans ? 1 : lda, a_col = ta == CblasTrans ? lda : 1;
  if (tb == CblasTrans) {  // op(B) rows are B's columns: gathered into [K, 16]
    alignas(64) float packed[kPackedMax];
    for (int j = 0; j < N; ++j) {
      const float* src = B + static_cast<int64_t>(j) * ldb;
      for (int k = 0; k < K; ++k) packed[k * 16 + j] = src[k];
    }
    masked_gemm(M, N, K, A, a_row, a_col, packed, 16, C, ldc, ep);
  } else {
    masked_gemm(M, N, K, A, a_row, a_col, B, ldb, C, ldc, ep);
  }
}

}  // namespace

bool sgemm_is_small(int M, int N, int K) {
  const int64_t padded = (static_cast<int64_t>(N) + 15) / 16 * 16;
  const int64_t rows = (static_cast<int64_t>(M) + kRows - 1) / kRows * kRows;
  return N <= kSmallMaxN && static_cast<int64_t>(M) * N * K <= kSmallWork &&
         padded * K <= kPackedMax && rows * padded <= kOutMax;
}

void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A, int lda,
           const float* B, int ldb, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (!sgemm_is_small(M, N, K)) {
    blas_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
    return;
  }
  if (masked_width(N)) return run_masked(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, {});
  // op(A)(i, k) = A[i * a_row + k * a_col].
  const int64_t a_row = ta == CblasTrans ? 1 : lda, a_col = ta == CblasTrans ? lda : 1;
  alignas(64) float packed[kPackedMax];
  // op(B) as a dense, zero-padded [K, Np] block, so the inner loop reads whole vectors.
  const int lanes = N > 8 ? 16 : 8;
  const int Np = (N + lanes - 1) / lanes * lanes;
  for (int k = 0; k < K; ++k) {
    float* row = packed + static_cast<int64_t>(k) * Np;
    if (tb == CblasTrans) {
      for (int j = 0; j < N; ++j) row[j] = B[static_cast<int64_t>(j) * ldb + k];
    } else {
      const float* src = B + static_cast<int64_t>(k) * ldb;
      for (int j = 0; j < N; ++j) row[j] = src[j];
    }
    std::fill(row + N, row + Np, 0.0f);
  }
  // Direct stores need the spill (lanes - N) to stay inside the next row.
  if (Np == lanes && ldc == N && 2 * N > lanes) {
    alignas(64) float last[16];
    small_kernel(lanes, M, K, A, a_row, a_col, packed, Np, C, ldc, true, last);
    float* dst = C + static_cast<int64_t>(M - 1) * ldc;
    for (int j = 0; j < N; ++j) dst[j] = last[j];
    return;
  }
  alignas(64) float out[kOutMax];
  small_kernel(lanes, M, K, A, a_row, a_col, packed, Np, out, Np, false, nullptr);
  for (int i = 0; i < M; ++i) {
    const float* src = out + static_cast<int64_t>(i) * Np;
    float* dst = C + static_cast<int64_t>(i) * ldc;
    for (int j = 0; j < N; ++j) dst[j] = src[j];
  }
}

bool sgemm_fused(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A,
                 int lda, const float* B, int ldb, float* C, int ldc, const GemmEpilogue& ep) {
  if (M <= 0 || !masked_width(N) || !sgemm_is_small(M, N, K)) return false;
  run_masked(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, ep);
  return true;
}

}  // namespace mantissa::cpu
