#include "nn/optim/rmsprop.h"

#include "engine/error.h"
#include "engine/optimizer_kernel_tables.h"
#include "nn/optim/options.h"

namespace mantissa::optim {

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions o) : Optimizer(option_map(o)) {
  init_groups(std::move(groups));
}

void RMSprop::validate(const ParamGroup& g) const {
  // Negated comparisons so that NaN is rejected too.
  const auto o = g.options_as<RMSpropOptions>();
  MT_CHECK(o.lr >= 0.0, "RMSprop: Invalid learning rate: ", o.lr);
  MT_CHECK(o.eps >= 0.0, "RMSprop: Invalid epsilon value: ", o.eps);
  MT_CHECK(o.momentum >= 0.0, "RMSprop: Invalid momentum value: ", o.momentum);
  MT_CHECK(o.weight_decay >= 0.0, "RMSprop: Invalid weight_decay value: ", o.weight_decay);
  MT_CHECK(o.alpha >= 0.0, "RMSprop: Invalid alpha value: ", o.alpha);
}

void RMSprop::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                          const std::vector<ParamState*>& states, const Tensor& found_inf) {
  const auto o = g.options_as<RMSpropOptions>();
  const RmspropStepParams hp{o};
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& p = lists.param[i];
    lists.state[0].push_back(lazy_buffer(*states[i], "square_avg", p));
    lists.state[1].push_back(o.momentum > 0.0 ? lazy_buffer(*states[i], "momentum_buffer", p)
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
