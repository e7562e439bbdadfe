// NAdam, following torch.optim.NAdam (single-tensor form):
//
//   if weight_decay != 0: decoupled_weight_decay ? param = param * (1 - lr * weight_decay)
//                                                : g = grad + weight_decay * param
//   mu      = beta1 * (1 - 0.5 * 0.96^(step * momentum_decay))
//   mu_next = beta1 * (1 - 0.5 * 0.96^((step + 1) * momentum_decay))
//   mu_product = mu_product * mu                     (float32, as PyTorch's state tensor)
//   exp_avg    = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   denom = sqrt(exp_avg_sq / (1 - beta2^step)) + eps
//   param = param - lr * (1 - mu) / (1 - mu_product) * g / denom
//   param = param - lr * mu_next / (1 - mu_product * mu_next) * exp_avg / denom
//
// mu_product * mu_next is taken in double from the float32 mu_product, as PyTorch 2 does
// (PyTorch 1.13 multiplied by mu a second time).
//
// Group options: NAdamOptions' fields (nn/optim/options.h: betas as beta1/beta2). State per
// parameter: step, "exp_avg", "exp_avg_sq", "mu_product" (a float32 scalar, starting at 1).
#pragma once

#include <utility>
#include <vector>

#include "engine/optimizer_options.h"
#include "nn/optim/optimizer.h"

namespace mantissa::optim {

class NAdam : public Optimizer {
 public:
  explicit NAdam(std::vector<Tensor> params, NAdamOptions options = {});
  explicit NAdam(std::vector<ParamGroup> groups, NAdamOptions options = {});

  const char* name() const override { return "NAdam"; }

 protected:
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override {
    update_as_list(group, param, grad, state);
  }
  void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                   const std::vector<ParamState*>& states, const Tensor& found_inf) override;
  std::vector<std::string> state_keys() const override {
    return {"exp_avg", "exp_avg_sq", "mu_product"};
  }
  bool scalar_state(const std::string& key) const override { return key == "mu_product"; }
};

}  // namespace mantissa::optim
