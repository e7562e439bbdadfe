#include "nn/optim/rmsprop.h"

#include "engine/error.h"
#include "engine/kernel_tables.h"

namespace mantissa::optim {

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o)
    : Optimizer({{"lr", o.lr},
                 {"alpha", o.alpha},
                 {"eps", o.eps},
                 {"weight_decay", o.weight_decay},
                 {"momentum", o.momentum},
                 {"centered", o.centered ? 1.0 : 0.0},
                 {"maximize", o.maximize ? 1.0 : 0.0}}) {
  init_groups(std::move(groups));
}

void RMSprop::validate(const ParamGroup& g) const {
  // Negated comparisons so that NaN is rejected too.
  const double lr = g.get("lr"), eps = g.get("eps"), momentum = g.get("momentum");
  const double wd = g.get("weight_decay"), alpha = g.get("alpha");
  MT_CHECK(lr >= 0.0, "RMSprop: Invalid learning rate: ", lr);
  MT_CHECK(eps >= 0.0, "RMSprop: Invalid epsilon value: ", eps);
  MT_CHECK(momentum >= 0.0, "RMSprop: Invalid momentum value: ", momentum);
  MT_CHECK(wd >= 0.0, "RMSprop: Invalid weight_decay value: ", wd);
  MT_CHECK(alpha >= 0.0, "RMSprop: Invalid alpha value: ", alpha);
}

void RMSprop::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                          const std::vector<ParamState*>& states, const Tensor& found_inf) {
  double lr = 0, alpha = 0, eps = 0, wd = 0, momentum = 0, centered = 0, maximize = 0;
  g.get_many({{"lr", &lr},
              {"alpha", &alpha},
              {"eps", &eps},
              {"weight_decay", &wd},
              {"momentum", &momentum},
              {"centered", &centered},
              {"maximize", &maximize}});
  const RmspropStepParams hp{lr, alpha, eps, wd, momentum, centered != 0, maximize != 0};
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& p = lists.param[i];
    lists.state[0].push_back(lazy_buffer(*states[i], "square_avg", p));
    lists.state[1].push_back(momentum > 0.0 ? lazy_buffer(*states[i], "momentum_buffer", p)
                                            : Tensor());
    lists.state[2].push_back(hp.centered ? lazy_buffer(*states[i], "grad_avg", p) : Tensor());
  }
  rmsprop_multi_step_kernel(lists.param.front().device())(lists, found_inf, hp);
  for (const auto& list : lists.state) {
    for (const Tensor& t : list) {
      if (t.defined()) t.bump_version();
    }
  }
}

}  // namespace mantissa::optim
