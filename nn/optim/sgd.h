// Stochastic gradient descent with momentum, dampening, Nesterov momentum, weight decay and
// maximize, following torch.optim.SGD (single-tensor form):
//
//   d = maximize ? -grad : grad
//   if weight_decay != 0: d = d + weight_decay * param
//   if momentum != 0:
//     buf = first step ? d : momentum * buf + (1 - dampening) * d
//     d = nesterov ? d + momentum * buf : buf
//   param = param - lr * d
//
// Group options: SGDOptions' fields (nn/optim/options.h: bools 0/1). State per parameter:
// "momentum_buffer" (only when momentum != 0) and the step count, which counts momentum updates
// (0: the next one sets buf = d).
#pragma once

#include <vector>

#include "engine/optimizer_options.h"
#include "nn/optim/optimizer.h"

namespace mantissa::optim {

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, SGDOptions options = {});
  // Per-group options; keys a group lacks take `lr` and `options`.
  SGD(std::vector<ParamGroup> groups, double lr, SGDOptions options = {});
  // With the learning rate in the options (SGDOptions::lr).
  SGD(std::vector<Tensor> params, SGDOptions options);
  SGD(std::vector<ParamGroup> groups, SGDOptions options);

  const char* name() const override { return "SGD"; }

 protected:
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override;
  void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                   const std::vector<ParamState*>& states, const Tensor& found_inf) override;
  std::vector<std::string> state_keys() const override { return {"momentum_buffer"}; }
  std::vector<std::string> planned_state_keys(const ParamGroup& g) const override {
    if (g.get("momentum") == 0.0) return {};
    return state_keys();
  }
  int64_t loaded_step(const ParamState& saved) const override;
};

}  // namespace mantissa::optim
