// The float32 GEMM of the CPU matmul/bmm and fused linear kernels: both go through sgemm(), so
// that a linear layer and its bmm/add composition give the same bits. (Convolution calls
// OpenBLAS itself: some of its GEMMs accumulate into C, with beta = 1.)
//
// Small products (a ToyModel layer: 20x10x10) run an in-house loop: OpenBLAS spends about
// 150 ns per call on argument checks, thread decisions and packing before any arithmetic, which
// is several times the arithmetic itself at these sizes. Larger ones go to cblas_sgemm.
#pragma once

#include <cblas.h>

#include <cstdint>

namespace mantissa::cpu {

// C[M,N] = op(A)[M,K] @ op(B)[K,N], row-major, with alpha = 1 and beta = 0 (C is overwritten).
// op(X) is X or its transpose per `ta`/`tb`; lda/ldb/ldc are row strides as in cblas.
void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A, int lda,
           const float* B, int ldb, float* C, int ldc);

enum class Rounding : uint8_t { None, BFloat16, Float16 };

// What a linear layer does to each row of its GEMM's result, in this order: round it to `round`
// (half-type layers), add the bias, apply ReLU (NaN and -0 pass) after rounding again, zero where
// the relu_mask row (ld mask_ld; floats, or 16-bit values of the `round` type) is <= 0 (ReLU's
// backward), store the row (to out16 as 16-bit values of the `round` type with row stride ldc,
// rounding what the bias left unrounded, instead of C when out16 is set), then add it into
// col_sums in double (rows in order: a bias gradient). These are the composition's steps and
// rounding points (kernels/cpu/linear_kernels.cpp).
struct GemmEpilogue {
  const float* bias = nullptr;
  bool relu = false;
  const void* relu_mask = nullptr;
  int64_t mask_ld = 0;
  double* col_sums = nullptr;
  Rounding round = Rounding::None;
  void* out16 = nullptr;
};

// sgemm() with the epilogue applied to each row in registers before it is stored, for shapes
// whose rows fit one AVX-512 register (small layers, where a separate pass would re-read every
// row right after its store). Same bits as sgemm() followed by the epilogue as a pass. Returns
// false, having done nothing, for other shapes or CPUs.
bool sgemm_fused(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A,
                 int lda, const float* B, int ldb, float* C, int ldc, const GemmEpilogue& ep);

// Whether sgemm() computes this shape itself rather than calling OpenBLAS (for tests).
bool sgemm_is_small(int M, int N, int K);

}  // namespace mantissa::cpu
