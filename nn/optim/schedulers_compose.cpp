// SequentialLR and ReduceLROnPlateau (nn/optim/schedulers.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/error.h"
#include "nn/optim/schedulers.h"

namespace mantissa::optim {

// ---- SequentialLR ---------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  MT_CHECK(!schedulers_.empty(), "SequentialLR: expects at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    MT_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
    MT_CHECK(&schedulers_[i]->optimizer() == &optimizer,
             "SequentialLR: expects all schedulers to belong to the same optimizer, but got ",
             "schedulers at index ", i, " to be different than the optimizer passed in");
    MT_CHECK(!schedulers_[i]->takes_metric(), "SequentialLR: scheduler ", i, " (",
             schedulers_[i]->name(), ") is metric-driven and cannot be sequenced");
  }
  MT_CHECK(milestones_.size() + 1 == schedulers_.size(),
           "SequentialLR: expects number of schedulers provided to be one more than the number "
           "of milestone points, but got number of schedulers ",
           schedulers_.size(), " and the number of milestones to be equal to ", milestones_.size());
  MT_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
           "SequentialLR: milestones must be increasing");
  // As PyTorch: back to the initial lrs, undo each scheduler's construction step, and start
  // only the first.
  for (ParamGroup& g : optimizer.param_groups()) g["lr"] = g.get("initial_lr");
  for (auto& s : schedulers_) s->set_last_epoch(s->last_epoch() - 1);
  schedulers_[0]->advance();
  set_last_epoch(0);
  apply(schedulers_[0]->get_last_lr());
}

void SequentialLR::advance() {
  set_last_epoch(last_epoch() + 1);
  const auto idx =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) - milestones_.begin();
  LRScheduler& s = *schedulers_[static_cast<size_t>(idx)];
  if (idx > 0 && milestones_[static_cast<size_t>(idx - 1)] == last_epoch()) {
    s.restart_at(0);
  } else {
    s.advance();
  }
  apply(s.get_last_lr());
}

SchedulerState SequentialLR::state_dict() const {
  SchedulerState out = LRScheduler::state_dict();
  for (const auto& s : schedulers_) out.children.push_back(s->state_dict());
  return out;
}

void SequentialLR::load_state_dict(const SchedulerState& state) {
  MT_CHECK(state.children.size() == schedulers_.size(), "SequentialLR: loaded state has ",
           state.children.size(), " schedulers, but this one sequences ", schedulers_.size());
  load_base(state, 0);
  // A scheduler that has not started yet was saved at last_epoch -1.
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    const SchedulerState& child = state.children[i];
    if (child.last_epoch < 0) {
      schedulers_[i]->load_base(child, -1);
    } else {
      schedulers_[i]->load_state_dict(child);
    }
  }
}

// ---- ReduceLROnPlateau ----------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  const PlateauOptions& o = options_;
  MT_CHECK(o.factor < 1.0, "ReduceLROnPlateau: Factor should be < 1.0, got ", o.factor);
  MT_CHECK(o.factor >= 0.0, "ReduceLROnPlateau: factor must be non-negative, got ", o.factor);
  MT_CHECK(o.mode == "min" || o.mode == "max", "ReduceLROnPlateau: mode ", o.mode,
           " is unknown! (expected 'min' or 'max')");
  MT_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs",
           "ReduceLROnPlateau: threshold mode ", o.threshold_mode,
           " is unknown! (expected 'rel' or 'abs')");
  MT_CHECK(o.patience >= 0 && o.cooldown >= 0,
           "ReduceLROnPlateau: patience and cooldown must be non-negative, got ", o.patience,
           " and ", o.cooldown);
  const size_t groups = optimizer.param_groups().size();
  MT_CHECK(o.min_lr.size() == 1 || o.min_lr.size() == groups, "ReduceLROnPlateau: expected ",
           groups, " min_lrs, got ", o.min_lr.size());
  min_lrs_ = o.min_lr.size() == 1 ? std::vector<double>(groups, o.min_lr[0]) : o.min_lr;
  mode_worse_ = o.mode == "min" ? std::numeric_limits<double>::infinity()
                                : -std::numeric_limits<double>::infinity();
  best_ = mode_worse_;
  // PyTorch's starts at last_epoch 0 without changing the lrs.
  set_last_epoch(0);
  apply(compute_lr());
}

std::vector<double> ReduceLROnPlateau::compute_lr() const {
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer().param_groups()) lrs.push_back(g.get("lr"));
  return lrs;
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold;
  const bool rel = options_.threshold_mode == "rel";
  if (options_.mode == "min") return rel ? a < best_ * (1.0 - t) : a < best_ - t;
  return rel ? a > best_ * (t + 1.0) : a > best_ + t;
}

void ReduceLROnPlateau::advance(double metric) {
  set_last_epoch(last_epoch() + 1);
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // ignore bad epochs in cooldown
  }
  if (num_bad_epochs_ > options_.patience) {
    auto& groups = optimizer().param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].get("lr");
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[i]);
      if (old_lr - new_lr > options_.eps) groups[i]["lr"] = new_lr;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  apply(compute_lr());
}

SchedulerState ReduceLROnPlateau::state_dict() const {
  SchedulerState out = LRScheduler::state_dict();
  // No best yet is saved as NaN: checkpoints store numbers, and infinity is not one.
  out.extra = {{"best", std::isinf(best_) ? std::numeric_limits<double>::quiet_NaN() : best_},
               {"num_bad_epochs", static_cast<double>(num_bad_epochs_)},
               {"cooldown_counter", static_cast<double>(cooldown_counter_)}};
  return out;
}

void ReduceLROnPlateau::load_state_dict(const SchedulerState& state) {
  for (const char* key : {"best", "num_bad_epochs", "cooldown_counter"}) {
    MT_CHECK(state.extra.count(key) != 0, "ReduceLROnPlateau: loaded state has no '", key, "'");
  }
  const double bad = state.extra.at("num_bad_epochs"), cool = state.extra.at("cooldown_counter");
  MT_CHECK(bad >= 0 && cool >= 0, "ReduceLROnPlateau: loaded state has num_bad_epochs ", bad,
           " and cooldown_counter ", cool, "; expected non-negative counts");
  load_base(state, 0);
  const double best = state.extra.at("best");
  best_ = std::isnan(best) ? mode_worse_ : best;
  num_bad_epochs_ = static_cast<int64_t>(bad);
  cooldown_counter_ = static_cast<int64_t>(cool);
}

}  // namespace mantissa::optim
