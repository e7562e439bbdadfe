// Which path the CUDA fused linear kernels (kernels/cuda/cublaslt_linear.cpp) took, in the spirit
// of memory_stats(): every cuBLASLt GEMM they ran, by epilogue and dtype, the ReLU route, and every
// time they fell back to the composed path (kernels/linear_composite.h), by reason. A fast path
// that silently stops running is then visible, and strict mode makes cuBLASLt's refusals errors.
//
// Declared in every build. The counters are process-wide (all devices together) relaxed atomics;
// only the CUDA kernels bump them, so without CUDA linear_stats() is all zeros and strict mode
// changes nothing. docs/cuda.md, "Fused linear paths", has the table of reasons.
#pragma once

#include <array>
#include <cstdint>

#include "engine/dtype.h"

namespace mantissa::cuda {

// The cuBLASLt epilogues the fused linear kernels use. ReLU's are deliberately absent: they turn
// NaN into 0 (max(x, 0)), so ReLU runs as the BIAS/DEFAULT GEMM plus the relu kernels.
enum class LinearEpilogue : uint8_t {
  Default,
  Bias,
  Gelu,
  GeluBias,
  GeluAux,
  GeluAuxBias,
  BGradB,
  DGelu,
  DGeluBGrad,
};
inline constexpr int kNumLinearEpilogues = 9;

// Why a fused linear kernel ran the composed path instead of a cuBLASLt GEMM.
enum class LinearFallback : uint8_t {
  // By design: decided before cuBLASLt is asked, never an error.
  UnsupportedDtype,  // float64 and integers stay on the cuBLAS/bmm path
  NonUnitStride,     // an operand whose columns are not unit-stride (cuBLASLt takes one ld)
  NonPackedBias,     // a broadcast bias (stride 0): BIAS wants a packed [N] vector
  AuxLayout,         // GELU's aux leading dimension is not a multiple of 8, or no aux is at hand
  Empty,             // an empty reduction dimension (K == 0 forward, M == 0 or N == 0 backward)
  // A refusal: cuBLASLt was asked and offered no algorithm (NOT_SUPPORTED or an empty answer).
  // Strict mode throws for these.
  NoAlgorithm,
};
inline constexpr int kNumLinearFallbacks = 6;

constexpr bool is_refusal(LinearFallback reason) { return reason == LinearFallback::NoAlgorithm; }

// cuBLASLt's names without the prefix ("BIAS", "GELU_AUX_BIAS", "DGELU_BGRAD", ...), and the
// reason's enumerator name ("NoAlgorithm", ...).
const char* linear_epilogue_name(LinearEpilogue epilogue);
const char* linear_fallback_name(LinearFallback reason);

struct LinearStats {
  // The dtypes cuBLASLt runs, in this order: float32, float16, bfloat16; -1 for any other.
  static constexpr int kNumDtypes = 3;
  static int dtype_index(DType dtype) {
    switch (dtype) {
      case DType::Float32:
        return 0;
      case DType::Float16:
        return 1;
      case DType::BFloat16:
        return 2;
      default:
        return -1;
    }
  }

  // cuBLASLt GEMMs that ran, by epilogue and dtype.
  std::array<std::array<int64_t, kNumDtypes>, kNumLinearEpilogues> epilogues{};
  // The ReLU route, by dtype: forward = BIAS/DEFAULT GEMM, then relu in place; backward (of
  // linear_act_linear's hidden layer) = DEFAULT GEMM, then relu_backward and the column sums.
  // The designed path, not a fallback; each also counts its GEMM under `epilogues`.
  std::array<int64_t, kNumDtypes> relu_forward{};
  std::array<int64_t, kNumDtypes> relu_backward{};
  // Calls that ran the composed path, by reason.
  std::array<int64_t, kNumLinearFallbacks> fallbacks{};

  int64_t ran(LinearEpilogue e, DType dtype) const {
    const int d = dtype_index(dtype);
    return d < 0 ? 0 : epilogues[static_cast<int>(e)][d];
  }
  int64_t ran_relu_forward(DType dtype) const {
    const int d = dtype_index(dtype);
    return d < 0 ? 0 : relu_forward[d];
  }
  int64_t ran_relu_backward(DType dtype) const {
    const int d = dtype_index(dtype);
    return d < 0 ? 0 : relu_backward[d];
  }
  int64_t fell_back(LinearFallback reason) const { return fallbacks[static_cast<int>(reason)]; }
};

// A snapshot of the counters since start or the last reset_linear_stats().
LinearStats linear_stats();
void reset_linear_stats();

// Strict fast paths: a fallback caused by a refusal (is_refusal) throws mantissa::Error naming
// the op, epilogue, dtype, shape and alignments instead of running the composed path. Starts as
// the environment variable MANTISSA_STRICT_FAST_PATHS says ("1": on), read once.
bool strict_fast_paths();
void set_strict_fast_paths(bool strict);

namespace detail {
// Called by the CUDA kernels; cheap (one relaxed atomic add each).
void count_linear_epilogue(LinearEpilogue epilogue, DType dtype);
void count_linear_relu(bool backward, DType dtype);
// Counts a fallback; true when the caller must throw instead (strict mode and a refusal).
[[nodiscard]] bool count_linear_fallback(LinearFallback reason);
}  // namespace detail

}  // namespace mantissa::cuda
