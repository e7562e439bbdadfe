// GradScaler: dynamic loss scaling with torch.amp.GradScaler's semantics and defaults, plus a
// scale floor (min_scale), overflow hysteresis, and counters of steps taken and skipped.
//
//   scaler.scale(loss).backward();
//   scaler.step(optimizer);   // unscales (if not done), skips the step on inf/NaN gradients
//   scaler.update();          // backs off on overflow, grows after growth_interval clean steps
//
// The scale, growth tracker and found_inf flags are tensors on the gradients' device, and a
// step needs no host synchronisation: unscale_ is one multi-tensor kernel, the optimizer's
// kernels read found_inf and skip on the device, and update() is a device kernel. Whether a step
// was skipped is read only when asked (StepResult, last_step_skipped, the step counters).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>

#include "engine/tensor.h"
#include "nn/optim/optimizer.h"

namespace mantissa::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  // Beyond PyTorch: never back off below min_scale (0: no floor), and back off only on the
  // hysteresis-th consecutive overflowing step (and every consecutive one after it).
  double min_scale = 0.0;
  int64_t hysteresis = 1;
};

// What GradScaler::step returns: whether the optimizer stepped. The flag stays on the device
// until the result is converted to bool (the one optional sync of a step; cached after it), so
// discarding the result costs nothing. Implicit, so `bool stepped = scaler.step(opt)` reads it.
class StepResult {
 public:
  explicit StepResult(bool stepped) : stepped_(stepped) {}
  // found_inf: float32, 1 element; the step happened iff it is 0.
  explicit StepResult(Tensor found_inf) : found_inf_(std::move(found_inf)) {}
  bool stepped() const;
  operator bool() const { return stepped(); }  // NOLINT(google-explicit-constructor)
  friend bool operator==(const StepResult& a, const StepResult& b) {
    return a.stepped() == b.stepped();
  }
  friend std::ostream& operator<<(std::ostream& os, const StepResult& r) {
    return os << (r.stepped() ? "stepped" : "skipped");
  }

 private:
  mutable Tensor found_inf_;
  mutable std::optional<bool> stepped_;
};

struct GradScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;
  double min_scale = 0.0;
  int64_t hysteresis = 1;
  int64_t overflow_streak = 0;
  int64_t steps_taken = 0;
  int64_t steps_skipped = 0;
};

class GradScaler {
 public:
  explicit GradScaler(bool enabled = true);
  explicit GradScaler(const GradScalerOptions& options);

  // loss * scale (the scale is created lazily, on the loss's device, at the first call).
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's gradients by the scale in place and records inf/NaN; at most once
  // per optimizer between update()s, and not after step().
  void unscale_(optim::Optimizer& optimizer);
  // Runs optimizer.step_if_finite(found_inf): the optimizer's kernels skip the step on the
  // device if the gradients had inf/NaN. Returns whether it stepped, read lazily.
  StepResult step(optim::Optimizer& optimizer);
  // Called by every unscale_ with the inf check it recorded (float32, 1 element), before the
  // step reads it; with a hook, unscale_ records a check even when this process has no
  // gradients. Sharded optimizers (distributed::ZeroRedundancyOptimizer::found_inf_hook) make it
  // the maximum over the ranks there, so that one rank's overflow skips the step on all.
  void set_found_inf_hook(std::function<void(const Tensor&)> hook) {
    found_inf_hook_ = std::move(hook);
  }
  // Adjusts the scale from the inf checks recorded since the last update.
  void update();
  // Sets the scale directly (no inf checks needed).
  void update(double new_scale);

  bool is_enabled() const { return options_.enabled; }
  // The current scale (1.0 when disabled; init_scale before the first scale()).
  double get_scale() const;
  int64_t growth_tracker() const;
  // Counters of step() calls, kept on the device and read (a sync on CUDA) when asked.
  int64_t steps_taken() const;
  int64_t steps_skipped() const;
  const GradScalerOptions& options() const { return options_; }

  // As in PyTorch, a disabled scaler has no state: state_dict() is empty (nullopt), and loading
  // into it does nothing; loading an empty state into an enabled scaler is an error.
  std::optional<GradScalerState> state_dict() const;
  void load_state_dict(const GradScalerState& state);
  void load_state_dict(const std::optional<GradScalerState>& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    Tensor found_inf;  // float32, 1 element, on the gradients' device
  };
  void lazy_init(Device device);
  PerOptimizer& state_for(const optim::Optimizer& optimizer) { return per_optimizer_[&optimizer]; }

  GradScalerOptions options_;
  Tensor scale_;            // float32 0-d
  Tensor growth_tracker_;   // int32 0-d
  Tensor overflow_streak_;  // int32 0-d
  // What lazy_init starts the tracker and streak from (set by a load before the first scale()).
  int64_t init_growth_tracker_ = 0;
  int64_t init_overflow_streak_ = 0;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  std::function<void(const Tensor&)> found_inf_hook_;
  int64_t steps_taken_ = 0;  // plus the device counts
  int64_t steps_skipped_ = 0;
  // Steps counted on the device since the state was loaded: how many, and the sum of their
  // found_inf (float64, 0-d; created by the first enabled step()).
  Tensor device_steps_;
  Tensor device_skips_;
};

}  // namespace mantissa::amp
