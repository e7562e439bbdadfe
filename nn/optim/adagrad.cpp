#include "nn/optim/adagrad.h"

#include "engine/error.h"
#include "engine/optimizer_kernel_tables.h"
#include "nn/optim/options.h"

namespace mantissa::optim {

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions o) : Optimizer(option_map(o)) {
  init_groups(std::move(groups));
}

void Adagrad::validate(const ParamGroup& g) const {
  const auto o = g.options_as<AdagradOptions>();
  MT_CHECK(o.lr >= 0.0, "Adagrad: Invalid learning rate: ", o.lr);
  MT_CHECK(o.lr_decay >= 0.0, "Adagrad: Invalid lr_decay value: ", o.lr_decay);
  MT_CHECK(o.weight_decay >= 0.0, "Adagrad: Invalid weight_decay value: ", o.weight_decay);
  MT_CHECK(o.initial_accumulator_value >= 0.0,
           "Adagrad: Invalid initial_accumulator_value value: ", o.initial_accumulator_value);
  MT_CHECK(o.eps >= 0.0, "Adagrad: Invalid epsilon value: ", o.eps);
}

void Adagrad::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                          const std::vector<ParamState*>& states, const Tensor& found_inf) {
  const auto o = g.options_as<AdagradOptions>();
  for (size_t i = 0; i < states.size(); ++i) {
    bool created = false;
    Tensor sum = lazy_buffer(*states[i], "sum", lists.param[i], &created);
    if (created && o.initial_accumulator_value != 0.0) sum.fill_(o.initial_accumulator_value);
    lists.state[0].push_back(std::move(sum));
  }
  adagrad_multi_step_kernel(lists.param.front().device())(lists, found_inf, AdagradStepParams{o});
  for (const Tensor& t : lists.state[0]) t.bump_version();
}

}  // namespace mantissa::optim
