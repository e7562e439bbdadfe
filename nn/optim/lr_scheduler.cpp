#include "nn/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

#include "engine/error.h"

namespace mantissa::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (ParamGroup& g : optimizer_.param_groups()) {
    if (!g.has("initial_lr")) g.set("initial_lr", g.get("lr"));  // PyTorch's setdefault
    base_lrs_.push_back(g.get("initial_lr"));
  }
}

bool LRScheduler::skip_this_step() {
  // A step the GradScaler skipped (inf/nan gradients) did not update the weights, so the
  // schedule does not advance either. The flag is consumed so a later step() is not skipped.
  // After a GradScaler step the flag is a device tensor: reading it is the one host sync of a
  // CUDA AMP step, unavoidable here because the learning rate is a host value.
  if (last_epoch_ >= 0 && optimizer_.last_step_skipped()) {
    optimizer_.set_last_step_skipped(false);
    return true;
  }
  return false;
}

void LRScheduler::step() {
  MT_CHECK(!takes_metric(), name(), ": step() needs the metric to watch; call step(metric)");
  if (!skip_this_step()) advance();
}

void LRScheduler::step(double metric) {
  MT_CHECK(takes_metric(), name(), ": step(metric) is for metric-driven schedulers such as ",
           "ReduceLROnPlateau; call step()");
  if (!skip_this_step()) advance(metric);
}

void LRScheduler::apply(std::vector<double> lrs) {
  auto& groups = optimizer_.param_groups();
  MT_CHECK(groups.size() == base_lrs_.size(), name(), ": the optimizer has ", groups.size(),
           " parameter groups, but the scheduler was created for ", base_lrs_.size());
  MT_ASSERT(lrs.size() == groups.size(), "compute_lr returned ", lrs.size(), " lrs for ",
            groups.size(), " groups");
  for (size_t i = 0; i < groups.size(); ++i) groups[i]["lr"] = lrs[i];
  last_lr_ = std::move(lrs);
}

void LRScheduler::advance() {
  MT_CHECK(optimizer_.param_groups().size() == base_lrs_.size(), name(), ": the optimizer has ",
           optimizer_.param_groups().size(), " parameter groups, but the scheduler was created ",
           "for ", base_lrs_.size());
  ++last_epoch_;
  apply(compute_lr());
}

void LRScheduler::restart_at(int64_t epoch) {
  last_epoch_ = epoch;
  apply(closed_form_lr());
}

void LRScheduler::reset_base_lrs(std::vector<double> lrs) {
  auto& groups = optimizer_.param_groups();
  MT_ASSERT(lrs.size() == groups.size(), "reset_base_lrs: ", lrs.size(), " lrs for ", groups.size(),
            " groups");
  for (size_t i = 0; i < groups.size(); ++i) groups[i]["initial_lr"] = lrs[i];
  base_lrs_ = std::move(lrs);
}

void LRScheduler::load_state_dict(const SchedulerState& state) { load_base(state, 0); }

void LRScheduler::load_base(const SchedulerState& state, int64_t min_epoch) {
  const size_t n = optimizer_.param_groups().size();
  MT_CHECK(state.base_lrs.size() == n && (state.last_lr.size() == n || min_epoch < 0), name(),
           ": loaded state has ", state.base_lrs.size(), " base lrs and ", state.last_lr.size(),
           " last lrs, but the optimizer has ", n, " parameter groups");
  MT_CHECK(state.last_epoch >= min_epoch, name(), ": loaded state has last_epoch ",
           state.last_epoch, "; expected >= ", min_epoch);
  last_epoch_ = state.last_epoch;
  base_lrs_ = state.base_lrs;
  last_lr_ = state.last_lr;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MT_CHECK(step_size >= 1, "StepLR: step_size must be positive, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::compute_lr() const {
  // Floor division; last_epoch is never negative here.
  const double exponent = static_cast<double>(last_epoch() / step_size_);
  std::vector<double> lrs;
  for (double base : base_lrs()) lrs.push_back(base * std::pow(gamma_, exponent));
  return lrs;
}

CosineWarmupLR::CosineWarmupLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                               double min_lr)
    : LRScheduler(optimizer),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      min_lr_(min_lr) {
  MT_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps,
           "CosineWarmupLR: expected 0 <= warmup_steps <= total_steps, got warmup_steps ",
           warmup_steps, " and total_steps ", total_steps);
  MT_CHECK(min_lr >= 0.0, "CosineWarmupLR: Invalid min_lr: ", min_lr);
  initial_step();
}

std::vector<double> CosineWarmupLR::compute_lr() const {
  const int64_t t = last_epoch();
  std::vector<double> lrs;
  for (double base : base_lrs()) {
    if (t < warmup_steps_) {
      lrs.push_back(base * static_cast<double>(t + 1) / static_cast<double>(warmup_steps_));
    } else if (t < total_steps_) {
      const double progress = static_cast<double>(t - warmup_steps_) /
                              static_cast<double>(total_steps_ - warmup_steps_);
      lrs.push_back(min_lr_ +
                    (base - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
    } else {
      lrs.push_back(min_lr_);
    }
  }
  return lrs;
}

}  // namespace mantissa::optim
