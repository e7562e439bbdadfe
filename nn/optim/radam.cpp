#include "nn/optim/radam.h"

#include "engine/error.h"
#include "engine/kernel_tables.h"

namespace mantissa::optim {

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options)
    : RAdam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RAdam::RAdam(std::vector<ParamGroup> groups, RAdamOptions o)
    : Optimizer({{"lr", o.lr},
                 {"beta1", o.betas.first},
                 {"beta2", o.betas.second},
                 {"eps", o.eps},
                 {"weight_decay", o.weight_decay}}) {
  init_groups(std::move(groups));
}

void RAdam::validate(const ParamGroup& g) const {
  const double lr = g.get("lr"), eps = g.get("eps"), wd = g.get("weight_decay");
  const double beta1 = g.get("beta1"), beta2 = g.get("beta2");
  MT_CHECK(lr >= 0.0, "RAdam: Invalid learning rate: ", lr);
  MT_CHECK(eps >= 0.0, "RAdam: Invalid epsilon value: ", eps);
  MT_CHECK(beta1 >= 0.0 && beta1 < 1.0, "RAdam: Invalid beta parameter at index 0: ", beta1);
  MT_CHECK(beta2 >= 0.0 && beta2 < 1.0, "RAdam: Invalid beta parameter at index 1: ", beta2);
  MT_CHECK(wd >= 0.0, "RAdam: Invalid weight_decay value: ", wd);
}

void RAdam::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                        const std::vector<ParamState*>& states, const Tensor& found_inf) {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0;
  g.get_many(
      {{"lr", &lr}, {"beta1", &beta1}, {"beta2", &beta2}, {"eps", &eps}, {"weight_decay", &wd}});
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& p = lists.param[i];
    lists.state[0].push_back(lazy_buffer(*states[i], "exp_avg", p));
    lists.state[1].push_back(lazy_buffer(*states[i], "exp_avg_sq", p));
  }
  radam_multi_step_kernel(lists.param.front().device())(lists, found_inf,
                                                        RadamStepParams{lr, beta1, beta2, eps, wd});
  for (int k = 0; k < 2; ++k) {
    for (const Tensor& t : lists.state[k]) t.bump_version();
  }
}

}  // namespace mantissa::optim
