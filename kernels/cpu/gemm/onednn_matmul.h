// The one place the CPU kernels call oneDNN's matmul primitive: bfloat16 products on the bf16
// instructions (kernels/cpu/gemm/bf16_gemm.h), and float32 GEMMs when OpenBLAS picked kernels
// older than the CPU (kernels/cpu/gemm/blas.h).
//
// Contract: C[b] = alpha op(A[b]) op(B[b]) + beta C[b] for b in [0, batch), float32 accumulation,
// C float32 (read only when beta != 0) or bfloat16 (beta 0: the float32 sums rounded to nearest
// even once, on store), on the calling thread alone: OpenMP's thread count is
// set to 1 around the call, since libgomp's workers would spin after it and take the cores from
// the worker pool (kernels/cpu/worker_pool.h); callers split large products across the pool.
// Each thread keeps the compiled primitive of every layout it has run (up to 512), so a repeated
// layout costs a hash lookup.
#pragma once

#include <cstdint>

namespace mantissa::cpu {

enum class OneDnnType : uint8_t { Float32, BFloat16 };

// One operand: matrix b starts at base + b * batch_stride elements (0: the same matrix for every
// b). Not transposed: op(X)[i][j] = X[i * ld + j]; transposed: op(X)[i][j] = X[j * ld + i].
struct OneDnnOperand {
  const void* base = nullptr;
  int64_t batch_stride = 0;
  bool trans = false;
  int64_t ld = 0;
};

struct OneDnnProduct {
  OneDnnType type = OneDnnType::Float32;  // of A and B
  int64_t batch = 1, M = 0, N = 0, K = 0;
  OneDnnOperand a, b;
  OneDnnType c_type = OneDnnType::Float32;
  void* c = nullptr;  // of c_type
  int64_t ldc = 0, c_batch = 0;
  float alpha = 1.0f, beta = 0.0f;
};

// What ran: nothing (Refused: oneDNN offers only its reference implementation, orders of
// magnitude slower, so the caller's own path is the better one and counts it), AMX tiles
// (oneDNN's brgemm kernels; only for dense operands and results: a row stride equal to the row
// length), or its other JIT kernels (vector instructions: vdpbf16ps for bf16).
enum class OneDnnRun : uint8_t { Refused, AmxTiles, Vector };
OneDnnRun onednn_matmul(const OneDnnProduct& p);
// What onednn_matmul(p) would run on this thread, without running it (compiles and keeps the
// primitive): for callers that must know before they write anything.
OneDnnRun onednn_matmul_plan(const OneDnnProduct& p);

}  // namespace mantissa::cpu
