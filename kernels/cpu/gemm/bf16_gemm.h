// bfloat16 matrix products on the processor's bf16 instructions: AMX-BF16 tiles or AVX512-BF16's
// vdpbf16ps, through oneDNN's matmul primitive (the library PyTorch uses on CPUs; it picks the
// instructions from cpuid and, for AMX, asks the kernel for the tile state).
//
// Contract: C[b] = op(A[b]) @ op(B[b]) for b in [0, batch): bf16 operands, float32 accumulation,
// float32 results (the caller rounds them once on store, as the emulated path does) or results
// rounded once to bf16 on the kernel's store. Every
// product of two bf16 values is exact in float32, so this path and the emulation (operands
// widened exactly, then SGEMM) differ only in the order of the float32 sums, and in the
// instructions treating subnormal operands and results as zero (vdpbf16ps and tdpbf16ps ignore
// MXCSR's DAZ/FTZ and always flush). tests/test_cpu_gemm_paths.cpp checks the bound this gives.
//
// Threads: like blas_gemm(), each oneDNN call runs on one thread (OpenMP's count set to 1 around
// it: libgomp's workers would spin after it and take the cores from the worker pool), and a
// large product is split into row slabs of C (dense, as oneDNN's AMX kernels need), or ranges of
// the batch, across the worker pool. Each element comes from one call over all of K, so results
// depend on the pool's thread count, not on timing. Why oneDNN rather than an in-house vdpbf16ps
// kernel: docs/performance.md.
#pragma once

#include <cstdint>

#include "engine/half.h"

namespace mantissa::cpu {

// One operand: matrix b starts at base + b * batch_stride (0: the same matrix for every b). Not
// transposed: op(X)[i][j] = X[i * ld + j]; transposed: op(X)[i][j] = X[j * ld + i].
struct Bf16Matrix {
  const BFloat16* base = nullptr;
  int64_t batch_stride = 0;
  bool trans = false;
  int64_t ld = 0;
};

// Runs the product on the bf16 instructions and returns true; C (row stride ldc, batch stride
// c_batch) is written, and read only when beta != 0. Returns false having written nothing, for the
// caller to emulate, when the emulation is in use (no bf16 instructions, or forced), or for a
// single product small enough for sgemm's in-house loops (sgemm_is_small: both counted as
// emulated), or oneDNN offers only its reference code for the layout (counted as a fallback; strict
// fast paths throw instead). engine/cpu_matmul_paths.h has the counters and the switch. With beta
// != 0, C = op(A) op(B) + beta C (C read): a sum over several products, as the convolution's weight
// gradient accumulates over the batch. K <= 0 returns false, uncounted.
bool bf16_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const Bf16Matrix& a,
               const Bf16Matrix& b, float* c, int64_t ldc, int64_t c_batch, float beta = 0.0f);
// The same product with C stored as bfloat16: the float32 sums rounded to nearest even once, by
// the kernel's own store, without writing a float32 C and reading it again. For a long K the
// kernel may order the float32 sums differently from the float32-C product's (within the same
// bound). Returns false having written nothing, as above.
bool bf16_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const Bf16Matrix& a,
               const Bf16Matrix& b, BFloat16* c, int64_t ldc, int64_t c_batch);

}  // namespace mantissa::cpu
