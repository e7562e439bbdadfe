// Which path the CUDA convolution kernels (kernels/cuda/conv_kernels.cu) took, by direction:
// cuDNN, or the composed convolution (kernels/conv_composite.h: im2col, bmm, col2im) when cuDNN's
// heuristics offered no algorithm it would run for the call. A fallback is then visible, and
// strict fast paths (engine/cuda_linear_stats.h: set_strict_fast_paths,
// MANTISSA_STRICT_FAST_PATHS=1) make it an error naming the call and why each candidate was
// passed over. Declared in every build; only the CUDA kernels count, so without CUDA every count
// is zero. The counters are process-wide relaxed atomics.
#pragma once

#include <array>
#include <cstdint>

namespace mantissa::cuda {

enum class ConvDirection : uint8_t { Forward, BackwardInput, BackwardWeight };
inline constexpr int kNumConvDirections = 3;

struct ConvStats {
  std::array<int64_t, kNumConvDirections> cudnn{};     // calls cuDNN ran
  std::array<int64_t, kNumConvDirections> composed{};  // calls that fell back to the composition

  int64_t ran_cudnn(ConvDirection d) const { return cudnn[static_cast<int>(d)]; }
  int64_t fell_back(ConvDirection d) const { return composed[static_cast<int>(d)]; }
};

// A snapshot of the counters since start or the last reset_conv_stats().
ConvStats conv_stats();
void reset_conv_stats();

namespace detail {
void count_conv_cudnn(ConvDirection d);
// Counts a fallback; true when the caller must throw instead (strict fast paths).
[[nodiscard]] bool count_conv_composed(ConvDirection d);
}  // namespace detail

}  // namespace mantissa::cuda
