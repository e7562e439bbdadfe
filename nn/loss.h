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

// weight: class weights [C], or undefined for none (a buffer "weight" when given, as PyTorch's).
struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  Tensor weight = Tensor();
};
class CrossEntropyLossImpl : public LossModule {
 public:
  explicit CrossEntropyLossImpl(CrossEntropyOptions o = {})
      : LossModule("CrossEntropyLoss", o.reduction), options(std::move(o)) {
    if (options.weight.defined()) register_buffer("weight", options.weight);
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::cross_entropy(input, target, reduction, options.label_smoothing,
                                     options.ignore_index, options.weight);
  }
  CrossEntropyOptions options;
};
MANTISSA_MODULE(CrossEntropyLoss);

// Input: log-probabilities (a log_softmax's output).
struct NLLLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  Tensor weight = Tensor();  // class weights [C], or undefined
};
class NLLLossImpl : public LossModule {
 public:
  explicit NLLLossImpl(NLLLossOptions o = {})
      : LossModule("NLLLoss", o.reduction), options(std::move(o)) {
    if (options.weight.defined()) register_buffer("weight", options.weight);
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::nll_loss(input, target, reduction, options.ignore_index, options.weight);
  }
  NLLLossOptions options;
};
MANTISSA_MODULE(NLLLoss);

// weight (optional) scales each element's loss; pos_weight (optional) the positive term.
class BCEWithLogitsLossImpl : public LossModule {
 public:
  explicit BCEWithLogitsLossImpl(Reduction r = Reduction::Mean, Tensor pos_weight = Tensor(),
                                 Tensor weight = Tensor())
      : LossModule("BCEWithLogitsLoss", r),
        pos_weight(std::move(pos_weight)),
        weight(std::move(weight)) {
    if (this->weight.defined()) register_buffer("weight", this->weight);
    if (this->pos_weight.defined()) register_buffer("pos_weight", this->pos_weight);
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::binary_cross_entropy_with_logits(input, target, reduction, pos_weight,
                                                        weight);
  }
  Tensor pos_weight, weight;
};
MANTISSA_MODULE(BCEWithLogitsLoss);

// Input: probabilities (a sigmoid's output); refused inside an autocast scope, where
// BCEWithLogitsLoss is the safe form.
class BCELossImpl : public LossModule {
 public:
  explicit BCELossImpl(Reduction r = Reduction::Mean, Tensor weight = Tensor())
      : LossModule("BCELoss", r), weight(std::move(weight)) {
    if (this->weight.defined()) register_buffer("weight", this->weight);
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::binary_cross_entropy(input, target, reduction, weight);
  }
  Tensor weight = Tensor();
};
MANTISSA_MODULE(BCELoss);

class SmoothL1LossImpl : public LossModule {
 public:
  explicit SmoothL1LossImpl(Reduction r = Reduction::Mean, double beta = 1.0)
      : LossModule("SmoothL1Loss", r), beta(beta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::smooth_l1_loss(input, target, reduction, beta);
  }
  std::string extra_repr() const override;
  double beta;
};
MANTISSA_MODULE(SmoothL1Loss);

class HuberLossImpl : public LossModule {
 public:
  explicit HuberLossImpl(Reduction r = Reduction::Mean, double delta = 1.0)
      : LossModule("HuberLoss", r), delta(delta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::huber_loss(input, target, reduction, delta);
  }
  std::string extra_repr() const override;
  double delta;
};
MANTISSA_MODULE(HuberLoss);

// Input: log-probabilities; target: probabilities (log-probabilities with log_target). Its
// reduction is kl_div's (batchmean is what the KL divergence's definition asks for); the
// LossModule reduction field is unused.
class KLDivLossImpl : public LossModule {
 public:
  explicit KLDivLossImpl(KlDivReduction r = KlDivReduction::Mean, bool log_target = false)
      : LossModule("KLDivLoss", Reduction::Mean), kl_reduction(r), log_target(log_target) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return functional::kl_div(input, target, kl_reduction, log_target);
  }
  std::string extra_repr() const override;
  KlDivReduction kl_reduction;
  bool log_target;
};
MANTISSA_MODULE(KLDivLoss);

}  // namespace mantissa::nn
