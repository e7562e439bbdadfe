// Adam and AdamW, following torch.optim.Adam / AdamW (single-tensor form):
//
//   g = maximize ? -grad : grad
//   if weight_decay != 0: AdamW: param = param * (1 - lr * weight_decay)
//                         Adam:  g = g + weight_decay * param
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   step_size  = lr / (1 - beta1^step)
//   v          = amsgrad ? (max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq)) : exp_avg_sq
//   param      = param - step_size * exp_avg / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//
// Group options: AdamOptions' fields (nn/optim/options.h: betas as beta1/beta2, bools 0/1;
// decoupled_weight_decay 1 is AdamW, as torch.optim.Adam's argument of that name). State per
// parameter: step, "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad only), in the parameter's
// dtype or Optimizer::set_state_dtype's (bfloat16); Optimizer::set_stochastic_rounding rounds
// the bfloat16 stores stochastically (llm.c's and torchao's low-memory AdamW).
#pragma once

#include <utility>
#include <vector>

#include "engine/optimizer_options.h"
#include "nn/optim/optimizer.h"

namespace mantissa::optim {

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Per-group options; keys a group lacks take `options`.
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions options = {});

  const char* name() const override { return "Adam"; }

 protected:
  // For subclasses: sets the defaults only; the subclass adds the groups (so that errors name it).
  struct WithDefaults {};
  Adam(WithDefaults, std::map<std::string, double> defaults);

  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override;
  void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                   const std::vector<ParamState*>& states, const Tensor& found_inf) override;
  std::vector<std::string> state_keys() const override {
    return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
  bool supports_state_dtype() const override { return true; }
  bool supports_lr_on_device() const override { return true; }
  std::vector<std::string> planned_state_keys(const ParamGroup& g) const override {
    if (g.get("amsgrad") != 0.0) return state_keys();
    return {"exp_avg", "exp_avg_sq"};
  }
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});

  const char* name() const override { return "AdamW"; }
};

}  // namespace mantissa::optim
