// The optimizers' hyperparameters, one struct per optimizer (torch.optim's arguments, PyTorch's
// names and defaults). Each lists its fields once in a static `each`; that list makes the group
// options (param_groups()[i]["lr"], the state_dict keys: nn/optim/options.h) and the run config's
// keys (runner/config/config_schema.h). The step kernels' parameters are these structs themselves
// plus the step's own values (engine/optimizer_kernel_tables.h), so a hyperparameter the update
// uses is read in kernels/optimizer_math.h with no copy in between. The optimizers are in
// nn/optim/<optimizer>.h, with their formulas.
#pragma once

#include <utility>

namespace mantissa::optim {

struct SGDOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // requires momentum > 0 and dampening == 0
  bool maximize = false;
  double lr = 0.01;  // the constructors' `lr` replaces it

  template <typename Self, typename V>
  static void each(Self& o, V&& v) {
    v("lr", o.lr);
    v("momentum", o.momentum);
    v("dampening", o.dampening);
    v("weight_decay", o.weight_decay);
    v("nesterov", o.nesterov);
    v("maximize", o.maximize);
  }
};

// Adam's options (Decoupled false) and AdamW's (true: weight decay 1e-2, always decoupled).
template <bool Decoupled>
struct AdamFamilyOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = Decoupled ? 1e-2 : 0.0;
  bool amsgrad = false;
  bool maximize = false;
  bool decoupled_weight_decay = Decoupled;  // AdamW ignores false

  template <typename Self, typename V>
  static void each(Self& o, V&& v) {
    v("lr", o.lr);
    v("betas", o.betas);
    v("eps", o.eps);
    v("weight_decay", o.weight_decay);
    v("amsgrad", o.amsgrad);
    v("maximize", o.maximize);
    v("decoupled_weight_decay", o.decoupled_weight_decay);
  }
};
using AdamOptions = AdamFamilyOptions<false>;
using AdamWOptions = AdamFamilyOptions<true>;

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;

  template <typename Self, typename V>
  static void each(Self& o, V&& v) {
    v("lr", o.lr);
    v("alpha", o.alpha);
    v("eps", o.eps);
    v("weight_decay", o.weight_decay);
    v("momentum", o.momentum);
    v("centered", o.centered);
    v("maximize", o.maximize);
  }
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;

  template <typename Self, typename V>
  static void each(Self& o, V&& v) {
    v("lr", o.lr);
    v("lr_decay", o.lr_decay);
    v("weight_decay", o.weight_decay);
    v("initial_accumulator_value", o.initial_accumulator_value);
    v("eps", o.eps);
    v("maximize", o.maximize);
  }
};

struct NAdamOptions {
  double lr = 2e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;  // PyTorch 2's: decay the parameter, not the gradient

  template <typename Self, typename V>
  static void each(Self& o, V&& v) {
    v("lr", o.lr);
    v("betas", o.betas);
    v("eps", o.eps);
    v("weight_decay", o.weight_decay);
    v("momentum_decay", o.momentum_decay);
    v("decoupled_weight_decay", o.decoupled_weight_decay);
  }
};

struct RAdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // PyTorch 2's: decay the parameter, not the gradient

  template <typename Self, typename V>
  static void each(Self& o, V&& v) {
    v("lr", o.lr);
    v("betas", o.betas);
    v("eps", o.eps);
    v("weight_decay", o.weight_decay);
    v("decoupled_weight_decay", o.decoupled_weight_decay);
  }
};

}  // namespace mantissa::optim
