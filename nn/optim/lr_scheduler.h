// Learning-rate schedulers, following torch.optim.lr_scheduler.LRScheduler.
//
// Constructing a scheduler records each group's starting lr in the group option "initial_lr"
// (kept if already there, so a second scheduler sees the same base) and sets the lr for epoch 0.
// Each step() advances last_epoch by one and writes compute_lr() into the groups. Schedulers
// here use closed forms of last_epoch and the base lrs, so lr changes made to the optimizer
// between steps are overwritten. A scheduler keeps a reference to its optimizer, which must
// outlive it.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/optim/optimizer.h"

namespace mantissa::optim {

struct SchedulerState {
  int64_t last_epoch = 0;
  std::vector<double> base_lrs;
  std::vector<double> last_lr;
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  // The lrs set by the last step (or by construction), one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  // Restores last_epoch, base lrs and last lrs; the optimizer's lrs come back with the
  // optimizer's own state dict, as in PyTorch.
  SchedulerState state_dict() const { return {last_epoch_, base_lrs_, last_lr_}; }
  void load_state_dict(const SchedulerState& state);

 protected:
  // Records the base lrs. Subclass constructors must call initial_step() last (it calls the
  // virtual compute_lr, which the base constructor cannot).
  explicit LRScheduler(Optimizer& optimizer);
  void initial_step() { step(); }
  // The lr of each group at last_epoch().
  virtual std::vector<double> compute_lr() const = 0;

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base_lr * gamma^floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

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

 protected:
  std::vector<double> compute_lr() const override;

 private:
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

}  // namespace mantissa::optim
