#include "nn/optim/adagrad.h"

#include "engine/error.h"
#include "engine/kernel_tables.h"

namespace mantissa::optim {

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions o)
    : Optimizer({{"lr", o.lr},
                 {"lr_decay", o.lr_decay},
                 {"weight_decay", o.weight_decay},
                 {"initial_accumulator_value", o.initial_accumulator_value},
                 {"eps", o.eps},
                 {"maximize", o.maximize ? 1.0 : 0.0}}) {
  init_groups(std::move(groups));
}

void Adagrad::validate(const ParamGroup& g) const {
  const double lr = g.get("lr"), lr_decay = g.get("lr_decay"), wd = g.get("weight_decay");
  const double init = g.get("initial_accumulator_value"), eps = g.get("eps");
  MT_CHECK(lr >= 0.0, "Adagrad: Invalid learning rate: ", lr);
  MT_CHECK(lr_decay >= 0.0, "Adagrad: Invalid lr_decay value: ", lr_decay);
  MT_CHECK(wd >= 0.0, "Adagrad: Invalid weight_decay value: ", wd);
  MT_CHECK(init >= 0.0, "Adagrad: Invalid initial_accumulator_value value: ", init);
  MT_CHECK(eps >= 0.0, "Adagrad: Invalid epsilon value: ", eps);
}

void Adagrad::update_many(const ParamGroup& g, OptimizerTensorLists& lists,
                          const std::vector<ParamState*>& states, const Tensor& found_inf) {
  double lr = 0, lr_decay = 0, wd = 0, init = 0, eps = 0, maximize = 0;
  g.get_many({{"lr", &lr},
              {"lr_decay", &lr_decay},
              {"weight_decay", &wd},
              {"initial_accumulator_value", &init},
              {"eps", &eps},
              {"maximize", &maximize}});
  for (size_t i = 0; i < states.size(); ++i) {
    bool created = false;
    Tensor sum = lazy_buffer(*states[i], "sum", lists.param[i], &created);
    if (created && init != 0.0) sum.fill_(init);
    lists.state[0].push_back(std::move(sum));
  }
  adagrad_multi_step_kernel(lists.param.front().device())(
      lists, found_inf, AdagradStepParams{lr, lr_decay, wd, eps, maximize != 0});
  for (const Tensor& t : lists.state[0]) t.bump_version();
}

}  // namespace mantissa::optim
