// Adagrad, following torch.optim.Adagrad (single-tensor form, dense gradients):
//
//   g = maximize ? -grad : grad
//   if weight_decay != 0: g = g + weight_decay * param
//   clr = lr / (1 + (step - 1) * lr_decay)          (step = 1 on the first update)
//   sum = sum + g * g
//   param = param - clr * g / (sqrt(sum) + eps)
//
// Group options: AdagradOptions' fields (nn/optim/options.h). State per parameter: step, "sum"
// (starts at initial_accumulator_value; created at the first step rather than in the constructor
// as PyTorch does, so state_dict() before any step is empty).
#pragma once

#include <vector>

#include "engine/optimizer_options.h"
#include "nn/optim/optimizer.h"

namespace mantissa::optim {

class Adagrad : public Optimizer {
 public:
  explicit Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  explicit Adagrad(std::vector<ParamGroup> groups, AdagradOptions options = {});

  const char* name() const override { return "Adagrad"; }

 protected:
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override {
    update_as_list(group, param, grad, state);
  }
  void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                   const std::vector<ParamState*>& states, const Tensor& found_inf) override;
  std::vector<std::string> state_keys() const override { return {"sum"}; }
};

}  // namespace mantissa::optim
