#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/error.h"
#include "nn/optim/schedulers.h"

namespace mantissa::optim {
namespace {

std::vector<double> current_lrs(const Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer.param_groups()) lrs.push_back(g.get("lr"));
  return lrs;
}

// One value for every group, or one per group.
std::vector<double> per_group(const char* who, const char* what, const std::vector<double>& v,
                              size_t groups) {
  MT_CHECK(v.size() == 1 || v.size() == groups, who, ": expected 1 or ", groups, " values for ",
           what, " (one per parameter group), got ", v.size());
  return v.size() == 1 ? std::vector<double>(groups, v[0]) : v;
}

}  // namespace

// ---- MultiStepLR ----------------------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::compute_lr() const {
  std::vector<double> lrs = current_lrs(optimizer());
  const auto hits = std::count(milestones_.begin(), milestones_.end(), last_epoch());
  if (hits == 0) return lrs;
  for (double& lr : lrs) lr = lr * std::pow(gamma_, static_cast<double>(hits));
  return lrs;
}

std::vector<double> MultiStepLR::closed_form_lr() const {
  // bisect_right: the milestones at or before last_epoch
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs())
    lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

// ---- ExponentialLR --------------------------------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::compute_lr() const {
  std::vector<double> lrs = current_lrs(optimizer());
  if (last_epoch() == 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

std::vector<double> ExponentialLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs())
    lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch())));
  return lrs;
}

// ---- CosineAnnealingLR ----------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  MT_CHECK(T_max >= 1, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::compute_lr() const {
  std::vector<double> lrs = current_lrs(optimizer());
  const int64_t e = last_epoch();
  if (e == 0) return lrs;
  const double pi = std::numbers::pi, t_max = static_cast<double>(t_max_);
  const std::vector<double>& base = base_lrs();
  // Python's floor modulo is zero exactly when C++'s is.
  if ((e - 1 - t_max_) % (2 * t_max_) == 0) {
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = lrs[i] + (base[i] - eta_min_) * (1 - std::cos(pi / t_max)) / 2;
    return lrs;
  }
  const double ratio = (1 + std::cos(pi * static_cast<double>(e) / t_max)) /
                       (1 + std::cos(pi * static_cast<double>(e - 1) / t_max));
  for (double& lr : lrs) lr = ratio * (lr - eta_min_) + eta_min_;
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() const {
  const double c =
      std::cos(std::numbers::pi * static_cast<double>(last_epoch()) / static_cast<double>(t_max_));
  std::vector<double> lrs;
  for (double base : base_lrs()) lrs.push_back(eta_min_ + (base - eta_min_) * (1 + c) / 2);
  return lrs;
}

// ---- LinearLR -------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  MT_CHECK(start_factor > 0.0 && start_factor <= 1.0,
           "LinearLR: Starting multiplicative factor expected to be greater than 0 and at most 1, "
           "got ",
           start_factor);
  MT_CHECK(end_factor >= 0.0 && end_factor <= 1.0,
           "LinearLR: Ending multiplicative factor expected to be between 0 and 1, got ",
           end_factor);
  MT_CHECK(total_iters >= 0, "LinearLR: total_iters must be non-negative, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::compute_lr() const {
  std::vector<double> lrs = current_lrs(optimizer());
  const int64_t e = last_epoch();
  if (e == 0) {
    for (double& lr : lrs) lr = lr * start_factor_;
    return lrs;
  }
  if (e > total_iters_) return lrs;
  const double delta = end_factor_ - start_factor_;
  const double factor = 1.0 + delta / (static_cast<double>(total_iters_) * start_factor_ +
                                       static_cast<double>(e - 1) * delta);
  for (double& lr : lrs) lr = lr * factor;
  return lrs;
}

std::vector<double> LinearLR::closed_form_lr() const {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch()));
  const double factor = start_factor_ + (end_factor_ - start_factor_) * done /
                                            static_cast<double>(std::max<int64_t>(total_iters_, 1));
  std::vector<double> lrs;
  for (double base : base_lrs()) lrs.push_back(base * factor);
  return lrs;
}

// ---- LambdaLR -------------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer,
               std::vector<Lambda>(optimizer.param_groups().size(), std::move(lr_lambda))) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lr_lambdas)) {
  MT_CHECK(lambdas_.size() == base_lrs().size(), "LambdaLR: Expected ", base_lrs().size(),
           " lr_lambdas, but got ", lambdas_.size());
  for (size_t i = 0; i < lambdas_.size(); ++i)
    MT_CHECK(static_cast<bool>(lambdas_[i]), "LambdaLR: lr_lambda ", i, " is empty");
  initial_step();
}

std::vector<double> LambdaLR::compute_lr() const {
  std::vector<double> lrs;
  for (size_t i = 0; i < lambdas_.size(); ++i)
    lrs.push_back(base_lrs()[i] * lambdas_[i](last_epoch()));
  return lrs;
}

// ---- OneCycleLR -----------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleOptions o)
    : LRScheduler(optimizer), options_(std::move(o)) {
  const OneCycleOptions& op = options_;
  MT_CHECK(op.total_steps > 0, "OneCycleLR: Expected positive integer total_steps, but got ",
           op.total_steps);
  MT_CHECK(op.pct_start >= 0.0 && op.pct_start <= 1.0,
           "OneCycleLR: Expected float between 0 and 1 pct_start, but got ", op.pct_start);
  MT_CHECK(op.anneal_strategy == "cos" || op.anneal_strategy == "linear",
           "OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got '",
           op.anneal_strategy, "'");
  MT_CHECK(op.div_factor > 0.0 && op.final_div_factor > 0.0,
           "OneCycleLR: div_factor and final_div_factor must be positive, got ", op.div_factor,
           " and ", op.final_div_factor);
  auto& groups = optimizer.param_groups();
  max_lr_ = per_group("OneCycleLR", "max_lr", op.max_lr, groups.size());
  for (double m : max_lr_) {
    initial_lr_.push_back(m / op.div_factor);
    min_lr_.push_back(initial_lr_.back() / op.final_div_factor);
  }
  const double total = static_cast<double>(op.total_steps);
  if (op.three_phase) {
    phases_ = {{op.pct_start * total - 1, kInitial, kMax, true, false},
               {2 * op.pct_start * total - 2, kMax, kInitial, false, true},
               {total - 1, kInitial, kMin, true, true}};
  } else {
    phases_ = {{op.pct_start * total - 1, kInitial, kMax, true, false},
               {total - 1, kMax, kMin, false, true}};
  }
  if (op.cycle_momentum) {
    for (ParamGroup& g : groups) {
      momentum_keys_.push_back(optimizer.momentum_key(g));
      MT_CHECK(!momentum_keys_.back().empty(), "OneCycleLR: optimizer ", optimizer.name(),
               " must support momentum (\"momentum\" or \"beta1\") with cycle_momentum enabled");
      g[momentum_keys_.back()] = op.max_momentum;
    }
  }
  reset_base_lrs(initial_lr_);
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "cos") {
    const double cos_out = std::cos(std::numbers::pi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::compute_lr() const {
  const int64_t step_num = last_epoch();
  MT_CHECK(step_num <= options_.total_steps, "OneCycleLR: Tried to step ", step_num + 1,
           " times. The specified number of total steps is ", options_.total_steps);
  auto& groups = optimizer().param_groups();
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr_of[3] = {initial_lr_[g], max_lr_[g], min_lr_[g]};
    double start_step = 0, lr = 0, momentum = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& ph = phases_[i];
      if (static_cast<double>(step_num) <= ph.end_step || i + 1 == phases_.size()) {
        const double pct =
            (static_cast<double>(step_num) - start_step) / (ph.end_step - start_step);
        lr = anneal(lr_of[ph.start_lr], lr_of[ph.end_lr], pct);
        const auto mom = [&](bool at_max) {
          return at_max ? options_.max_momentum : options_.base_momentum;
        };
        momentum = anneal(mom(ph.start_at_max_momentum), mom(ph.end_at_max_momentum), pct);
        break;
      }
      start_step = ph.end_step;
    }
    lrs.push_back(lr);
    if (g < momentum_keys_.size()) groups[g][momentum_keys_[g]] = momentum;
  }
  return lrs;
}

}  // namespace mantissa::optim
