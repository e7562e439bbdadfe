// The in-house float32 GEMM of the CPU kernels, kept apart from them: the matmul/bmm kernels and
// the fused linear kernels both call sgemm(), so a linear layer and its bmm + add composition
// give the same bits. (Convolution calls OpenBLAS itself: some of its GEMMs accumulate into C.)
//
// Contract:
//  - Shapes and strides: C[M,N] = op(A)[M,K] @ op(B)[K,N], all row-major with unit column
//    stride; op(X) is X or its transpose per `ta`/`tb`; lda/ldb/ldc are row strides as in cblas
//    (lda >= the row length of A as stored, likewise ldb, ldc >= N). alpha = 1 and beta = 0: C is
//    overwritten, never read. M <= 0 or N <= 0 is a no-op.
//  - Determinism: products small enough for the in-house loops (sgemm_is_small) give the same
//    bits on every call, thread count and machine: each element sums its products for
//    k = 0, 1, ..., K-1 in order, every product rounded before its sum. This file is built with
//    -ffp-contract=off (CMakeLists.txt) so the compiler never fuses them into FMAs, and the
//    AVX-512, AVX2 and baseline clones compute identical results. Larger products call
//    blas_gemm() (kernels/cpu/gemm/blas.h), which is deterministic for a given OpenBLAS build and
//    worker-pool thread count only.
//  - The epilogue (GemmEpilogue) runs in the small loops' registers, in the order and at the
//    rounding points of the separate passes it replaces, so both give the same bits.
//
// Small products run in-house because OpenBLAS's fixed per-call cost (argument checks, thread
// decisions, packing) exceeds the arithmetic of a small layer (bench/NOTES.md has the numbers).
#pragma once

#include <cblas.h>

#include <cstdint>

namespace mantissa::cpu {

void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A, int lda,
           const float* B, int ldb, float* C, int ldc);

// The 16-bit storage type a half-type layer rounds its values to (None: a float32 layer).
enum class Rounding : uint8_t { None, BFloat16, Float16 };

// What a linear layer does to each row of its GEMM's result before storing it. One job per
// field, applied in this order (the order and rounding points of the composition in
// kernels/cpu/linear_kernels.cpp):
//  1. round:      the GEMM's float32 row rounded to `round` (kept in float);
//  2. bias:       the bias added in float, then rounded to `round` again when an activation
//                 follows (otherwise the store rounds it);
//  3. act:        ReLU, activation::relu's rule (kernels/activation_math.h);
//  4. relu_grad:  ReLU's backward, zero where the layer's output h is <= 0
//                 (formulas::relu_grad's rule, engine/activation_formulas.h);
//  5. store:      to C as float32, or as 16-bit values of `round` type into `narrow`;
//  6. col_sums:   the stored row added into column sums in double, rows in order (a bias
//                 gradient, as the sum kernel accumulates it).
struct GemmEpilogue {
  enum class Activation : uint8_t { Identity, Relu };
  struct Bias {
    const float* values = nullptr;  // [N], already in float; null: no bias
  };
  struct ReluGrad {
    const void* h = nullptr;  // [M, N] with row stride ld: floats, or 16-bit values of `round`
    int64_t ld = 0;
  };
  struct Store {
    Rounding round = Rounding::None;
    void* narrow = nullptr;  // [M, N] 16-bit values with row stride ldc, instead of C
  };
  struct ColumnSums {
    double* sums = nullptr;  // [N], accumulated into
  };

  Store store;
  Bias bias;
  Activation act = Activation::Identity;
  ReluGrad relu_grad;
  ColumnSums col_sums;

  // A linear layer's forward: act(round(C) + bias), stored as the layer's type.
  static GemmEpilogue linear_forward(Store store, Bias bias, Activation act) {
    GemmEpilogue ep;
    ep.store = store;
    ep.bias = bias;
    ep.act = act;
    return ep;
  }
  // A weight gradient: C stored as the layer's type.
  static GemmEpilogue rounded(Store store) {
    GemmEpilogue ep;
    ep.store = store;
    return ep;
  }
  // The hidden layer's gradient in an MLP block's backward: C masked by ReLU's derivative read
  // from h (when relu_grad.h is set), stored, and reduced into the bias gradient (when sums is
  // set).
  static GemmEpilogue activation_backward(Store store, ReluGrad relu_grad, ColumnSums sums) {
    GemmEpilogue ep;
    ep.store = store;
    ep.relu_grad = relu_grad;
    ep.col_sums = sums;
    return ep;
  }
};

// sgemm() with the epilogue applied to each row in registers before it is stored, for shapes
// whose rows fit one AVX-512 register (small layers, where a separate pass would re-read every
// row right after its store). Same bits as sgemm() followed by the epilogue as passes. Returns
// false, having done nothing, for other shapes or CPUs.
bool sgemm_fused(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float* A,
                 int lda, const float* B, int ldb, float* C, int ldc, const GemmEpilogue& ep);

// Whether sgemm() computes this shape itself rather than calling OpenBLAS (for tests).
bool sgemm_is_small(int M, int N, int K);

}  // namespace mantissa::cpu
