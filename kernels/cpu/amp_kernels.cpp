// CPU kernels of the GradScaler: fused inf/NaN check + unscale, and the scale update. The update
// follows torch._amp_update_scale_ exactly (growth only when the grown scale stays finite in
// float32), plus mantissa's min_scale floor and overflow hysteresis.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "engine/amp_kernel_tables.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

void amp_unscale_cpu(const std::vector<Tensor>& tensors, const Tensor& found_inf,
                     const Tensor& inv_scale) {
  float* found = found_inf.data<float>();
  const float inv = *inv_scale.data<float>();
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    dispatch_dtype<kFloatingTypes>(t.dtype(), "amp_unscale", t.device(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using M = opmath_t<T>;
      std::atomic<bool> non_finite{false};  // written by any OpenMP thread
      elementwise<T, T>(
          t,
          [&](T v) {
            const M x = static_cast<M>(v);
            if (!std::isfinite(x)) non_finite.store(true, std::memory_order_relaxed);
            return T(x * static_cast<M>(inv));
          },
          t);
      if (non_finite.load()) *found = 1.0f;
    });
  }
}

void amp_update_scale_cpu(const Tensor& scale, const Tensor& growth_tracker,
                          const Tensor& overflow_streak, const Tensor& found_inf,
                          const AmpUpdateParams& p) {
  float& s = *scale.data<float>();
  int32_t& tracker = *growth_tracker.data<int32_t>();
  int32_t& streak = *overflow_streak.data<int32_t>();
  if (*found_inf.data<float>() > 0.0f) {
    tracker = 0;
    ++streak;
    if (streak >= p.hysteresis) {
      const float backed_off = static_cast<float>(s * p.backoff_factor);
      // The floor stops a back-off; it never raises a scale that is already below it (set by
      // init_scale or update(new_scale)).
      const float floor = std::min(s, static_cast<float>(p.min_scale));
      s = std::max(backed_off, floor);
    }
    return;
  }
  streak = 0;
  const int32_t successful = tracker + 1;
  if (successful == p.growth_interval) {
    const float grown = static_cast<float>(s * p.growth_factor);
    if (std::isfinite(grown)) s = grown;
    tracker = 0;
  } else {
    tracker = successful;
  }
}

}  // namespace

MT_REGISTER_KERNEL(amp_unscale_kernel, kCPU, &amp_unscale_cpu);
MT_REGISTER_KERNEL(amp_update_scale_kernel, kCPU, &amp_update_scale_cpu);

}  // namespace mantissa::cpu
