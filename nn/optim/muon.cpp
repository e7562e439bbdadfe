#include "nn/optim/muon.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/functions.h"
#include "engine/error.h"
#include "engine/kernel_tables.h"
#include "engine/optimizer_kernel_tables.h"
#include "nn/module.h"
#include "nn/optim/options.h"

namespace mantissa::optim {

Muon::Muon(std::vector<Tensor> params, MuonOptions options)
    : Muon(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Muon::Muon(std::vector<ParamGroup> groups, MuonOptions options) : Optimizer(option_map(options)) {
  init_groups(std::move(groups));
}

void Muon::validate(const ParamGroup& g) const {
  // Negated comparisons so that NaN is rejected too; PyTorch's messages.
  const auto o = g.options_as<MuonOptions>();
  MT_CHECK(o.lr >= 0.0, "Muon: Learning rate should be >= 0 but is: ", o.lr);
  MT_CHECK(o.weight_decay >= 0.0, "Muon: weight decay should be >= 0 but is: ", o.weight_decay);
  if (!o.use_muon) {
    const auto [beta1, beta2] = o.betas;
    MT_CHECK(o.eps >= 0.0, "Muon (AdamW group): Invalid epsilon value: ", o.eps);
    MT_CHECK(beta1 >= 0.0 && beta1 < 1.0,
             "Muon (AdamW group): Invalid beta parameter at index 0: ", beta1);
    MT_CHECK(beta2 >= 0.0 && beta2 < 1.0,
             "Muon (AdamW group): Invalid beta parameter at index 1: ", beta2);
    return;
  }
  MT_CHECK(o.momentum >= 0.0, "Muon: momentum should be >= 0 but is: ", o.momentum);
  MT_CHECK(o.eps >= 0.0, "Muon: eps should be >= 0 but is: ", o.eps);
  // The group's value, before options_as<> truncates it to an integer.
  const double ns_steps = g.get("ns_steps");
  MT_CHECK(ns_steps >= 0.0 && ns_steps < 100.0 && ns_steps == std::floor(ns_steps),
           "Muon: ns_steps must be a whole number below 100 (for computational efficiency), got ",
           ns_steps);
  const double fn = g.get("adjust_lr_fn");  // the group's value, before options_as<> reads it
  MT_CHECK(fn == 0.0 || fn == 1.0 || fn == 2.0, "Muon: Adjust learning rate function ", fn,
           " is not supported (original: 0, match_rms_adamw: 1, spectral_unclamped: 2)");
  for (const Tensor& p : g.params) {
    MT_CHECK(p.dim() == 2,
             "Muon only supports 2D parameters whereas we found a parameter with size: ", p.shape(),
             " (put it in an AdamW group: use_muon 0)");
  }
}

Tensor muon_orthogonalize(const Tensor& update, const std::array<double, 3>& coefficients,
                          int64_t steps, double eps, bool in_float32) {
  MT_CHECK(update.dim() == 2 || update.dim() == 3,
           "Muon: the Newton-Schulz iteration needs a 2D matrix or a batch of them (3D), got "
           "shape ",
           update.shape());
  MT_CHECK(steps >= 0 && steps < 100,
           "Muon: Number of steps must be less than 100 for computational efficiency, got ", steps);
  const auto [a, b, c] = coefficients;
  // One matrix is a batch of one: the same products as a batch of many.
  Tensor x =
      (update.dim() == 2 ? update.unsqueeze(0) : update).to(in_float32 ? kFloat32 : kBFloat16);
  const bool tall = update.size(-2) > update.size(-1);
  if (tall) x = x.transpose(1, 2);
  // Spectral norm at most 1: each matrix divided by its own Frobenius norm (taken alone, so
  // that its sum does not depend on the batch), in the iteration's dtype. Out of place, so that
  // a bfloat16 update (the momentum buffer itself) is left alone.
  std::vector<Tensor> norms;
  for (int64_t i = 0; i < x.size(0); ++i)
    norms.push_back(clamp(norm(x.select(0, i)), Scalar(eps), std::nullopt).reshape({1, 1}));
  x = x / stack(norms);
  for (int64_t s = 0; s < steps; ++s) {
    const Tensor gram = bmm(x, x.transpose(1, 2));
    const Tensor u = baddbmm(gram, gram, gram, Scalar(b), Scalar(c));
    x = baddbmm(x, u, x, Scalar(a));
  }
  if (tall) x = x.transpose(1, 2);
  return update.dim() == 2 ? x.select(0, 0) : x;
}

namespace {

// An AdamW group's step on the Adam kernels: AdamW with its lr, betas, eps and weight decay.
AdamStepParams adamw_step_params(const MuonOptions& o, int64_t step) {
  AdamStepParams p;
  p.lr = o.lr;
  p.betas = o.betas;
  p.eps = o.eps;
  p.weight_decay = o.weight_decay;
  p.decoupled_weight_decay = true;
  p.step = step;
  return p;
}

}  // namespace

void Muon::update(const ParamGroup& g, const Tensor& param, const Tensor& grad, ParamState& state) {
  const auto o = g.options_as<MuonOptions>();
  if (!o.use_muon) {
    AdamStepParams hp = adamw_step_params(o, state.step + 1);
    hp.param_index = updating_index();
    const Tensor exp_avg = lazy_buffer(state, "exp_avg", param);
    const Tensor exp_avg_sq = lazy_buffer(state, "exp_avg_sq", param);
    adam_step_kernel(param.device())(param, grad, exp_avg, exp_avg_sq, Tensor(), hp);
    exp_avg.bump_version();
    exp_avg_sq.bump_version();
    state.step = hp.step;
    return;
  }
  const Tensor u = momentum_update(o, param, grad, state);
  apply_update(o, param, muon_orthogonalize(u, o.ns_coefficients, o.ns_steps, o.eps, o.ns_float32));
  ++state.step;
}

Tensor Muon::momentum_update(const MuonOptions& o, const Tensor& param, const Tensor& grad,
                             ParamState& state) {
  MT_CHECK(
      param.dim() == 2,
      "Muon only supports 2D parameters whereas we found a parameter with size: ", param.shape());
  // buf.lerp_(grad, 1 - momentum); the update is grad.lerp(buf, momentum) with Nesterov.
  const Tensor buf = lazy_buffer(state, "momentum_buffer", param);
  lerp_kernel(buf.device())(buf, buf, grad, Tensor(), 1.0 - o.momentum);
  buf.bump_version();
  return o.nesterov ? lerp(grad, buf, Scalar(o.momentum)) : buf;
}

void Muon::apply_update(const MuonOptions& o, const Tensor& param, const Tensor& ortho) {
  const double rows = static_cast<double>(param.size(0)), cols = static_cast<double>(param.size(1));
  const double ratio =
      o.adjust_lr_fn == MuonAdjustLr::MatchRmsAdamW       ? 0.2 * std::sqrt(std::max(rows, cols))
      : o.adjust_lr_fn == MuonAdjustLr::SpectralUnclamped ? std::sqrt(rows / cols)
                                                          : std::sqrt(std::max(1.0, rows / cols));
  // param.mul_(1 - lr * weight_decay); param.add_(update, alpha=-adjusted_lr)
  Tensor p = param;
  p.mul_(Scalar(1.0 - o.lr * o.weight_decay));
  p.copy_(add(param, ortho, Scalar(-o.lr * ratio)));
}

void Muon::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                       const std::vector<ParamState*>& states, const Tensor& found_inf) {
  const auto o = g.options_as<MuonOptions>();
  if (!o.use_muon) {
    // The Adam multi-tensor kernel skips on the device and counts the steps itself.
    const AdamStepParams hp = adamw_step_params(o, 0);
    for (size_t i = 0; i < states.size(); ++i) {
      const Tensor& p = lists.param[i];
      lists.state[0].push_back(lazy_buffer(*states[i], "exp_avg", p));
      lists.state[1].push_back(lazy_buffer(*states[i], "exp_avg_sq", p));
      lists.state[2].push_back(Tensor());
    }
    adam_multi_step_kernel(lists.param.front().device())(lists, found_inf, hp);
    for (size_t k = 0; k < 2; ++k)
      for (const Tensor& t : lists.state[k]) t.bump_version();
    return;
  }
  // Muon: the flag is read on the host (the step runs matrix products, not one kernel). The
  // momentum per matrix, then one batched iteration per shape and dtype: the matrices of a shape
  // (a transformer's layers) orthogonalised together, with their products in one bmm each.
  if (found_inf.defined() && found_inf.item<float>() != 0.0f) return;
  std::vector<Tensor> updates(states.size());
  std::vector<std::vector<size_t>> batches;
  for (size_t i = 0; i < states.size(); ++i) {
    updates[i] = momentum_update(o, lists.param[i], lists.grad[i], *states[i]);
    auto same = std::find_if(batches.begin(), batches.end(), [&](const std::vector<size_t>& b) {
      const Tensor& u = updates[b.front()];
      return u.shape() == updates[i].shape() && u.dtype() == updates[i].dtype();
    });
    if (same == batches.end()) {
      batches.push_back({i});
    } else {
      same->push_back(i);
    }
  }
  for (const std::vector<size_t>& b : batches) {
    std::vector<Tensor> us;
    for (size_t i : b) us.push_back(updates[i]);
    const Tensor ortho =
        muon_orthogonalize(stack(us), o.ns_coefficients, o.ns_steps, o.eps, o.ns_float32);
    for (size_t k = 0; k < b.size(); ++k) {
      const size_t i = b[k];
      apply_update(o, lists.param[i], ortho.select(0, static_cast<int64_t>(k)));
      states[i]->step = lists.step[i].item<int64_t>() + 1;
      lists.step[i].fill_(states[i]->step);
      if (!lists.model.empty() && lists.model[i].defined()) lists.model[i].copy_(lists.param[i]);
    }
  }
}

// ---- which parameters Muon is for -----------------------------------------------------------

MuonSplit muon_split(nn::Module& model, const std::vector<std::string>& muon_patterns,
                     const std::vector<std::string>& adamw_patterns) {
  // The modules that hold parameters of their own, in order: the first and the last are the
  // model's input and output layers.
  std::vector<std::string> owners;
  std::set<std::string> embeddings;
  for (const auto& [name, m] : model.named_modules()) {
    if (m->named_parameters(false).empty()) continue;
    owners.push_back(name);
    if (m->type_name() == "Embedding") embeddings.insert(name);
  }
  auto owner_of = [](const std::string& param) {
    const size_t dot = param.rfind('.');
    return dot == std::string::npos ? std::string() : param.substr(0, dot);
  };
  std::vector<int> used_muon(muon_patterns.size(), 0), used_adamw(adamw_patterns.size(), 0);
  auto matches = [](const std::vector<std::string>& patterns, std::vector<int>& used,
                    const std::string& name) {
    bool any = false;
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (nn::name_matches(patterns[i], name)) used[i] = 1, any = true;
    }
    return any;
  };
  const auto refuse = [](MuonPatternError::List list, const auto&... parts) {
    throw MuonPatternError(list, ::mantissa::detail::str_cat(parts...));
  };
  MuonSplit split;
  for (const auto& [name, t] : model.named_parameters()) {
    const std::string owner = owner_of(name);
    const bool hidden = t.dim() == 2 && embeddings.count(owner) == 0 && !owners.empty() &&
                        owner != owners.front() && owner != owners.back();
    const bool to_muon = matches(muon_patterns, used_muon, name);
    const bool to_adamw = matches(adamw_patterns, used_adamw, name);
    if (to_muon && to_adamw) {
      refuse(MuonPatternError::kBoth, "Muon: parameter '", name,
             "' matches both a Muon pattern and an AdamW pattern");
    }
    if (to_muon && t.dim() != 2) {
      refuse(MuonPatternError::kMuon, "Muon: parameter '", name, "' of shape ", t.shape(),
             " matches a Muon pattern, but Muon only supports 2D parameters");
    }
    (to_muon || (hidden && !to_adamw) ? split.muon : split.adamw).push_back(name);
  }
  for (size_t i = 0; i < muon_patterns.size(); ++i) {
    if (!used_muon[i])
      refuse(MuonPatternError::kMuon, "Muon: the Muon pattern '", muon_patterns[i],
             "' matches no parameter");
  }
  for (size_t i = 0; i < adamw_patterns.size(); ++i) {
    if (!used_adamw[i])
      refuse(MuonPatternError::kAdamW, "Muon: the AdamW pattern '", adamw_patterns[i],
             "' matches no parameter");
  }
  return split;
}

std::vector<ParamGroup> muon_groups(nn::Module& model, const MuonSplit& split,
                                    const MuonOptions& muon, const AdamWOptions& adamw) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : model.named_parameters()) by_name.emplace(name, t);
  auto tensors = [&](const std::vector<std::string>& names) {
    std::vector<Tensor> out;
    for (const std::string& n : names) {
      const auto it = by_name.find(n);
      MT_CHECK(it != by_name.end(), "Muon: the model has no parameter '", n, "'");
      out.push_back(it->second);
    }
    return out;
  };
  std::vector<ParamGroup> groups;
  if (!split.muon.empty()) groups.emplace_back(tensors(split.muon), muon);
  if (!split.adamw.empty()) {
    MuonOptions a = muon;
    a.use_muon = false;
    a.lr = adamw.lr;
    a.betas = adamw.betas;
    a.eps = adamw.eps;
    a.weight_decay = adamw.weight_decay;
    groups.emplace_back(tensors(split.adamw), a);
  }
  return groups;
}

}  // namespace mantissa::optim
