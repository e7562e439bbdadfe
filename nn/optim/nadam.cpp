#include "nn/optim/nadam.h"

#include "engine/error.h"
#include "engine/factory.h"
#include "engine/kernel_tables.h"

namespace mantissa::optim {

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options)
    : NAdam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

NAdam::NAdam(std::vector<ParamGroup> groups, NAdamOptions o)
    : Optimizer({{"lr", o.lr},
                 {"beta1", o.betas.first},
                 {"beta2", o.betas.second},
                 {"eps", o.eps},
                 {"weight_decay", o.weight_decay},
                 {"momentum_decay", o.momentum_decay}}) {
  init_groups(std::move(groups));
}

void NAdam::validate(const ParamGroup& g) const {
  const double lr = g.get("lr"), eps = g.get("eps"), wd = g.get("weight_decay");
  const double beta1 = g.get("beta1"), beta2 = g.get("beta2"), md = g.get("momentum_decay");
  MT_CHECK(lr >= 0.0, "NAdam: Invalid learning rate: ", lr);
  MT_CHECK(eps >= 0.0, "NAdam: Invalid epsilon value: ", eps);
  MT_CHECK(beta1 >= 0.0 && beta1 < 1.0, "NAdam: Invalid beta parameter at index 0: ", beta1);
  MT_CHECK(beta2 >= 0.0 && beta2 < 1.0, "NAdam: Invalid beta parameter at index 1: ", beta2);
  MT_CHECK(wd >= 0.0, "NAdam: Invalid weight_decay value: ", wd);
  MT_CHECK(md >= 0.0, "NAdam: Invalid momentum_decay value: ", md);
}

void NAdam::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                        const std::vector<ParamState*>& states, const Tensor& found_inf) {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0, md = 0;
  g.get_many({{"lr", &lr},
              {"beta1", &beta1},
              {"beta2", &beta2},
              {"eps", &eps},
              {"weight_decay", &wd},
              {"momentum_decay", &md}});
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
  nadam_multi_step_kernel(lists.param.front().device())(
      lists, found_inf, NadamStepParams{lr, beta1, beta2, eps, wd, md});
  for (const auto& list : lists.state) {
    for (const Tensor& t : list) t.bump_version();
  }
}

}  // namespace mantissa::optim
