#include "amp/grad_scaler.h"

#include <algorithm>

#include "autograd/functions.h"
#include "autograd/node.h"
#include "engine/amp_kernel_tables.h"

namespace mantissa::amp {

GradScaler::GradScaler(bool enabled) : GradScaler(GradScalerOptions{.enabled = enabled}) {}

GradScaler::GradScaler(const GradScalerOptions& o) : options_(o) {
  MT_CHECK(o.init_scale > 0.0, "GradScaler: init_scale must be positive, got ", o.init_scale);
  MT_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor should be > 1, got ", o.growth_factor);
  // PyTorch only asks backoff_factor < 1: 0 (drop the scale to min_scale on an overflow) and a
  // growth_interval of 0 (never grow) are accepted as there; negative values are refused.
  MT_CHECK(o.backoff_factor >= 0.0 && o.backoff_factor < 1.0,
           "GradScaler: backoff_factor should be < 1 and >= 0, got ", o.backoff_factor);
  MT_CHECK(o.growth_interval >= 0, "GradScaler: growth_interval should be >= 0, got ",
           o.growth_interval);
  MT_CHECK(o.min_scale >= 0.0, "GradScaler: min_scale must be >= 0, got ", o.min_scale);
  MT_CHECK(o.hysteresis >= 1, "GradScaler: hysteresis must be >= 1, got ", o.hysteresis);
}

void GradScaler::lazy_init(Device device) {
  if (scale_.defined()) return;
  const TensorOptions f32 = TensorOptions(device).dtype(kFloat32);
  const TensorOptions i32 = TensorOptions(device).dtype(kInt32);
  scale_ = full({}, options_.init_scale, f32);
  growth_tracker_ = full({}, init_growth_tracker_, i32);
  overflow_streak_ = full({}, init_overflow_streak_, i32);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  lazy_init(loss.device());
  // PyTorch's scale is a one-element 1-d tensor, so a 0-d loss comes back with shape [1].
  const Tensor scaled = loss * scale_.to(loss.device());
  return loss.dim() == 0 ? scaled.reshape({1}) : scaled;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& st = state_for(optimizer);
  MT_CHECK(st.stage != Stage::Unscaled,
           "unscale_() has already been called on this optimizer since the last update().");
  MT_CHECK(st.stage != Stage::Stepped, "unscale_() is being called after step().");
  MT_CHECK(scale_.defined(),
           "unscale_: scale() has not been called yet, so there is no scale to "
           "unscale by");
  // The reciprocal is taken in double and then used in float, as PyTorch does.
  const Tensor inv_scale = reciprocal(scale_.to(kFloat64)).to(kFloat32);
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  for (const Tensor& g : optimizer.grads_to_unscale()) {
    MT_CHECK(g.dtype() != kFloat16, "Attempting to unscale FP16 gradients.");
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const auto& e) { return e.first == g.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {g.device(), {}});
    it->second.push_back(g);
  }
  st.stage = Stage::Unscaled;
  // With no gradients nothing is checked, and no inf check is recorded, as in PyTorch: step()
  // and update() then report it.
  if (by_device.empty() && !found_inf_hook_) return;
  const Device device = scale_.device();
  st.found_inf = zeros({}, TensorOptions(device).dtype(kFloat32));
  autograd::NoGradGuard no_grad;
  for (auto& [dev, grads] : by_device) {
    Tensor found = dev == device ? st.found_inf : zeros({}, TensorOptions(dev).dtype(kFloat32));
    amp_unscale_kernel(dev)(grads, found, inv_scale.to(dev));
    for (const Tensor& g : grads) g.bump_version();
    if (!(dev == device)) st.found_inf = maximum(st.found_inf, found.to(device));
  }
  if (found_inf_hook_) found_inf_hook_(st.found_inf);
}

bool StepResult::stepped() const {
  if (!stepped_) {
    stepped_ = found_inf_.item<float>() == 0.0f;
    found_inf_ = Tensor();
  }
  return *stepped_;
}

StepResult GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    ++steps_taken_;
    return StepResult(true);
  }
  PerOptimizer& st = state_for(optimizer);
  MT_CHECK(st.stage != Stage::Stepped, "step() has already been called since the last update().");
  if (st.stage == Stage::Ready) unscale_(optimizer);
  MT_CHECK(st.found_inf.defined(), "No inf checks were recorded for this optimizer.");
  // No item() here: the optimizer's kernels read found_inf on its device.
  optimizer.step_if_finite(st.found_inf);
  {
    // Counted on the device (two tiny kernels, no sync), into tensors that are never replaced,
    // so CUDA-graph replays of a captured step count too.
    autograd::NoGradGuard no_grad;
    const Device device = st.found_inf.device();
    if (!device_steps_.defined()) {
      device_steps_ = zeros({}, TensorOptions(device).dtype(kFloat64));
      device_skips_ = zeros({}, TensorOptions(device).dtype(kFloat64));
    }
    device_steps_.add_(1.0);
    device_skips_.add_(device == device_skips_.device() ? st.found_inf
                                                        : st.found_inf.to(device_skips_.device()));
  }
  st.stage = Stage::Stepped;
  return StepResult(st.found_inf);
}

// found_inf is exactly 0 or 1, so the float64 sums are exact.
int64_t GradScaler::steps_taken() const {
  if (!device_steps_.defined()) return steps_taken_;
  return steps_taken_ + static_cast<int64_t>(device_steps_.item<double>()) -
         static_cast<int64_t>(device_skips_.item<double>());
}

int64_t GradScaler::steps_skipped() const {
  if (!device_skips_.defined()) return steps_skipped_;
  return steps_skipped_ + static_cast<int64_t>(device_skips_.item<double>());
}

void GradScaler::update() {
  if (!options_.enabled) return;
  Tensor found;
  for (auto& [_, st] : per_optimizer_) {
    if (!st.found_inf.defined()) continue;
    found = found.defined() ? maximum(found, st.found_inf) : st.found_inf;
  }
  MT_CHECK(found.defined(), "No inf checks were recorded prior to update.");
  const AmpUpdateParams params{options_.growth_factor, options_.backoff_factor,
                               options_.growth_interval, options_.min_scale, options_.hysteresis};
  amp_update_scale_kernel(scale_.device())(scale_, growth_tracker_, overflow_streak_, found,
                                           params);
  scale_.bump_version();
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  MT_CHECK(scale_.defined(), "update(new_scale): scale() has not been called yet");
  autograd::NoGradGuard no_grad;
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<float>() : options_.init_scale;
}

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int32_t>() : init_growth_tracker_;
}

std::optional<GradScalerState> GradScaler::state_dict() const {
  if (!options_.enabled) return std::nullopt;
  GradScalerState s;
  s.scale = get_scale();
  s.growth_factor = options_.growth_factor;
  s.backoff_factor = options_.backoff_factor;
  s.growth_interval = options_.growth_interval;
  s.growth_tracker = growth_tracker();
  s.min_scale = options_.min_scale;
  s.hysteresis = options_.hysteresis;
  s.overflow_streak =
      overflow_streak_.defined() ? overflow_streak_.item<int32_t>() : init_overflow_streak_;
  s.steps_taken = steps_taken();
  s.steps_skipped = steps_skipped();
  return s;
}

void GradScaler::load_state_dict(const std::optional<GradScalerState>& s) {
  if (!options_.enabled) return;
  MT_CHECK(s.has_value(),
           "GradScaler.load_state_dict: the source state dict is empty, possibly because it was "
           "saved from a disabled instance of GradScaler");
  load_state_dict(*s);
}

void GradScaler::load_state_dict(const GradScalerState& s) {
  if (!options_.enabled) return;  // as PyTorch: a disabled scaler has no state to load
  options_.growth_factor = s.growth_factor;
  options_.backoff_factor = s.backoff_factor;
  options_.growth_interval = s.growth_interval;
  options_.min_scale = s.min_scale;
  options_.hysteresis = s.hysteresis;
  // Before the first scale() the state stays pending, as in PyTorch, so that lazy_init creates
  // it on the loss's device rather than on the CPU.
  options_.init_scale = s.scale;
  init_growth_tracker_ = s.growth_tracker;
  init_overflow_streak_ = s.overflow_streak;
  if (scale_.defined()) {
    const Device device = scale_.device();
    scale_ = full({}, s.scale, TensorOptions(device).dtype(kFloat32));
    growth_tracker_ = full({}, s.growth_tracker, TensorOptions(device).dtype(kInt32));
    overflow_streak_ = full({}, s.overflow_streak, TensorOptions(device).dtype(kInt32));
  }
  steps_taken_ = s.steps_taken;
  steps_skipped_ = s.steps_skipped;
  if (device_steps_.defined()) {
    // In place: a captured CUDA graph keeps adding into these.
    autograd::NoGradGuard no_grad;
    device_steps_.fill_(0.0);
    device_skips_.fill_(0.0);
  }
  per_optimizer_.clear();
}

}  // namespace mantissa::amp
