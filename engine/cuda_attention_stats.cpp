#include "engine/cuda_attention_stats.h"

#include <atomic>

namespace mantissa::cuda {
namespace {

struct Counters {
  std::atomic<int64_t> fused_float16{0}, fused_bfloat16{0}, composed_backward{0};
  std::atomic<int64_t> fallbacks[kNumAttentionFallbacks] = {};
  std::atomic<bool> strict{false};
};

Counters& counters() {
  static Counters c;
  return c;
}

void bump(std::atomic<int64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

const char* attention_fallback_name(AttentionFallback reason) {
  switch (reason) {
    case AttentionFallback::Dtype:
      return "Dtype";
    case AttentionFallback::HeadDim:
      return "HeadDim";
    case AttentionFallback::Mask:
      return "Mask";
    case AttentionFallback::Dropout:
      return "Dropout";
    case AttentionFallback::Size:
      return "Size";
  }
  return "?";
}

AttentionStats attention_stats() {
  Counters& c = counters();
  AttentionStats s;
  s.fused_float16 = c.fused_float16.load(std::memory_order_relaxed);
  s.fused_bfloat16 = c.fused_bfloat16.load(std::memory_order_relaxed);
  s.composed_backward = c.composed_backward.load(std::memory_order_relaxed);
  for (int i = 0; i < kNumAttentionFallbacks; ++i)
    s.fallbacks[i] = c.fallbacks[i].load(std::memory_order_relaxed);
  return s;
}

void reset_attention_stats() {
  Counters& c = counters();
  c.fused_float16.store(0, std::memory_order_relaxed);
  c.fused_bfloat16.store(0, std::memory_order_relaxed);
  c.composed_backward.store(0, std::memory_order_relaxed);
  for (auto& f : c.fallbacks) f.store(0, std::memory_order_relaxed);
}

bool strict_fused_attention() { return counters().strict.load(std::memory_order_relaxed); }
void set_strict_fused_attention(bool strict) {
  counters().strict.store(strict, std::memory_order_relaxed);
}

namespace detail {
void count_attention_fused(DType dtype) {
  bump(dtype == DType::BFloat16 ? counters().fused_bfloat16 : counters().fused_float16);
}
void count_attention_composed_backward() { bump(counters().composed_backward); }
bool count_attention_fallback(AttentionFallback reason) {
  bump(counters().fallbacks[static_cast<int>(reason)]);
  return strict_fused_attention();
}
}  // namespace detail

}  // namespace mantissa::cuda
