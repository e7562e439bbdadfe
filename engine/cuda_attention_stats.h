// Which path scaled_dot_product_attention took on CUDA (kernels/cuda/attention_kernels.cu), as
// linear_stats() does for the fused linear layers: every call of the fused forward kernel by
// dtype, every call that ran the composed path (bmm -> masked softmax -> bmm) by reason, and
// every backward that recomputed the weights with composed ops from the fused forward's
// logsumexp. A fast path that silently stops running is then visible; strict mode makes a
// fallback an error, for tests that mean to exercise the fused kernel.
//
// Declared in every build; only the CUDA kernels bump the counters (process-wide relaxed
// atomics), so without CUDA attention_stats() is all zeros. docs/kernels.md, "Attention", has
// the rule.
#pragma once

#include <array>
#include <cstdint>

#include "engine/dtype.h"

namespace mantissa::cuda {

// Why a CUDA attention call ran the composed path; the first that applies is counted.
enum class AttentionFallback : uint8_t {
  Dtype,    // float32/float64: the fused kernel is float16/bfloat16 only
  HeadDim,  // E or Ev is not 64 or 128, or E != Ev
  Mask,     // an explicit attn_mask (bool or float); is_causal is fused
  Dropout,  // dropout_p > 0
  Size,     // a sequence length or batch beyond the kernel's int32 grid
};
inline constexpr int kNumAttentionFallbacks = 5;
const char* attention_fallback_name(AttentionFallback reason);

struct AttentionStats {
  int64_t fused_float16 = 0, fused_bfloat16 = 0;  // fused forward calls
  int64_t composed_backward = 0;  // backwards of a fused forward, recomputed with composed ops
  std::array<int64_t, kNumAttentionFallbacks> fallbacks{};
  int64_t fell_back(AttentionFallback reason) const { return fallbacks[static_cast<int>(reason)]; }
};

// A snapshot of the counters since start or the last reset_attention_stats().
AttentionStats attention_stats();
void reset_attention_stats();

// Strict fused attention: a CUDA call that would fall back throws mantissa::Error naming the
// reason and the shapes instead. Off at start.
bool strict_fused_attention();
void set_strict_fused_attention(bool strict);

namespace detail {
// Called by the CUDA kernels (one relaxed atomic add each).
void count_attention_fused(DType dtype);
void count_attention_composed_backward();
// Counts a fallback; true when the caller must throw instead (strict mode).
[[nodiscard]] bool count_attention_fallback(AttentionFallback reason);
}  // namespace detail

}  // namespace mantissa::cuda
