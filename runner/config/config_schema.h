// The run-config schema: every key of every section declared once, with its member, its checks,
// the section types it applies to and its documentation line. The key's default is the member's
// initializer in config.h / data.h (a per-type default is declared here with default_for).
//
// Everything that knows about keys walks these declarations with a visitor: the YAML parser and
// --set overrides (config.cpp), the resolved YAML whose text is hashed (config_yaml.cpp), and the
// reference tables of docs/configs.md (config_reference.cpp). Adding a key is one member and one
// line below; the order of the lines is the order of resolved.yaml, so it must not change for an
// existing key (the config hash of existing runs would).
//
// A visitor V provides:
//   v.field(const Key<T>&)                   one key (T: see the Key comment)
//   v.either(const Key<A>&, const Key<B>&)   two keys of which a config gives at most one; the
//                                            first is the default, the one not chosen is reset
//   v.rule(const Rule&)                      a check across keys, reported on one of them
//   v.section(name, S&, help[, only])        a nested map, walked with describe(v, S&); with
//                                            `only`, for those values of the selector
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/config_keys.h"

namespace mantissa::runner::schema {

// ---- the declarations ---------------------------------------------------------------------------

template <typename V>
void describe(V& v, LayerSpec& l) {
  v.field(key("type", l.type).selector().one_of(kLayerTypes).required().doc("the layer"));
  l.select();
  v.field(key("name", l.name)
              .optional_output()
              .checked(
                  [](const std::string& s) {
                    return s.find('.') == std::string::npos ? ""
                                                            : "a layer name cannot contain '.'";
                  },
                  "no '.'")
              .doc("the child's name in parameter names (`head.weight`); default: its index"));
  variant_keys(v, l.options, kLayerTypes, layer_keys(), [&](const VariantKey& row) {
    const std::string_view name = row.name;
    if (name == "padding" && row.only.back() == "maxpool2d") {
      v.rule({"padding",
              {"maxpool2d"},
              [&l] {
                const auto* m = std::get_if<MaxPool2dLayer>(&l.options);
                return m == nullptr || 2 * m->padding <= m->kernel;
              },
              "must be at most half of kernel"});
    } else if (name == "output_size") {
      v.rule({"output_size",
              {"adaptive_avg_pool2d"},
              [&l] {
                const auto* a = std::get_if<AdaptiveAvgPool2dLayer>(&l.options);
                if (a == nullptr) return true;
                const auto& o = a->output_size;
                return (o.size() == 1 || o.size() == 2) && o.front() >= 1 && o.back() >= 1;
              },
              "must be one or two sizes, each >= 1"});
    }
  });
}

template <typename V>
void describe(V& v, ModelConfig& m) {
  v.either(key("preset", m.preset)
               .selector()
               .one_of({"toy", "gpt"})
               .doc("`toy`: PyTorch's ToyModel, Linear(10,10) → ReLU → Linear(10,5), parameters "
                    "`net1.*`, `net2.*`; `gpt`: nanoGPT's GPT (`nn::GPT`, docs/gpt.md) with the "
                    "shape below, token ids in, logits out"),
           key("layers", m.layers)
               .doc("an `nn.Sequential` of the layers below; parameters named by index or `name`"));
  v.field(key("init_from", m.init_from)
              .optional_output()
              .default_text("none")
              .doc("a safetensors file (PyTorch names) loaded strictly into the model before "
                   "training; for `gpt`, a nanoGPT or Hugging Face GPT-2 state dict"));
  v.field(key("n_layer", m.gpt.n_layer).applies_to({"gpt"}).at_least(1).doc("transformer blocks"));
  v.field(key("n_head", m.gpt.n_head)
              .applies_to({"gpt"})
              .at_least(1)
              .doc("attention heads (must divide `n_embd`)"));
  v.field(key("n_embd", m.gpt.n_embd).applies_to({"gpt"}).at_least(1).doc("embedding width"));
  v.field(key("block_size", m.gpt.block_size)
              .applies_to({"gpt"})
              .at_least(1)
              .doc("the longest sequence (rows of the position embedding)"));
  v.field(key("vocab_size", m.gpt.vocab_size)
              .applies_to({"gpt"})
              .at_least(1)
              .doc("tokens (rows of the token embedding and of the tied output layer)"));
  v.field(
      key("dropout", m.gpt.dropout)
          .applies_to({"gpt"})
          .in(Range{0, 1, false, true})
          .doc("dropout after the embeddings, on attention weights and on each residual branch"));
  v.field(key("bias", m.gpt.bias)
              .applies_to({"gpt"})
              .doc("biases in the Linear and LayerNorm layers (GPT-2: true)"));
  v.field(key("activation", m.gpt.activation)
              .applies_to({"gpt"})
              .one_of({"gelu", "gelu_tanh"})
              .optional_output()
              .default_text("gelu")
              .doc("the MLP's activation: `gelu` (exact, nanoGPT's) or `gelu_tanh` (the tanh "
                   "approximation, Hugging Face GPT-2's `gelu_new`)"));
  v.field(key("layer_norm_eps", m.gpt.layer_norm_eps)
              .applies_to({"gpt"})
              .positive()
              .optional_output()
              .default_text("1e-5")
              .doc("every LayerNorm's epsilon (Hugging Face GPT-2's `layer_norm_epsilon`)"));
  v.rule({"n_head",
          {"gpt"},
          [&m] { return m.gpt.n_head > 0 && m.gpt.n_embd % m.gpt.n_head == 0; },
          "must divide n_embd"});
  v.field(key("activation_checkpointing", m.gpt.activation_checkpointing)
              .applies_to({"gpt"})
              .optional_output()
              .default_text("false")
              .doc("recompute these blocks' activations in backward instead of keeping them "
                   "(`torch.utils.checkpoint`, non-reentrant: the same gradients, less memory, "
                   "more compute): `true` for every block, or a list of block indices"));
  v.rule({"activation_checkpointing",
          {"gpt"},
          [&m] {
            for (const int64_t b : m.gpt.activation_checkpointing.blocks) {
              if (b >= m.gpt.n_layer) return false;
            }
            return true;
          },
          "block indices must be < model.n_layer"});
  v.field(key("checkpoint_keep_attention", m.gpt.checkpoint_keep_attention)
              .applies_to({"gpt"})
              .optional_output()
              .doc("selective activation checkpointing: each checkpointed block keeps its "
                   "attention output (n_embd + n_head values per position) and its "
                   "recomputation skips the attention kernel; the same gradients, a little "
                   "more memory, less time than recomputing all"));
  v.rule(
      {"checkpoint_keep_attention",
       {"gpt"},
       [&m] { return !m.gpt.checkpoint_keep_attention || !m.gpt.activation_checkpointing.empty(); },
       "needs model.activation_checkpointing"});
  v.field(
      key("fused_head_loss", m.gpt.fused_head_loss)
          .applies_to({"gpt"})
          .optional_output()
          .doc("compute the cross-entropy loss with the output layer in chunks of positions "
               "(`linear_cross_entropy`), never holding the [batch x block_size, vocab_size] "
               "logits or their gradient; needs loss.type cross_entropy without class weights"));
}

// The dataset's keys (runner/data/data.h and config.h: the options structs), in resolved.yaml's
// order: the file and synthetic datasets' keys, then the loader's (DataConfig's own members), then
// the token datasets'. A key whose documentation differs by dataset is one row per dataset.
inline const std::vector<VariantKey>& data_keys_before_loader() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto samples = [](const char* type) {
    return VariantKey{.name = "samples", .help = "examples", .min_int = 1, .only = {type}};
  };
  const auto noise = [](const char* type, const char* help) {
    return VariantKey{.name = "noise", .range = Range{0, inf}, .help = help, .only = {type}};
  };
  static const std::vector<VariantKey> keys = {
      samples("teacher"),
      samples("sine"),
      samples("spirals"),
      noise("teacher", "std of Gaussian noise on the targets"),
      noise("sine", "std of Gaussian noise on the targets"),
      noise("spirals", "std of Gaussian noise on each coordinate"),
      {.name = "in_features",
       .help = "inputs `[in_features]` of the fixed random teacher MLP",
       .min_int = 1},
      {.name = "hidden", .help = "teacher's width", .min_int = 1},
      {.name = "out_features", .help = "targets `[out_features]`", .min_int = 1},
      {.name = "x_min", .help = "y = sin(x), x uniform in [x_min, x_max]; inputs `[1]`"},
      {.name = "x_max", .help = "see `x_min`"},
      {.name = "turns",
       .range = Range{0, inf, true, false},
       .help = "turns of each of the two spirals; inputs `[2]`, int64 labels in {0, 1}"},
      {.name = "path", .help = "the CSV file", .only = {"csv"}, .required = true},
      {.name = "header",
       .help = "the first row is a header; `auto`: detected (a non-numeric field)"},
      {.name = "target_columns",
       .help = "header names or 0-based indices",
       .default_text = "the last column"},
      {.name = "input_columns",
       .help = "header names or 0-based indices",
       .default_text = "the other columns"},
      {.name = "target_dtype",
       .help = "`int64`: class labels, then exactly one target column",
       .choices = {"float32", "int64"}},
      {.name = "delimiter", .help = "field separator"},
      {.name = "path", .help = "the file", .only = {"safetensors"}, .required = true},
      {.name = "inputs", .help = "tensor name of the inputs (first dim: examples)"},
      {.name = "targets", .help = "tensor name of the targets"},
      {.name = "images", .help = "IDX images file (`train-images-idx3-ubyte`)", .required = true},
      {.name = "labels", .help = "IDX labels file", .required = true},
      {.name = "flatten", .help = "images as `[784]` instead of `[1, 28, 28]`"},
      {.name = "limit", .help = "keep the first N examples (0: all)", .min_int = 0},
  };
  return keys;
}

inline const std::vector<VariantKey>& data_keys_after_loader() {
  static const std::vector<VariantKey> keys = {
      {.name = "path",
       .help = "a text file, one token per byte (the byte tokenizer); memory-mapped",
       .only = {"text"},
       .required = true},
      {.name = "path",
       .help = "nanoGPT's `train.bin`: little-endian uint16 token ids; memory-mapped",
       .only = {"tokens_bin"},
       .required = true},
      {.name = "val_path",
       .help = "nanoGPT's `val.bin`, evaluated in consecutive blocks (instead of `val_split`)",
       .optional = true,
       .default_text = "none"},
      {.name = "tokenizer",
       .help = "the BPE tokenizer the ids come from (`tokenizer.json`, `vocab.json` with "
               "`merges.txt` beside it, or their folder): `mantissa generate` encodes the prompt "
               "and decodes with it, and model.vocab_size must hold its vocabulary",
       .optional = true,
       .default_text = "none",
       .only = {"tokens_bin"}},
      {.name = "block_size",
       .help = "T: examples are input `[T]` and target `[T]` (the next tokens), int64; "
               "training blocks start at random offsets drawn from `seed`, epoch and index",
       .min_int = 1},
      {.name = "val_blocks",
       .help = "evaluate on the first N consecutive blocks of the validation part (0: all)",
       .min_int = 0},
  };
  return keys;
}

template <typename V>
void describe(V& v, DataConfig& d) {
  v.field(key("type", d.type).selector().one_of(kDataTypes).doc("the dataset"));
  d.select();
  variant_keys(v, d.options, kDataTypes, data_keys_before_loader(), [&](const VariantKey& row) {
    const std::string_view name = row.name;
    if (name == "x_max") {
      v.rule({"x_max",
              {"sine"},
              [&d] {
                const auto* s = std::get_if<SineOptions>(&d.options);
                return s == nullptr || s->x_max > s->x_min;
              },
              "must be greater than data.x_min"});
    }
  });
  v.field(key("batch_size", d.batch_size).at_least(1).doc("examples per step"));
  v.field(key("shuffle", d.shuffle)
              .doc("reshuffle every epoch (a pure function of seed and epoch: resumable)"));
  v.field(key("seed", d.seed)
              .doc("generates synthetic data, shuffles, and chooses the validation split"));
  v.field(key("val_split", d.val_split)
              .in(Range{0, 1, false, true})
              .doc("fraction held out for evaluation (`eval_every`, `mantissa eval`)"));
  v.field(key("drop_last", d.drop_last).doc("drop a final partial batch"));
  variant_keys(v, d.options, kDataTypes, data_keys_after_loader(), [&](const VariantKey& row) {
    const std::string_view name = row.name;
    if (name == "val_path") {
      v.rule({"val_path",
              {"tokens_bin"},
              [&d] { return d.val_path().empty() || d.val_split == 0; },
              "needs data.val_split: 0 (one validation source)"});
    }
  });
}

// The loss's keys (config.h: the loss structs).
inline const std::vector<VariantKey>& loss_keys() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::vector<VariantKey> keys = {
      {.name = "label_smoothing", .range = Range{0, 1}, .help = "as PyTorch's"},
      {.name = "ignore_index",
       .help = "examples with this label are skipped by the loss (as in PyTorch), and every data "
               "type reads it (see 'Labels the loss skips'); every other label must be a class of "
               "the model, and at least one example must have one"},
      {.name = "pos_weight",
       .range = Range{0, inf},
       .help = "weight of the positive term, one value or one per output (the model's last "
               "output dim), as PyTorch's `BCEWithLogitsLoss(pos_weight=...)`",
       .optional = true,
       .default_text = "none"},
      {.name = "weight",
       .range = Range{0, inf},
       .help = "cross_entropy: one weight per class (the mean divides by the weights of the "
               "labels that count); bce, bce_with_logits: one value or one per output, "
               "scaling each element's loss; as PyTorch's `weight=`",
       .optional = true,
       .default_text = "none"},
      {.name = "beta",
       .range = Range{0, inf},
       .help = "where the loss turns from quadratic to linear (0: l1)"},
      {.name = "delta",
       .range = Range{0, inf, true, false},
       .help = "where the loss turns from quadratic to linear"},
      {.name = "log_target", .help = "the targets are log-probabilities"},
  };
  return keys;
}

template <typename V>
void describe(V& v, LossConfig& l) {
  v.field(key("type", l.type)
              .selector()
              .one_of(kLossTypes)
              .doc("`cross_entropy`: int64 labels, output `[classes]`; the others: float targets "
                   "shaped like the output (`bce`: the output is a probability, `kl_div`: a "
                   "log-probability)"));
  l.select();
  v.field(key("reduction", l.reduction)
              .one_of({"mean", "sum", "batchmean"})
              .doc("over the batch; `batchmean` (kl_div only) divides the sum by the batch size, "
                   "where `mean` divides by the number of elements"));
  variant_keys(v, l.options, kLossTypes, loss_keys(), [](const VariantKey&) {});
}

// The optimizer's keys (nn/optim/*.h: the options structs).
inline const std::vector<VariantKey>& optimizer_keys() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::vector<VariantKey> keys = {
      {"lr", Range{0, inf, true, false}, "learning rate"},
      {"weight_decay", Range{0, inf}, "L2 penalty (adamw, muon: decoupled)"},
      {"maximize", Range{}, "ascend the objective"},
      {"momentum", Range{0, inf}, "momentum"},
      {"dampening", Range{0, 1}, "dampening"},
      {"nesterov", Range{}, "Nesterov momentum"},
      // Muon's AdamW group takes its betas from optimizer.adamw.
      {"betas",
       Range{0, 1, false, true},
       "running-average coefficients of the gradient and its square",
       {"muon"}},
      {"eps", Range{0, inf, true, false}, "added to the denominator", {"muon"}},
      {.name = "eps",
       .range = Range{0, inf, true, false},
       .help = "the update is divided by max(its Frobenius norm, eps) before the Newton–Schulz "
               "iteration",
       .only = {"muon"}},
      {"amsgrad", Range{}, "the AMSGrad variant"},
      {"alpha", Range{0, 1}, "smoothing constant of the squared-gradient average"},
      {"centered", Range{},
       "divide by the gradient's estimated variance rather than its second moment"},
      {"lr_decay", Range{0, inf}, "lr / (1 + (step - 1) * lr_decay)"},
      {"initial_accumulator_value", Range{0, inf}, "starting value of the squared-gradient sum"},
      {"momentum_decay", Range{0, inf}, "NAdam's momentum decay psi"},
      {"decoupled_weight_decay",
       Range{},
       "decay the parameter (`param *= 1 - lr * weight_decay`, as AdamW) instead of adding "
       "`weight_decay * param` to the gradient (PyTorch 2's option; adamw always does)",
       {"adamw"},
       true},
      {.name = "ns_coefficients",
       .help = "(a, b, c) of the Newton–Schulz iteration X = a X + (b G + c G G) X, G = X X^T"},
      {.name = "ns_steps", .help = "Newton–Schulz iterations", .min_int = 1, .max_int = 99},
      {.name = "adjust_lr_fn",
       .help = "the lr of a rows x cols matrix: `original` lr * sqrt(max(1, rows / cols)), "
               "`match_rms_adamw` lr * 0.2 * sqrt(max(rows, cols)) (AdamW's lr and weight "
               "decay carry over), `spectral_unclamped` lr * sqrt(rows / cols)"},
      {.name = "ns_float32",
       .help = "run the iteration in float32 instead of PyTorch's bfloat16 (slower; to compare "
               "with a float32 reference)"},
  };
  return keys;
}

// Each optimizer's default options, in kOptimizerTypes' order.
inline const std::vector<OptimizerOptions>& optimizer_defaults() {
  return variant_defaults<OptimizerOptions>();
}

// optimizer.adamw (type muon): the AdamW group's options.
template <typename V>
void describe(V& v, optim::AdamWOptions& a) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  v.field(key("lr", a.lr).in(Range{0, inf, true, false}).doc("learning rate"));
  v.field(key("betas", a.betas)
              .in(Range{0, 1, false, true})
              .doc("running-average coefficients of the gradient and its square"));
  v.field(key("eps", a.eps).positive().doc("added to the denominator"));
  v.field(key("weight_decay", a.weight_decay).non_negative().doc("decoupled weight decay"));
}

template <typename V>
void describe(V& v, OptimizerConfig& o) {
  v.field(key("type", o.type).selector().one_of(kOptimizerTypes).doc("the optimizer"));
  o.select();
  variant_keys(v, o.options, kOptimizerTypes, optimizer_keys(), [&](const VariantKey& row) {
    const std::string_view name = row.name;
    if (name == "nesterov") {
      v.rule({"nesterov",
              {"sgd"},
              [&o] {
                const auto* s = std::get_if<optim::SGDOptions>(&o.options);
                return s == nullptr || !s->nesterov || (s->momentum > 0 && s->dampening == 0);
              },
              "sgd: needs optimizer.momentum > 0 and dampening 0"});
    }
  });
  v.section("adamw", o.adamw,
            "The AdamW group of `muon`: the parameters Muon is not for (see `muon_params`).",
            {"muon"});
  v.field(key("muon_params", o.muon_params)
              .applies_to({"muon"})
              .optional_output()
              .default_text("the rule")
              .doc("names of parameters for Muon (`*` matches any run of characters: "
                   "`transformer.h.*.mlp.*`); the rule without them: the 2-D weights of the "
                   "hidden layers, not embeddings, the first and last layers, biases or norm "
                   "gains"));
  v.field(key("adamw_params", o.adamw_params)
              .applies_to({"muon"})
              .optional_output()
              .default_text("the rule")
              .doc("names of parameters for the AdamW group, overriding the rule likewise"));
  // Muon's groups come from the rule and muon_params / adamw_params, each with its own
  // weight_decay.
  std::vector<std::string> grouped_by_ndim;
  for (const auto& t : kOptimizerTypes) {
    if (t != "muon") grouped_by_ndim.push_back(t);
  }
  v.field(key("decay_min_ndim", o.decay_min_ndim)
              .applies_to(grouped_by_ndim)
              .at_least(0)
              .optional_output()
              .doc("apply `weight_decay` only to parameters of at least this many dimensions "
                   "(2: matrices and embeddings, not biases or norm gains, as nanoGPT); 0: to "
                   "all"));
  v.field(key("state_dtype", o.state_dtype)
              .applies_to({"adam", "adamw"})
              .one_of({"bfloat16"})
              .optional_output()
              .default_text("the parameters'")
              .doc("the dtype of the moments `exp_avg` and `exp_avg_sq`: `bfloat16` halves their "
                   "memory (2 bytes each per parameter instead of 4)"));
  v.field(key("stochastic_rounding", o.stochastic_rounding)
              .applies_to({"adam", "adamw"})
              .optional_output()
              .doc("round every bfloat16 store of the step (moments, and parameters with "
                   "`param_dtype: bfloat16`) up or down at random in proportion, unbiased, with "
                   "bits from `seed`, the parameter and the step (reproducible, resumable)"));
}

// The lr schedule's keys (config.h: the schedule structs).
inline const std::vector<VariantKey>& schedule_keys() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::vector<VariantKey> keys = {
      {.name = "step_size",
       .help = "multiply the lr by `gamma` every `step_size` steps",
       .min_int = 1},
      {.name = "gamma",
       .range = Range{0, inf, true, false},
       .help = "the factor (`exponential`: every step)"},
      {.name = "milestones",
       .help = "steps at which the lr is multiplied by `gamma`",
       .optional = true,
       .default_text = "none (required for multistep)"},
      {.name = "warmup_steps", .help = "linear warmup from lr/W to lr", .min_int = 0},
      {.name = "total_steps", .help = "end of the decay (0: the run's total steps)", .min_int = 0},
      {.name = "min_lr",
       .range = Range{0, inf},
       .help = "`cosine`: the lr at and after `total_steps`; `cosine_annealing`: eta_min; "
               "`plateau`: the lr is never reduced below it"},
      {.name = "start_factor",
       .range = Range{0, 1, true, false},
       .help = "lr factor of the first step"},
      {.name = "end_factor", .range = Range{0, 1}, .help = "lr factor from `total_iters` on"},
      {.name = "total_iters", .help = "steps from `start_factor` to `end_factor`", .min_int = 0},
      {.name = "max_lr", .range = Range{0, inf}, .help = "peak lr (0: optimizer.lr)"},
      {.name = "pct_start",
       .range = Range{0, 1},
       .help = "fraction of the steps spent raising the lr"},
      {.name = "anneal_strategy", .help = "shape of each phase", .choices = {"cos", "linear"}},
      {.name = "three_phase", .help = "back down to the start lr before the final decay"},
      {.name = "div_factor",
       .range = Range{0, inf, true, false},
       .help = "start lr = max_lr / div_factor"},
      {.name = "final_div_factor",
       .range = Range{0, inf, true, false},
       .help = "final lr = start lr / final_div_factor"},
      {.name = "cycle_momentum",
       .help = "move the momentum (sgd, rmsprop; muon's Muon group) or beta1 (adam, adamw, nadam, "
               "radam; muon's AdamW group) against "
               "the lr"},
      {.name = "base_momentum", .range = Range{0, 1}, .help = "momentum at the lr's peak"},
      {.name = "max_momentum", .range = Range{0, 1}, .help = "momentum at the lr's lowest"},
      {.name = "mode",
       .help = "whether the watched loss should fall or rise",
       .choices = {"min", "max"}},
      {.name = "factor", .range = Range{0, 1, false, true}, .help = "lr multiplier on a plateau"},
      {.name = "patience",
       .help = "steps without improvement before the lr is reduced",
       .min_int = 0},
      {.name = "threshold",
       .range = Range{0, inf},
       .help = "smallest change that counts as an improvement"},
      {.name = "threshold_mode",
       .help = "`threshold` relative to the best value or absolute",
       .choices = {"rel", "abs"}},
      {.name = "cooldown",
       .help = "steps to wait after a reduction before counting again",
       .min_int = 0},
      {.name = "eps", .range = Range{0, inf}, .help = "lr changes smaller than this are not made"},
  };
  return keys;
}

template <typename V>
void describe(V& v, ScheduleConfig& s) {
  v.field(key("type", s.type)
              .selector()
              .one_of(kScheduleTypes)
              .doc("lr schedule (PyTorch's StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, "
                   "LinearLR, OneCycleLR, ReduceLROnPlateau; `cosine`: linear warmup then cosine "
                   "decay)"));
  s.select();
  variant_keys(v, s.options, kScheduleTypes, schedule_keys(), [&](const VariantKey& row) {
    const std::string_view name = row.name;
    if (name == "total_steps") {
      v.rule({"warmup_steps",
              {"cosine"},
              [&s] {
                const auto* c = std::get_if<CosineSchedule>(&s.options);
                return c == nullptr || c->total_steps == 0 || c->warmup_steps <= c->total_steps;
              },
              "must be <= schedule.total_steps"});
    }
  });
}

template <typename V>
void describe(V& v, ScalerConfig& g) {
  v.field(key("enabled", g.enabled).doc("`auto`: on for `precision: float16` only"));
  v.field(key("init_scale", g.options.init_scale).positive().doc("starting scale"));
  v.field(key("growth_factor", g.options.growth_factor)
              .in(Range{1, 1e300, true, false})
              .doc("multiply the scale after `growth_interval` clean steps"));
  v.field(key("backoff_factor", g.options.backoff_factor)
              .in(Range{0, 1, false, true})
              .doc("multiply the scale on an overflowing step (which is skipped); 0 drops it to "
                   "`min_scale`"));
  v.field(key("growth_interval", g.options.growth_interval)
              .at_least(0)
              .doc("clean steps between growths (0: never grow)"));
  v.field(key("min_scale", g.options.min_scale)
              .non_negative()
              .doc("never back off below this (0: no floor)"));
  v.field(key("hysteresis", g.options.hysteresis)
              .at_least(1)
              .doc("back off only on the N-th consecutive overflowing step"));
  v.rule({"min_scale",
          {},
          [&g] { return g.options.min_scale <= g.options.init_scale; },
          "must be <= scaler.init_scale"});
}

template <typename V>
void describe(V& v, DistributedConfig& d) {
  v.field(key("nproc", d.nproc)
              .between(1, 1024)
              .doc("local ranks `mantissa train` starts (as `--nproc`); ignored when torchrun, "
                   "mpirun or srun started the process"));
  v.field(key("backend", d.backend)
              .one_of({"auto", "gloo", "nccl"})
              .doc("collectives: `gloo` (CPU tensors), `nccl` (CUDA tensors); `auto` picks by "
                   "`device`"));
  v.field(key("timeout_s", d.timeout_s)
              .positive()
              .doc("seconds the rendezvous, and each collective, may take before the rank stops "
                   "with an error"));
  v.field(key("store_path", d.store_path)
              .optional_output()
              .doc("where the ranks meet: a directory (shared by every host), or "
                   "`redis://HOST:PORT`, a Redis server every host reaches (no shared "
                   "filesystem); default: a fresh directory per launch, or "
                   "`MANTISSA_STORE_PATH`"));
  v.field(key("rendezvous", d.rendezvous)
              .one_of({"auto", "file", "mpi"})
              .doc("where the ranks meet: `file` (the store directory), `mpi` (MPI collectives, "
                   "under mpirun; needs a build with MPI); `auto` is `mpi` under mpirun when "
                   "built with MPI, else `file`"));
  v.field(key("drop_last", d.drop_last)
              .doc("each rank's shard drops the tail of an epoch that does not divide by the "
                   "ranks, instead of repeating examples from its start"));
  v.field(key("bucket_cap_mb", d.bucket_cap_mb)
              .positive()
              .doc("MiB of gradients per allreduce bucket (after the first)"));
  v.field(key("first_bucket_mb", d.first_bucket_mb)
              .positive()
              .doc("MiB of the first bucket, so communication starts early in backward"));
  v.field(key("find_unused_parameters", d.find_unused_parameters)
              .doc("parameters without a gradient in an iteration count as zero gradients"));
  v.field(key("static_graph", d.static_graph)
              .doc("the parameters used in the first iteration are used in every iteration"));
  v.field(key("broadcast_buffers", d.broadcast_buffers)
              .doc("rank 0's buffers (batch norm statistics) are copied to every rank before "
                   "each forward"));
  v.field(key("zero_stage", d.zero_stage)
              .between(0, 2)
              .doc("ZeRO: `1` shards the optimizer state (and master weights) over the ranks, `2` "
                   "also the gradients (reduce-scattered instead of allreduced); `0`: every rank "
                   "keeps all of it. Checkpoints hold the whole state, so a run resumes on any "
                   "number of ranks"));
}

template <typename V>
void describe(V& v, Float8TrainingConfig& f) {
  v.field(key("recipe", f.recipe)
              .one_of({"none", "tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed"})
              .doc("run the products of the model's Linear layers in float8 with torchao's recipe "
                   "(see docs/mixed-precision.md): `tensorwise` (one scale per tensor, e5m2 "
                   "gradients), `rowwise` (a power-of-two scale per row, all e4m3), "
                   "`rowwise_with_gw_hp` (rowwise, the weight gradient in high precision); or "
                   "Transformer Engine's `delayed` (one scale per tensor from the absolute maxima "
                   "of earlier steps, e5m2 gradients); `none`: off"));
  v.field(key("amax_history_len", f.amax_history_len)
              .at_least(1)
              .omitted_when(Float8TrainingConfig{}.amax_history_len)
              .doc("`delayed`: steps of absolute maxima each scale is made from"));
  v.field(key("amax_compute_algo", f.amax_compute_algo)
              .one_of({"max", "most_recent"})
              .omitted_when(Float8TrainingConfig{}.amax_compute_algo)
              .doc("`delayed`: the scale's amax is the history's largest (`max`) or the last "
                   "step's (`most_recent`)"));
  v.field(key("margin", f.margin)
              .in(Range{0, 64})
              .omitted_when(Float8TrainingConfig{}.margin)
              .doc("`delayed`: scales are made for a maximum of fp8_max / 2^margin, leaving room "
                   "for growth"));
  v.field(key("stats", f.stats)
              .omitted_when(false)
              .doc("each logged step records, per float8 layer and for its input, weight and "
                   "output gradient, the values its casts saturated and flushed to zero, the "
                   "largest absolute value and (`delayed`) the scale, in metrics.jsonl and "
                   "TensorBoard; summary.json names the layer that saturated first (a pass over "
                   "each cast tensor)"));
  v.field(key("layers", f.layers)
              .optional_output()
              .default_text("every Linear layer whose features are multiples of 16")
              .doc("the Linear layers to convert, by module name (`*` matches any run of "
                   "characters: `blocks.*.mlp.*`); each pattern must name a Linear layer, and "
                   "each layer named must have in and out features that are multiples of 16"));
  v.field(key("skip", f.skip)
              .optional_output()
              .doc("Linear layers left in high precision, by module name as `layers`"));
}

std::string check_device(const std::string& device);  // config.cpp

template <typename V>
void describe(V& v, Config& c) {
  v.field(key("name", c.name)
              .checked(
                  [](const std::string& s) {
                    // The run directory is runs/<name>-<YYYYmmdd-HHMMSS>[-N]: a file name.
                    return s.empty() || s.find('/') != std::string::npos || s.size() > 200
                               ? "must be a non-empty name of at most 200 bytes without '/'"
                               : "";
                  },
                  "no `/`, at most 200 bytes")
              .default_text("file stem (`toy`)")
              .doc("run name; the default run directory is `runs/<name>-<YYYYmmdd-HHMMSS>`"));
  v.field(key("seed", c.seed).doc("seeds the engine's generators: initial weights, dropout"));
  v.field(key("deterministic", c.deterministic)
              .doc("refuse, before anything runs, a model/device combination that is not "
                   "run-to-run reproducible (see [Determinism](#determinism)); `false`: no "
                   "check"));
  v.field(key("device", c.device)
              .checked(check_device, "`auto`, `cpu`, `cuda`, `cuda:N`")
              .doc("`auto` is `cuda:0` when present, else `cpu`"));
  v.field(key("precision", c.precision)
              .one_of({"float32", "tf32", "float16", "bfloat16"})
              .doc("autocast precision of the forward pass (parameters stay float32)"));
  v.field(key("master_weights", c.master_weights)
              .doc("optimizer keeps float32 master copies of float16/bfloat16 parameters"));
  v.field(key("param_dtype", c.param_dtype)
              .one_of({"float32", "bfloat16"})
              .optional_output()
              .default_text("float32")
              .doc("the dtype the parameters (and their gradients) are stored in; `bfloat16` "
                   "without master copies is pure bfloat16 training (with `precision: bfloat16`; "
                   "pair it with `optimizer.stochastic_rounding`). `master_weights: true` stores "
                   "them in `precision`'s dtype instead"));
  v.rule({"param_dtype",
          {},
          [&c] {
            return c.param_dtype != "bfloat16" || (c.precision == "bfloat16" && !c.master_weights);
          },
          "bfloat16 needs precision: bfloat16 and master_weights: false"});
  v.either(key("steps", c.steps)
               .at_least(1)
               .doc("stop after this many optimizer steps (taken or skipped)"),
           key("epochs", c.epochs)
               .at_least(1)
               .default_text("—")
               .doc("instead of `steps`: stop after this many passes over the training data "
                    "(epochs × batches per epoch must fit in int64)"));
  v.field(key("log_every", c.log_every)
              .at_least(0)
              .doc("steps between metrics records (0: only the last step)"));
  v.field(key("tensorboard", c.tensorboard)
              .omitted_when(true)
              .doc("also write the logged metrics as TensorBoard scalars in `tensorboard/` "
                   "(`tensorboard --logdir RUN_DIR`)"));
  v.field(key("eval_every", c.eval_every)
              .at_least(0)
              .doc("steps between evaluations on the validation split (0: at the end only)"));
  v.field(key("checkpoint_every", c.checkpoint_every)
              .at_least(0)
              .doc("steps between checkpoints (0: only at the end)"));
  v.field(key("keep_last", c.keep_last)
              .at_least(0)
              .doc("checkpoints kept in `checkpoints/` "
                   "(0: all)"));
  v.field(key("clip_grad_norm", c.clip_grad_norm)
              .non_negative()
              .doc("clip the total 2-norm of the (unscaled) gradients; 0: off"));
  v.field(key("cuda_graphs", c.cuda_graphs)
              .optional_output()
              .doc("capture the training step (forward, backward, clipping, loss scaler, fused "
                   "optimizer) into a CUDA graph after warm-up steps and replay it; steps that "
                   "cannot be captured run eagerly, and summary.json's `cuda_graphs` says how many "
                   "and why"));
  v.field(key("grad_accum_steps", c.grad_accum_steps)
              .at_least(0)
              .optional_output()
              .default_text("`1`")
              .doc("micro-batches of `data.batch_size` per optimizer step, each micro-batch's loss "
                   "divided by their number (0 and 1: no accumulation)"));
  v.field(key("peak_tflops", c.peak_tflops)
              .non_negative()
              .optional_output()
              .default_text("from the GPU table; none on the CPU")
              .doc("the device's peak TFLOP/s for `mfu` in the metrics (model FLOPs utilisation), "
                   "overriding the built-in GPU table; 0: the table (no `mfu` on the CPU)"));
  v.field(key("sample_tokens", c.sample_tokens)
              .at_least(0)
              .optional_output()
              .doc("after training a byte-level GPT (`model.preset: gpt`, `data.type: text`), "
                   "print this many sampled bytes, as `mantissa generate` with `--seed` the run's "
                   "`seed`; 0: none"));
  v.field(key("sample_prompt", c.sample_prompt)
              .optional_output()
              .default_text("a newline")
              .doc("the text `sample_tokens` continues"));
  v.field(key("sample_top_k", c.sample_top_k)
              .at_least(0)
              .optional_output()
              .doc("sample among the K most likely bytes (0: all)"));
  v.section("model", c.model, "Either a preset or a layer list, plus optional initial weights.");
  v.section("data", c.data, "");
  v.section("loss", c.loss, "");
  v.section("optimizer", c.optimizer, "");
  v.section("schedule", c.schedule, "");
  v.section("scaler", c.scaler, "Dynamic loss scaling, as `torch.amp.GradScaler`.");
  v.section("distributed", c.distributed,
            "Data-parallel training over several processes (docs/distributed.md). Left out of "
            "`resolved.yaml` while every key has its default.");
  v.section("float8", c.float8,
            "Float8 training of the model's Linear layers (docs/mixed-precision.md). Left out of "
            "`resolved.yaml` while every key has its default.");
}

}  // namespace mantissa::runner::schema
