#include "nn/optim/nadam.h"

#include "engine/error.h"
#include "engine/factory.h"
#include "engine/optimizer_kernel_tables.h"
#include "nn/optim/options.h"

namespace mantissa::optim {

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options)
    : NAdam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

NAdam::NAdam(std::vector<ParamGroup> groups, NAdamOptions o) : Optimizer(option_map(o)) {
  init_groups(std::move(groups));
}

void NAdam::validate(const ParamGroup& g) const {
  const auto o = g.options_as<NAdamOptions>();
  const auto [beta1, beta2] = o.betas;
  MT_CHECK(o.lr >= 0.0, "NAdam: Invalid learning rate: ", o.lr);
  MT_CHECK(o.eps >= 0.0, "NAdam: Invalid epsilon value: ", o.eps);
  MT_CHECK(beta1 >= 0.0 && beta1 < 1.0, "NAdam: Invalid beta parameter at index 0: ", beta1);
  MT_CHECK(beta2 >= 0.0 && beta2 < 1.0, "NAdam: Invalid beta parameter at index 1: ", beta2);
  MT_CHECK(o.weight_decay >= 0.0, "NAdam: Invalid weight_decay value: ", o.weight_decay);
  MT_CHECK(o.momentum_decay >= 0.0, "NAdam: Invalid momentum_decay value: ", o.momentum_decay);
}

void NAdam::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                        const std::vector<ParamState*>& states, const Tensor& found_inf) {
  const auto o = g.options_as<NAdamOptions>();
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& p = lists.param[i];
    lists.state[0].push_back(lazy_buffer(*states[i], "exp_avg", p));
    lists.state[1].push_back(lazy_buffer(*states[i], "exp_avg_sq", p));
    auto& buffers = states[i]->buffers;
    auto it = buffers.find("mu_product");
    if (it == buffers.end()) {
      it = buffers.emplace("mu_product", full({}, 1.0, TensorOptions(p.device()).dtype(kFloat32)))
               .first;
    }
    lists.state[2].push_back(it->second);
  }
  nadam_multi_step_kernel(lists.param.front().device())(lists, found_inf, NadamStepParams{o});
  for (const auto& list : lists.state) {
    for (const Tensor& t : list) t.bump_version();
  }
}

}  // namespace mantissa::optim
