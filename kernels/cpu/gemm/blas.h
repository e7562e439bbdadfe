// Every OpenBLAS GEMM of the CPU kernels goes through blas_gemm(): OpenBLAS itself runs
// single-threaded, and a product large enough is split into slabs of C (rows, or columns when C
// is wider than tall) across the worker pool (kernels/cpu/worker_pool.h), one single-threaded
// OpenBLAS call per slab.
//
// Why not OpenBLAS's own threads: after every call they spin, yielding, for about 0.1 s before
// they sleep, so on a machine with few cores they hold the cores that the worker pool needs for
// the attention, activation and normalisation loops between GEMMs (bench/NOTES.md). The pool's
// workers block as soon as their share is done.
//
// float32 slabs run on oneDNN's matmul instead (kernels/cpu/gemm/onednn_matmul.h, also single-
// threaded) when the kernels OpenBLAS picked predate the CPU's vector ISA: an OpenBLAS that does
// not know the CPU model runs generic SSE3 kernels at a fifth of the speed
// (engine/cpu_matmul_paths.h: cpu_float32_gemm_library, MANTISSA_CPU_SGEMM).
//
// Contract: C = alpha op(A) op(B) + beta C, row-major, as cblas_?gemm with CblasRowMajor. Each
// element of C comes from one single-threaded call over all of K, so results depend on the
// library, its build and the pool's thread count (the slab boundaries), not on timing.
#pragma once

#include <cblas.h>

#include <cstdint>

namespace mantissa::cpu {

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K,
               double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
               double beta, double* C, int64_t ldc);

}  // namespace mantissa::cpu
