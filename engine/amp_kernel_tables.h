// Kernel tables of the mixed-precision machinery (GradScaler). Device-resident by design: the
// scale, growth tracker and found_inf are tensors on the gradients' device, so a CUDA step
// needs no host synchronisation.
#pragma once

#include <vector>

#include "engine/dispatch.h"
#include "engine/tensor.h"

namespace mantissa {

// For each tensor: found_inf (float32, 1 element) is set to 1 if any element is inf/NaN, and
// every element is multiplied by inv_scale (float32, 1 element), in place.
using AmpUnscaleKernel = void (*)(const std::vector<Tensor>& tensors, const Tensor& found_inf,
                                  const Tensor& inv_scale);
MT_KERNEL_TABLE(amp_unscale, AmpUnscaleKernel)

struct AmpUpdateParams {
  double growth_factor;
  double backoff_factor;
  int64_t growth_interval;
  double min_scale;    // 0: no floor
  int64_t hysteresis;  // back off on the hysteresis-th consecutive overflow and after
};
// Updates scale (float32), growth_tracker and overflow_streak (int32), all 1-element tensors,
// from found_inf (float32, 1 element; > 0 means an overflow happened this step).
using AmpUpdateScaleKernel = void (*)(const Tensor& scale, const Tensor& growth_tracker,
                                      const Tensor& overflow_streak, const Tensor& found_inf,
                                      const AmpUpdateParams& params);
MT_KERNEL_TABLE(amp_update_scale, AmpUpdateScaleKernel)

}  // namespace mantissa
