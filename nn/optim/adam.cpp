#include "nn/optim/adam.h"

#include "engine/error.h"
#include "engine/kernel_tables.h"

namespace mantissa::optim {
namespace {

std::map<std::string, double> adam_defaults(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0},
          {"decoupled_weight_decay", o.decoupled_weight_decay ? 1.0 : 0.0}};
}

AdamOptions as_adam(const AdamWOptions& o) {
  return AdamOptions{o.lr,
                     o.betas,
                     o.eps,
                     o.weight_decay,
                     o.amsgrad,
                     o.maximize,
                     /*decoupled_weight_decay=*/true};
}

}  // namespace

Adam::Adam(const AdamOptions& options) : Optimizer(adam_defaults(options)) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam(options) {
  init_groups(std::move(groups));
}

void Adam::validate(const ParamGroup& g) const {
  // Negated comparisons so that NaN is rejected too.
  const double lr = g.get("lr"), eps = g.get("eps"), wd = g.get("weight_decay");
  const double beta1 = g.get("beta1"), beta2 = g.get("beta2");
  MT_CHECK(lr >= 0.0, name(), ": Invalid learning rate: ", lr);
  MT_CHECK(eps >= 0.0, name(), ": Invalid epsilon value: ", eps);
  MT_CHECK(beta1 >= 0.0 && beta1 < 1.0, name(), ": Invalid beta parameter at index 0: ", beta1);
  MT_CHECK(beta2 >= 0.0 && beta2 < 1.0, name(), ": Invalid beta parameter at index 1: ", beta2);
  MT_CHECK(wd >= 0.0, name(), ": Invalid weight_decay value: ", wd);
}

namespace {

AdamStepParams adam_params(const ParamGroup& g, int64_t step) {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0, decoupled = 0, amsgrad = 0, maximize = 0;
  g.get_many({{"lr", &lr},
              {"beta1", &beta1},
              {"beta2", &beta2},
              {"eps", &eps},
              {"weight_decay", &wd},
              {"decoupled_weight_decay", &decoupled},
              {"amsgrad", &amsgrad},
              {"maximize", &maximize}});
  return AdamStepParams{lr,           beta1,         beta2, eps, wd, decoupled != 0,
                        amsgrad != 0, maximize != 0, step};
}

}  // namespace

void Adam::update(const ParamGroup& g, const Tensor& param, const Tensor& grad, ParamState& state) {
  const AdamStepParams hp = adam_params(g, state.step + 1);
  const Tensor exp_avg = lazy_buffer(state, "exp_avg", param);
  const Tensor exp_avg_sq = lazy_buffer(state, "exp_avg_sq", param);
  // Zeros when amsgrad is switched on mid-run: max(0, exp_avg_sq) starts the running max.
  const Tensor max_exp_avg_sq = hp.amsgrad ? lazy_buffer(state, "max_exp_avg_sq", param) : Tensor();
  adam_step_kernel(param.device())(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hp);
  state.step = hp.step;
  exp_avg.bump_version();
  exp_avg_sq.bump_version();
  if (max_exp_avg_sq.defined()) max_exp_avg_sq.bump_version();
}

void Adam::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                       const std::vector<ParamState*>& states, const Tensor& found_inf) {
  // The step is read per parameter from lists.step on the device.
  const AdamStepParams hp = adam_params(g, /*step=*/0);
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& p = lists.param[i];
    lists.state[0].push_back(lazy_buffer(*states[i], "exp_avg", p));
    lists.state[1].push_back(lazy_buffer(*states[i], "exp_avg_sq", p));
    lists.state[2].push_back(hp.amsgrad ? lazy_buffer(*states[i], "max_exp_avg_sq", p) : Tensor());
  }
  adam_multi_step_kernel(lists.param.front().device())(lists, found_inf, hp);
  for (const auto& list : lists.state) {
    for (const Tensor& t : list) {
      if (t.defined()) t.bump_version();
    }
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Adam(as_adam(options)) {
  init_groups(std::move(groups));
}

}  // namespace mantissa::optim
