// Learning-rate schedulers, following torch.optim.lr_scheduler.LRScheduler.
//
// Constructing a scheduler records each group's starting lr in the group option "initial_lr"
// (kept if already there, so a second scheduler sees the same base) and sets the lr for epoch 0.
// Each step() advances last_epoch by one and writes compute_lr() into the groups. StepLR and
// CosineWarmupLR use closed forms of last_epoch and the base lrs, so lr changes made to the
// optimizer between steps are overwritten; the chainable schedulers of nn/optim/schedulers.h
// scale the group's current lr, as PyTorch's do. A scheduler keeps a reference to its optimizer,
// which must outlive it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nn/optim/optimizer.h"

namespace mantissa::optim {

struct SchedulerState {
  int64_t last_epoch = 0;
  std::vector<double> base_lrs;
  std::vector<double> last_lr;
  // Scheduler-specific counters (ReduceLROnPlateau's best, num_bad_epochs, cooldown_counter)
  // and the states of composed schedulers (SequentialLR's, in order).
  std::map<std::string, double> extra = {};
  std::vector<SchedulerState> children = {};
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances the schedule by one step. A step the optimizer skipped (a GradScaler found inf/nan
  // gradients) does not advance it. Metric-driven schedulers (takes_metric()) take step(metric)
  // instead; the others refuse it.
  void step();
  void step(double metric);
  virtual bool takes_metric() const { return false; }
  // "StepLR", ... (used in error messages).
  virtual const char* name() const = 0;
  // The lrs set by the last step (or by construction), one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  // Restores last_epoch, base lrs and last lrs; the optimizer's lrs come back with the
  // optimizer's own state dict, as in PyTorch.
  virtual SchedulerState state_dict() const { return {last_epoch_, base_lrs_, last_lr_}; }
  virtual void load_state_dict(const SchedulerState& state);

 protected:
  // Records the base lrs. Subclass constructors must call initial_step() last (it calls the
  // virtual compute_lr, which the base constructor cannot).
  explicit LRScheduler(Optimizer& optimizer);
  void initial_step() { step(); }
  // The lr of each group at last_epoch().
  virtual std::vector<double> compute_lr() const = 0;
  // The lr at last_epoch() from the base lrs alone (PyTorch's _get_closed_form_lr), used when a
  // SequentialLR restarts this scheduler at epoch 0; compute_lr() for those without one.
  virtual std::vector<double> closed_form_lr() const { return compute_lr(); }
  // One step without the skipped-step check: ++last_epoch, then compute_lr() into the groups.
  virtual void advance();
  // A metric-driven scheduler's step (after the skipped-step check).
  virtual void advance(double /*metric*/) {}
  // Restarts at `epoch` with closed_form_lr() (PyTorch's step(epoch)).
  void restart_at(int64_t epoch);
  // Writes lrs into the groups and records them as the last lrs.
  void apply(std::vector<double> lrs);
  void set_last_epoch(int64_t epoch) { last_epoch_ = epoch; }
  // Replaces the base lrs and the groups' "initial_lr" (OneCycleLR starts at max_lr/div_factor).
  void reset_base_lrs(std::vector<double> lrs);
  // load_state_dict's checks and restore; `min_epoch` is -1 for SequentialLR's children that
  // have not started.
  void load_base(const SchedulerState& state, int64_t min_epoch);

 private:
  friend class SequentialLR;
  // Consumes the optimizer's skipped-step flag: true when this step must not advance.
  bool skip_this_step();

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base_lr * gamma^floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  const char* name() const override { return "StepLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Linear warmup then cosine decay. With W = warmup_steps, T = total_steps and t = last_epoch:
//   t < W:       lr = base_lr * (t + 1) / W          (reaches base_lr at t = W - 1)
//   W <= t < T:  lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * (t - W) / (T - W))) / 2
//   t >= T:      lr = min_lr
// So the first step already trains (lr = base_lr / W), the peak lasts steps W-1 and W, and every
// step before T has lr > min_lr. W = 0 means no warmup; requires 0 <= W <= T.
class CosineWarmupLR : public LRScheduler {
 public:
  CosineWarmupLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                 double min_lr = 0.0);
  const char* name() const override { return "CosineWarmupLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

}  // namespace mantissa::optim
