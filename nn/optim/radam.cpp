#include "nn/optim/radam.h"

#include "engine/error.h"
#include "engine/optimizer_kernel_tables.h"
#include "nn/optim/options.h"

namespace mantissa::optim {

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options)
    : RAdam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RAdam::RAdam(std::vector<ParamGroup> groups, RAdamOptions o) : Optimizer(option_map(o)) {
  init_groups(std::move(groups));
}

void RAdam::validate(const ParamGroup& g) const {
  const auto o = g.options_as<RAdamOptions>();
  const auto [beta1, beta2] = o.betas;
  MT_CHECK(o.lr >= 0.0, "RAdam: Invalid learning rate: ", o.lr);
  MT_CHECK(o.eps >= 0.0, "RAdam: Invalid epsilon value: ", o.eps);
  MT_CHECK(beta1 >= 0.0 && beta1 < 1.0, "RAdam: Invalid beta parameter at index 0: ", beta1);
  MT_CHECK(beta2 >= 0.0 && beta2 < 1.0, "RAdam: Invalid beta parameter at index 1: ", beta2);
  MT_CHECK(o.weight_decay >= 0.0, "RAdam: Invalid weight_decay value: ", o.weight_decay);
}

void RAdam::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                        const std::vector<ParamState*>& states, const Tensor& found_inf) {
  const auto o = g.options_as<RAdamOptions>();
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& p = lists.param[i];
    lists.state[0].push_back(lazy_buffer(*states[i], "exp_avg", p));
    lists.state[1].push_back(lazy_buffer(*states[i], "exp_avg_sq", p));
  }
  radam_multi_step_kernel(lists.param.front().device())(lists, found_inf, RadamStepParams{o});
  for (int k = 0; k < 2; ++k) {
    for (const Tensor& t : lists.state[k]) t.bump_version();
  }
}

}  // namespace mantissa::optim
