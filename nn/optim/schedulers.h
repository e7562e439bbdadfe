// More learning-rate schedulers, following torch.optim.lr_scheduler (PyTorch 1.13) step by step.
//
// Chainable (PyTorch's recursive get_lr): MultiStepLR, ExponentialLR, CosineAnnealingLR and
// LinearLR scale each group's current lr, so several of them stepped on one optimizer compose,
// as in PyTorch (and an lr set by hand between steps is scaled from). ReduceLROnPlateau also
// scales the current lr. LambdaLR and OneCycleLR compute the lr from the base lrs and so
// overwrite what others set; so do StepLR and CosineWarmupLR (nn/optim/lr_scheduler.h).
// SequentialLR hands the steps to one scheduler at a time; its schedulers must not be stepped
// by anyone else.
#pragma once

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "nn/optim/lr_scheduler.h"

namespace mantissa::optim {

// lr *= gamma at each milestone (a milestone listed k times multiplies by gamma^k).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  const char* name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> compute_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted, repeats kept
  double gamma_;
};

// lr *= gamma every step.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  const char* name() const override { return "ExponentialLR"; }

 protected:
  std::vector<double> compute_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  double gamma_;
};

// Cosine annealing from the base lr to eta_min over T_max steps, in PyTorch's recursive form
// (which keeps following the cosine past T_max, back up to the base lr at 2 * T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  const char* name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> compute_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// The lr factor goes linearly from start_factor to end_factor over total_iters steps.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);
  const char* name() const override { return "LinearLR"; }

 protected:
  std::vector<double> compute_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// lr = base_lr * lambda(epoch), one function for every group or one per group. The functions
// are not part of state_dict().
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);
  const char* name() const override { return "LambdaLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  std::vector<Lambda> lambdas_;
};

struct OneCycleOptions {
  std::vector<double> max_lr;  // one value for every group, or one per group
  int64_t total_steps = 0;
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
};

// The 1cycle policy: lr from max_lr/div_factor up to max_lr over pct_start of total_steps, then
// down to max_lr/(div_factor*final_div_factor) (three_phase: back to the start first). With
// cycle_momentum the momentum ("momentum", or Adam-style "beta1") moves the opposite way between
// max_momentum and base_momentum. Stepping past total_steps throws, as in PyTorch.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleOptions options);
  const char* name() const override { return "OneCycleLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  enum Lr { kInitial, kMax, kMin };
  struct Phase {
    double end_step;
    Lr start_lr, end_lr;
    bool start_at_max_momentum, end_at_max_momentum;  // else base_momentum
  };
  double anneal(double start, double end, double pct) const;
  OneCycleOptions options_;
  std::vector<double> initial_lr_, max_lr_, min_lr_;
  std::vector<Phase> phases_;
  // Each group's "beta1" or "momentum" (Optimizer::momentum_key); empty without cycle_momentum.
  std::vector<std::string> momentum_keys_;
};

// Runs schedulers one after another: schedulers[i] drives the steps from milestones[i-1] on, and
// restarts at epoch 0 (its closed form) when its milestone is reached. The schedulers must
// drive `optimizer`, must not be stepped elsewhere, and cannot be metric-driven.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  const char* name() const override { return "SequentialLR"; }
  SchedulerState state_dict() const override;
  void load_state_dict(const SchedulerState& state) override;

 protected:
  std::vector<double> compute_lr() const override { return get_last_lr(); }
  void advance() override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct PlateauOptions {
  std::string mode = "min";  // "min": the metric should fall; "max": rise
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  // "rel" or "abs"
  int64_t cooldown = 0;
  std::vector<double> min_lr = {0.0};  // one value for every group, or one per group
  double eps = 1e-8;
};

// Multiplies the lr by `factor` once the metric given to step(metric) has not improved (by
// `threshold`, relative or absolute) for more than `patience` steps, then waits `cooldown` steps;
// lrs never go below min_lr, and a change smaller than eps is not made.
class ReduceLROnPlateau : public LRScheduler {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});
  const char* name() const override { return "ReduceLROnPlateau"; }
  bool takes_metric() const override { return true; }
  SchedulerState state_dict() const override;
  void load_state_dict(const SchedulerState& state) override;

  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }

 protected:
  std::vector<double> compute_lr() const override;
  void advance(double metric) override;

 private:
  bool is_better(double a) const;
  PlateauOptions options_;
  std::vector<double> min_lrs_;
  double mode_worse_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace mantissa::optim
