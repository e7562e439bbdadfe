// Muon, following torch.optim.Muon (PyTorch 2.9 to 2.15), with AdamW for the parameters Muon is not
// for, in one optimizer (the GPT-2 speedrun's MuonWithAuxAdam): each group is a Muon group or, with
// use_muon 0, an AdamW group.
//
// A Muon group updates 2-D parameters only (PyTorch's rule; others are refused by name):
//   buf = lerp(buf, g, 1 - momentum)                       ("momentum_buffer", starts at 0)
//   u   = nesterov ? lerp(g, buf, momentum) : buf
//   O   = NS(u): X = u / max(||u||_F, eps) in bfloat16 (float32 with ns_float32), transposed
//         when it has more rows than columns; ns_steps times: G = X X^T, X = a X + (b G + c G G) X
//         with (a, b, c) the ns_coefficients; transposed back
//   param = param * (1 - lr * weight_decay) - lr * ratio * O
//   ratio = sqrt(max(1, rows / cols)) (adjust_lr_fn original, the default),
//           0.2 * sqrt(max(rows, cols)) (match_rms_adamw) or sqrt(rows / cols)
//           (spectral_unclamped, PyTorch 2.15's)
// An AdamW group is torch.optim.AdamW with its lr, betas, eps and weight_decay (the Adam kernels;
// state "exp_avg", "exp_avg_sq").
//
// Where it differs from PyTorch: the iteration's products round as mantissa's bfloat16 matmul and
// addmm do, which moves a bfloat16 update by a few per cent (the iteration is sensitive to the
// order of its sums: any two correct bfloat16 orders differ so); with PyTorch 2.9 only, whose
// .bfloat16() returned a bfloat16 buffer itself, a bfloat16 parameter's momentum buffer was
// normalised in place with nesterov off (2.15 copies, as here); state carries a step count, which
// PyTorch's Muon has not.
//
// Group options: MuonOptions' fields (nn/optim/options.h; ns_coefficients are ns_coefficient1..3,
// adjust_lr_fn 0 original, 1 match_rms_adamw, 2 spectral_unclamped).
//
// The multi-tensor step (fused(), the default): AdamW groups on Adam's multi-tensor kernel; a Muon
// group's matrices orthogonalised together, one batched iteration per shape and dtype (a
// transformer's layers share their shapes), each product one bmm. Unfused, matrix by matrix, the
// reference. A Muon group reads found_inf on the host either way (its step is matrix products,
// not one kernel that could skip on the device).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim/adam.h"
#include "nn/optim/optimizer.h"

namespace mantissa::nn {
class Module;
}  // namespace mantissa::nn

namespace mantissa::optim {

enum class MuonAdjustLr : uint8_t { Original = 0, MatchRmsAdamW = 1, SpectralUnclamped = 2 };
// PyTorch's names of the values, in order (the config's `adjust_lr_fn`; found by ADL).
inline const std::vector<std::string>& option_names(MuonAdjustLr) {
  static const std::vector<std::string> names = {"original", "match_rms_adamw",
                                                 "spectral_unclamped"};
  return names;
}

struct MuonOptions {
  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  std::array<double, 3> ns_coefficients{3.4445, -4.7750, 2.0315};
  double eps = 1e-7;
  int64_t ns_steps = 5;
  MuonAdjustLr adjust_lr_fn = MuonAdjustLr::Original;
  // The iteration in float32 instead of PyTorch's bfloat16 (to compare with a reference exactly).
  bool ns_float32 = false;
  // 0: the group is stepped by AdamW, with lr, betas, eps and weight_decay.
  bool use_muon = true;
  std::pair<double, double> betas{0.9, 0.999};  // AdamW groups only

  template <typename Self, typename V>
  static void each(Self& o, V&& v) {
    v("lr", o.lr);
    v("weight_decay", o.weight_decay);
    v("momentum", o.momentum);
    v("nesterov", o.nesterov);
    v("ns_coefficients", o.ns_coefficients);
    v("eps", o.eps);
    v("ns_steps", o.ns_steps);
    v("adjust_lr_fn", o.adjust_lr_fn);
    v("ns_float32", o.ns_float32);
    v("use_muon", o.use_muon);
    v("betas", o.betas);
  }
};

class Muon : public Optimizer {
 public:
  // Every parameter in one Muon group.
  explicit Muon(std::vector<Tensor> params, MuonOptions options = {});
  // Per-group options; keys a group lacks take `options`. A group with use_muon 0 is AdamW's.
  explicit Muon(std::vector<ParamGroup> groups, MuonOptions options = {});

  const char* name() const override { return "Muon"; }
  std::string momentum_key(const ParamGroup& group) const override {
    return group.get("use_muon") != 0.0 ? "momentum" : "beta1";
  }
  // A Muon group's step reads found_inf and the step counts on the host.
  bool step_reads_host() const override { return true; }
  bool updates_whole_parameters(const ParamGroup& group) const override {
    return group.get("use_muon") != 0.0;
  }

 protected:
  void validate(const ParamGroup& group) const override;
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad,
              ParamState& state) override;
  void update_many(const ParamGroup& group, OptimizerTensorLists& lists,
                   const std::vector<ParamState*>& states, const Tensor& found_inf) override;
  std::vector<std::string> state_keys() const override {
    return {"momentum_buffer", "exp_avg", "exp_avg_sq"};
  }
  std::vector<std::string> planned_state_keys(const ParamGroup& g) const override {
    if (g.get("use_muon") != 0.0) return {"momentum_buffer"};
    return {"exp_avg", "exp_avg_sq"};
  }

 private:
  // The momentum step of one matrix (refusing any other than 2-D); returns the update to
  // orthogonalise.
  Tensor momentum_update(const MuonOptions& o, const Tensor& param, const Tensor& grad,
                         ParamState& state);
  // Decay and the orthogonalised update, scaled by adjust_lr_fn's ratio.
  static void apply_update(const MuonOptions& o, const Tensor& param, const Tensor& ortho);
};

// Newton–Schulz orthogonalisation of a 2-D update, as torch.optim.Muon's
// _zeropower_via_newtonschulz, in bfloat16 (or float32); returns it in that dtype.
Tensor muon_orthogonalize(const Tensor& update, const std::array<double, 3>& coefficients,
                          int64_t steps, double eps, bool in_float32 = false);

// Which parameters of a model Muon is for (written once; the config's optimizer.type muon and
// muon_groups use it): the 2-D weights of its hidden layers. Not: parameters of fewer or more
// than two dimensions (biases, norm gains, convolution filters), an Embedding's weight, nor the
// weights of the model's first and last layers with parameters (the input and output layers; a
// GPT's are its embeddings and its head, which shares the token embedding). `muon_patterns` and
// `adamw_patterns` override the rule by name (a pattern is a name with `*` for any run of
// characters: "transformer.h.*.mlp.*"); a parameter both match is an error, and so is a pattern
// that matches nothing. Returns {Muon's names, AdamW's names}, in the model's order.
struct MuonSplit {
  std::vector<std::string> muon, adamw;
};
// What muon_split throws for a pattern it cannot use, saying which list the pattern came from
// (kBoth: a parameter that patterns of both lists match), so that a caller names its own key.
class MuonPatternError : public Error {
 public:
  enum List { kMuon, kAdamW, kBoth };
  MuonPatternError(List list, const std::string& what) : Error(what), list(list) {}
  List list;
};
MuonSplit muon_split(nn::Module& model, const std::vector<std::string>& muon_patterns = {},
                     const std::vector<std::string>& adamw_patterns = {});

// The two groups of a MuonSplit: Muon's with `muon`, AdamW's (use_muon 0) with `adamw`'s lr,
// betas, eps and weight_decay.
std::vector<ParamGroup> muon_groups(nn::Module& model, const MuonSplit& split,
                                    const MuonOptions& muon, const AdamWOptions& adamw);

}  // namespace mantissa::optim
