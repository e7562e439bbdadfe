// RAdam, following torch.optim.RAdam (single-tensor form):
//
//   if weight_decay != 0: decoupled_weight_decay ? param = param * (1 - lr * weight_decay)
//                                                : g = grad + weight_decay * param
//   exp_avg    = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   rho_inf = 2 / (1 - beta2) - 1
//   rho_t   = rho_inf - 2 * step * beta2^step / (1 - beta2^step)
//   u = exp_avg / (1 - beta1^step) * lr
//   if rho_t > 5: rect = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
//                 u = u * sqrt(1 - beta2^step) / (sqrt(exp_avg_sq) + eps) * rect
//   param = param - u
//
// Group options: RAdamOptions' fields (nn/optim/options.h: betas as beta1/beta2). State per
// parameter: step, "exp_avg", "exp_avg_sq".
#pragma once

#include <utility>
#include <vector>

#include "engine/optimizer_options.h"
#include "nn/optim/optimizer.h"

namespace mantissa::optim {

class RAdam : public Optimizer {
 public:
  explicit RAdam(std::vector<Tensor> params, RAdamOptions options = {});
  explicit RAdam(std::vector<ParamGroup> groups, RAdamOptions options = {});

  const char* name() const override { return "RAdam"; }

 protected:
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override {
    update_as_list(group, param, grad, state);
  }
  void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                   const std::vector<ParamState*>& states, const Tensor& found_inf) override;
  std::vector<std::string> state_keys() const override { return {"exp_avg", "exp_avg_sq"}; }
};

}  // namespace mantissa::optim
