// RMSprop, following torch.optim.RMSprop (single-tensor form):
//
//   g = maximize ? -grad : grad
//   if weight_decay != 0: g = g + weight_decay * param
//   square_avg = alpha * square_avg + (1 - alpha) * g * g
//   if centered: grad_avg = alpha * grad_avg + (1 - alpha) * g
//                avg = sqrt(square_avg - grad_avg * grad_avg) + eps
//   else:        avg = sqrt(square_avg) + eps
//   if momentum > 0: buf = momentum * buf + g / avg;  param = param - lr * buf
//   else:            param = param - lr * g / avg
//
// Group options: RMSpropOptions' fields (nn/optim/options.h: bools 0/1). State per parameter:
// step, "square_avg", "momentum_buffer" (momentum > 0 only), "grad_avg" (centered only); buffers
// start at zero.
#pragma once

#include <vector>

#include "engine/optimizer_options.h"
#include "nn/optim/optimizer.h"

namespace mantissa::optim {

class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  // Per-group options; keys a group lacks take `options`.
  explicit RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options = {});

  const char* name() const override { return "RMSprop"; }

 protected:
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override {
    update_as_list(group, param, grad, state);
  }
  void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                   const std::vector<ParamState*>& states, const Tensor& found_inf) override;
  std::vector<std::string> state_keys() const override {
    return {"square_avg", "momentum_buffer", "grad_avg"};
  }
  std::vector<std::string> planned_state_keys(const ParamGroup& g) const override {
    std::vector<std::string> keys{"square_avg"};
    if (g.get("momentum") > 0.0) keys.push_back("momentum_buffer");
    if (g.get("centered") != 0.0) keys.push_back("grad_avg");
    return keys;
  }
};

}  // namespace mantissa::optim
