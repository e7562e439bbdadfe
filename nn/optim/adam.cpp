#include "nn/optim/adam.h"

#include "engine/error.h"
#include "engine/optimizer_kernel_tables.h"
#include "nn/optim/options.h"

namespace mantissa::optim {
namespace {

std::map<std::string, double> adamw_defaults(AdamWOptions options) {
  options.decoupled_weight_decay = true;
  return option_map(options);
}

}  // namespace

Adam::Adam(WithDefaults, std::map<std::string, double> defaults) : Optimizer(std::move(defaults)) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam(WithDefaults{}, option_map(options)) {
  init_groups(std::move(groups));
}

void Adam::validate(const ParamGroup& g) const {
  // Negated comparisons so that NaN is rejected too.
  const auto o = g.options_as<AdamOptions>();
  const auto [beta1, beta2] = o.betas;
  MT_CHECK(o.lr >= 0.0, name(), ": Invalid learning rate: ", o.lr);
  MT_CHECK(o.eps >= 0.0, name(), ": Invalid epsilon value: ", o.eps);
  MT_CHECK(beta1 >= 0.0 && beta1 < 1.0, name(), ": Invalid beta parameter at index 0: ", beta1);
  MT_CHECK(beta2 >= 0.0 && beta2 < 1.0, name(), ": Invalid beta parameter at index 1: ", beta2);
  MT_CHECK(o.weight_decay >= 0.0, name(), ": Invalid weight_decay value: ", o.weight_decay);
}

namespace {

AdamStepParams adam_params(const ParamGroup& g, int64_t step, const Optimizer& opt) {
  AdamStepParams p{g.options_as<AdamOptions>()};
  p.step = step;
  p.stochastic_rounding = opt.stochastic_rounding();
  p.sr_seed = opt.stochastic_rounding_seed();
  return p;
}

}  // namespace

void Adam::update(const ParamGroup& g, const Tensor& param, const Tensor& grad, ParamState& state) {
  AdamStepParams hp = adam_params(g, state.step + 1, *this);
  hp.param_index = updating_index();
  const DType dtype = state_dtype_for(param.dtype());
  const Tensor exp_avg = lazy_buffer(state, "exp_avg", param, dtype);
  const Tensor exp_avg_sq = lazy_buffer(state, "exp_avg_sq", param, dtype);
  // Zeros when amsgrad is switched on mid-run: max(0, exp_avg_sq) starts the running max.
  const Tensor max_exp_avg_sq =
      hp.amsgrad ? lazy_buffer(state, "max_exp_avg_sq", param, dtype) : Tensor();
  adam_step_kernel(param.device())(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hp);
  state.step = hp.step;
  exp_avg.bump_version();
  exp_avg_sq.bump_version();
  if (max_exp_avg_sq.defined()) max_exp_avg_sq.bump_version();
}

void Adam::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                       const std::vector<ParamState*>& states, const Tensor& found_inf) {
  // The step is read per parameter from lists.step on the device.
  AdamStepParams hp = adam_params(g, /*step=*/0, *this);
  hp.lr_device = lr_device_ptr(g, lists.param.front().device());
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& p = lists.param[i];
    const DType dtype = state_dtype_for(p.dtype());
    lists.state[0].push_back(lazy_buffer(*states[i], "exp_avg", p, dtype));
    lists.state[1].push_back(lazy_buffer(*states[i], "exp_avg_sq", p, dtype));
    lists.state[2].push_back(hp.amsgrad ? lazy_buffer(*states[i], "max_exp_avg_sq", p, dtype)
                                        : Tensor());
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

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam(WithDefaults{}, adamw_defaults(options)) {
  init_groups(std::move(groups));
}

}  // namespace mantissa::optim
