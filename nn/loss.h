// Loss modules with reduction "mean" (default), "sum" or "none".
#pragma once

#include <string>

#include "nn/functional.h"
#include "nn/module.h"

namespace mantissa::nn {

class LossModule : public Module {
 public:
  LossModule(std::string type_name, Reduction r) : Module(std::move(type_name)), reduction(r) {}
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  std::string extra_repr() const override;
  Reduction reduction;
};

class MSELossImpl : public LossModule {
 public:
  explicit MSELossImpl(Reduction r = Reduction::Mean) : LossModule("MSELoss", r) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::mse_loss(input, target, reduction);
  }
};
MANTISSA_MODULE(MSELoss);

class L1LossImpl : public LossModule {
 public:
  explicit L1LossImpl(Reduction r = Reduction::Mean) : LossModule("L1Loss", r) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::l1_loss(input, target, reduction);
  }
};
MANTISSA_MODULE(L1Loss);

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
};
class CrossEntropyLossImpl : public LossModule {
 public:
  explicit CrossEntropyLossImpl(CrossEntropyOptions o = {})
      : LossModule("CrossEntropyLoss", o.reduction), options(o) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::cross_entropy(input, target, reduction, options.label_smoothing,
                                     options.ignore_index);
  }
  CrossEntropyOptions options;
};
MANTISSA_MODULE(CrossEntropyLoss);

class BCEWithLogitsLossImpl : public LossModule {
 public:
  explicit BCEWithLogitsLossImpl(Reduction r = Reduction::Mean, Tensor pos_weight = Tensor())
      : LossModule("BCEWithLogitsLoss", r), pos_weight(std::move(pos_weight)) {
    if (this->pos_weight.defined()) register_buffer("pos_weight", this->pos_weight);
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::binary_cross_entropy_with_logits(input, target, reduction, pos_weight);
  }
  Tensor pos_weight;
};
MANTISSA_MODULE(BCEWithLogitsLoss);

}  // namespace mantissa::nn
