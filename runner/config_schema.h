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
//   v.section(name, S&, help)                a nested map, walked with describe(v, S&)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "runner/config.h"

namespace mantissa::runner::schema {

// A closed or open interval for numbers; the message names it ("must be in [0, 1)").
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  bool bounded() const { return std::isfinite(lo) || std::isfinite(hi); }
};

// One key. T is int64_t, uint64_t, double, bool, std::optional<bool> (true/false/auto),
// std::string (free text, or a choice with one_of), DType (a choice), char (one character),
// std::vector<std::string>, std::vector<int64_t> (sizes), std::vector<double> (a number or a
// list), std::pair<double, double> or std::vector<LayerSpec>.
template <typename T>
struct Key {
  Key(const char* name, T& member) : name(name), member(&member) {}

  const char* name;
  T* member;
  std::string help;
  std::vector<std::string> only;  // values of the section's selector it applies to; empty: all
  bool is_selector = false;       // the section's `type`: later keys' `only` refers to its value
  bool is_required = false;
  bool omit_empty = false;  // left out of resolved.yaml while empty
  Range range{};            // numbers, and each number of a list
  int64_t min_int = std::numeric_limits<int64_t>::min();
  int64_t max_int = std::numeric_limits<int64_t>::max();
  std::vector<std::string> choices;                 // std::string and DType
  std::vector<std::pair<std::string, T>> per_type;  // defaults that depend on the selector
  std::function<T()> computed_default;              // a default taken from another key
  std::string default_help;                         // the docs' default column, when not *member
  std::function<std::string(const T&)> check;       // "" or the problem with the value
  std::string check_help;                           // the docs' range column for `check`

  Key& doc(std::string text) { return help = std::move(text), *this; }
  Key& applies_to(std::vector<std::string> types) { return only = std::move(types), *this; }
  Key& selector() { return is_selector = true, *this; }
  Key& required() { return is_required = true, *this; }
  Key& optional_output() { return omit_empty = true, *this; }
  Key& in(Range r) { return range = r, *this; }
  Key& positive() { return in(Range{0, std::numeric_limits<double>::infinity(), true, false}); }
  Key& non_negative() { return in(Range{0, std::numeric_limits<double>::infinity()}); }
  Key& at_least(int64_t lo) { return min_int = lo, *this; }
  Key& between(int64_t lo, int64_t hi) { return min_int = lo, max_int = hi, *this; }
  Key& one_of(std::vector<std::string> c) { return choices = std::move(c), *this; }
  Key& default_for(std::vector<std::string> types, T value) {
    for (auto& t : types) per_type.emplace_back(std::move(t), value);
    return *this;
  }
  Key& default_from(std::function<T()> f, std::string text) {
    computed_default = std::move(f), default_help = std::move(text);
    return *this;
  }
  Key& default_text(std::string text) { return default_help = std::move(text), *this; }
  Key& checked(std::function<std::string(const T&)> f, std::string text) {
    check = std::move(f), check_help = std::move(text);
    return *this;
  }

  bool applies(const std::string& type) const {
    if (only.empty()) return true;
    for (const auto& o : only) {
      if (o == type) return true;
    }
    return false;
  }
};

template <typename T>
Key<T> key(const char* name, T& member) {
  return Key<T>(name, member);
}

// A check across keys, run once the keys before it are read: `ok()` false reports `problem` on
// `key` (the key's value and line in the message).
struct Rule {
  const char* key;
  std::vector<std::string> only;
  std::function<bool()> ok;
  std::string problem;
};

// ---- the declarations ---------------------------------------------------------------------------

inline const std::vector<std::string> kLayerTypes = {
    "linear",      "relu",       "gelu",    "silu",     "mish",
    "hardswish",   "sigmoid",    "tanh",    "dropout",  "layernorm",
    "conv2d",      "maxpool2d",  "flatten", "conv1d",   "adaptive_avg_pool2d",
    "identity",    "leaky_relu", "elu",     "softplus", "batchnorm1d",
    "batchnorm2d", "groupnorm",  "rmsnorm"};

template <typename V>
void describe(V& v, LayerSpec& l) {
  v.field(key("type", l.type).selector().one_of(kLayerTypes).required().doc("the layer"));
  v.field(key("name", l.name)
              .optional_output()
              .checked(
                  [](const std::string& s) {
                    return s.find('.') == std::string::npos ? ""
                                                            : "a layer name cannot contain '.'";
                  },
                  "no '.'")
              .doc("the child's name in parameter names (`head.weight`); default: its index"));
  v.field(key("in", l.in)
              .applies_to({"linear", "conv2d"})
              .required()
              .at_least(1)
              .doc("input features (linear, `[..., in]`) or channels (conv2d)"));
  v.field(key("out", l.out)
              .applies_to({"linear", "conv2d"})
              .required()
              .at_least(1)
              .doc("output features or channels"));
  v.field(key("kernel", l.kernel)
              .applies_to({"conv2d", "maxpool2d"})
              .required()
              .at_least(1)
              .doc("square kernel size"));
  v.field(key("stride", l.stride).applies_to({"conv2d"}).at_least(1).doc("stride"));
  v.field(key("stride", l.stride)
              .applies_to({"maxpool2d"})
              .at_least(1)
              .default_from([&l] { return l.kernel; }, "`kernel`")
              .doc("stride"));
  v.field(key("padding", l.padding)
              .applies_to({"conv2d", "maxpool2d"})
              .at_least(0)
              .doc("zero "
                   "padding"));
  v.rule({"padding",
          {"maxpool2d"},
          [&l] { return 2 * l.padding <= l.kernel; },
          "must be at most half of kernel"});
  v.field(key("bias", l.bias).applies_to({"linear", "conv2d"}).doc("learn an additive bias"));
  v.field(key("approximate", l.approximate)
              .applies_to({"gelu"})
              .one_of({"none", "tanh"})
              .doc("the tanh approximation of GELU, or none"));
  v.field(key("p", l.p)
              .applies_to({"dropout"})
              .in(Range{0, 1, false, true})
              .doc("probability of zeroing an element; active in training only"));
  v.field(key("shape", l.shape)
              .applies_to({"layernorm"})
              .required()
              .doc("normalized_shape: the trailing dims normalized (an int or a list)"));
  v.field(key("eps", l.eps).applies_to({"layernorm"}).positive().doc("added to the variance"));
  v.field(key("affine", l.affine)
              .applies_to({"layernorm"})
              .doc("learn elementwise weight and bias (elementwise_affine)"));
  v.field(key("start_dim", l.start_dim)
              .applies_to({"flatten"})
              .between(-8, 8)
              .doc("first dim flattened; dims count the batch dimension, as `torch.nn.Flatten`"));
  v.field(key("end_dim", l.end_dim)
              .applies_to({"flatten"})
              .between(-8, 8)
              .doc("last dim "
                   "flattened"));
  // conv1d ([channels, length] per example) and adaptive_avg_pool2d; identity has no keys.
  v.field(key("in", l.in).applies_to({"conv1d"}).required().at_least(1).doc("input channels"));
  v.field(key("out", l.out).applies_to({"conv1d"}).required().at_least(1).doc("output channels"));
  v.field(key("kernel", l.kernel).applies_to({"conv1d"}).required().at_least(1).doc("kernel size"));
  v.field(key("stride", l.stride).applies_to({"conv1d"}).at_least(1).doc("stride"));
  v.field(key("padding", l.padding).applies_to({"conv1d"}).at_least(0).doc("zero padding"));
  v.field(key("bias", l.bias).applies_to({"conv1d"}).doc("learn an additive bias"));
  v.field(key("output_size", l.output_size)
              .applies_to({"adaptive_avg_pool2d"})
              .required()
              .doc("output height and width (an int for both, or a list [h, w])"));
  v.rule({"output_size",
          {"adaptive_avg_pool2d"},
          [&l] {
            const auto& o = l.output_size;
            return (o.size() == 1 || o.size() == 2) && o.front() >= 1 && o.back() >= 1;
          },
          "must be one or two sizes, each >= 1"});
  v.field(key("negative_slope", l.negative_slope)
              .applies_to({"leaky_relu"})
              .doc("the slope for negative inputs"));
  v.field(key("alpha", l.alpha).applies_to({"elu"}).doc("the value ELU saturates to, negated"));
  v.field(
      key("beta", l.beta).applies_to({"softplus"}).positive().doc("log(1 + exp(beta x)) / beta"));
  v.field(key("threshold", l.threshold)
              .applies_to({"softplus"})
              .doc("above it (in beta x) softplus is the identity"));
  // The normalisation layers of nn/norm.h.
  v.field(key("features", l.features)
              .applies_to({"batchnorm1d", "batchnorm2d", "groupnorm"})
              .required()
              .at_least(1)
              .doc("channels: num_features (batchnorm) or num_channels (groupnorm)"));
  v.field(key("groups", l.groups)
              .applies_to({"groupnorm"})
              .required()
              .at_least(1)
              .doc("num_groups: the channels are normalised in this many groups"));
  v.field(key("momentum", l.momentum)
              .applies_to({"batchnorm1d", "batchnorm2d"})
              .in(Range{0, 1, true, false})
              .doc("weight of each batch in the running mean and variance"));
  v.field(key("eps", l.eps)
              .applies_to({"batchnorm1d", "batchnorm2d", "groupnorm"})
              .positive()
              .doc("added to the variance"));
  v.field(key("eps", l.eps)
              .applies_to({"rmsnorm"})
              .positive()
              .default_from([] { return double(std::numeric_limits<float>::epsilon()); },
                            "float32's machine epsilon")
              .doc("added to the mean square"));
  v.field(key("affine", l.affine)
              .applies_to({"batchnorm1d", "batchnorm2d", "groupnorm", "rmsnorm"})
              .doc("learn per-channel weight and bias (rmsnorm: weight only)"));
  v.field(key("shape", l.shape)
              .applies_to({"rmsnorm"})
              .required()
              .doc("normalized_shape: the trailing dims normalized (an int or a list)"));
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
  v.rule({"n_head",
          {"gpt"},
          [&m] { return m.gpt.n_head > 0 && m.gpt.n_embd % m.gpt.n_head == 0; },
          "must divide n_embd"});
}

template <typename V>
void describe(V& v, DataConfig& d) {
  v.field(key("type", d.type)
              .selector()
              .one_of({"teacher", "sine", "spirals", "csv", "safetensors", "mnist", "text",
                       "tokens_bin"})
              .doc("the dataset"));
  v.field(key("samples", d.teacher.samples).applies_to({"teacher"}).at_least(1).doc("examples"));
  v.field(key("samples", d.sine.samples).applies_to({"sine"}).at_least(1).doc("examples"));
  v.field(key("samples", d.spirals.samples).applies_to({"spirals"}).at_least(1).doc("examples"));
  v.field(key("noise", d.teacher.noise)
              .applies_to({"teacher"})
              .non_negative()
              .doc("std of Gaussian noise on the targets"));
  v.field(key("noise", d.sine.noise)
              .applies_to({"sine"})
              .non_negative()
              .doc("std of Gaussian noise on the targets"));
  v.field(key("noise", d.spirals.noise)
              .applies_to({"spirals"})
              .non_negative()
              .doc("std of Gaussian noise on each coordinate"));
  v.field(key("in_features", d.teacher.in_features)
              .applies_to({"teacher"})
              .at_least(1)
              .doc("inputs `[in_features]` of the fixed random teacher MLP"));
  v.field(
      key("hidden", d.teacher.hidden).applies_to({"teacher"}).at_least(1).doc("teacher's width"));
  v.field(key("out_features", d.teacher.out_features)
              .applies_to({"teacher"})
              .at_least(1)
              .doc("targets `[out_features]`"));
  v.field(key("x_min", d.sine.x_min)
              .applies_to({"sine"})
              .doc("y = sin(x), x uniform in "
                   "[x_min, x_max]; inputs `[1]`"));
  v.field(key("x_max", d.sine.x_max).applies_to({"sine"}).doc("see `x_min`"));
  v.rule({"x_max",
          {"sine"},
          [&d] { return d.sine.x_max > d.sine.x_min; },
          "must be greater than data.x_min"});
  v.field(key("turns", d.spirals.turns)
              .applies_to({"spirals"})
              .positive()
              .doc("turns of each of the two spirals; inputs `[2]`, int64 labels in {0, 1}"));
  v.field(key("path", d.csv.path).applies_to({"csv"}).required().doc("the CSV file"));
  v.field(key("header", d.csv.header)
              .applies_to({"csv"})
              .doc("the first row is a header; `auto`: detected (a non-numeric field)"));
  v.field(key("target_columns", d.csv.target_columns)
              .applies_to({"csv"})
              .default_text("the last column")
              .doc("header names or 0-based indices"));
  v.field(key("input_columns", d.csv.input_columns)
              .applies_to({"csv"})
              .default_text("the other columns")
              .doc("header names or 0-based indices"));
  v.field(key("target_dtype", d.csv.target_dtype)
              .applies_to({"csv"})
              .one_of({"float32", "int64"})
              .doc("`int64`: class labels, then exactly one target column"));
  v.field(key("delimiter", d.csv.delimiter).applies_to({"csv"}).doc("field separator"));
  v.field(key("path", d.safetensors.path).applies_to({"safetensors"}).required().doc("the file"));
  v.field(key("inputs", d.safetensors.inputs)
              .applies_to({"safetensors"})
              .doc("tensor name of the inputs (first dim: examples)"));
  v.field(key("targets", d.safetensors.targets)
              .applies_to({"safetensors"})
              .doc("tensor name of the targets"));
  v.field(key("images", d.mnist.images)
              .applies_to({"mnist"})
              .required()
              .doc("IDX images file (`train-images-idx3-ubyte`)"));
  v.field(key("labels", d.mnist.labels).applies_to({"mnist"}).required().doc("IDX labels file"));
  v.field(key("flatten", d.mnist.flatten)
              .applies_to({"mnist"})
              .doc("images as `[784]` instead of `[1, 28, 28]`"));
  v.field(key("limit", d.mnist.limit)
              .applies_to({"mnist"})
              .at_least(0)
              .doc("keep the first N examples (0: all)"));
  v.field(key("batch_size", d.batch_size).at_least(1).doc("examples per step"));
  v.field(key("shuffle", d.shuffle)
              .doc("reshuffle every epoch (a pure function of seed and epoch: resumable)"));
  v.field(key("seed", d.seed)
              .doc("generates synthetic data, shuffles, and chooses the validation split"));
  v.field(key("val_split", d.val_split)
              .in(Range{0, 1, false, true})
              .doc("fraction held out for evaluation (`eval_every`, `mantissa eval`)"));
  v.field(key("drop_last", d.drop_last).doc("drop a final partial batch"));
  v.field(key("path", d.token_path)
              .applies_to({"text"})
              .required()
              .doc("a text file, one token per byte (the byte tokenizer); memory-mapped"));
  v.field(key("path", d.token_path)
              .applies_to({"tokens_bin"})
              .required()
              .doc("nanoGPT's `train.bin`: little-endian uint16 token ids; memory-mapped"));
  v.field(
      key("val_path", d.token_val_path)
          .applies_to({"tokens_bin"})
          .optional_output()
          .default_text("none")
          .doc("nanoGPT's `val.bin`, evaluated in consecutive blocks (instead of `val_split`)"));
  v.rule({"val_path",
          {"tokens_bin"},
          [&d] { return d.token_val_path.empty() || d.val_split == 0; },
          "needs data.val_split: 0 (one validation source)"});
  v.field(key("block_size", d.block_size)
              .applies_to({"text", "tokens_bin"})
              .at_least(1)
              .doc("T: examples are input `[T]` and target `[T]` (the next tokens), int64; "
                   "training blocks start at random offsets drawn from `seed`, epoch and index"));
  v.field(key("val_blocks", d.val_blocks)
              .applies_to({"text", "tokens_bin"})
              .at_least(0)
              .doc("evaluate on the first N consecutive blocks of the validation part (0: all)"));
}

template <typename V>
void describe(V& v, LossConfig& l) {
  v.field(key("type", l.type)
              .selector()
              .one_of({"mse", "l1", "cross_entropy", "bce_with_logits", "smooth_l1", "huber", "bce",
                       "kl_div"})
              .doc("`cross_entropy`: int64 labels, output `[classes]`; the others: float targets "
                   "shaped like the output (`bce`: the output is a probability, `kl_div`: a "
                   "log-probability)"));
  v.field(key("reduction", l.reduction)
              .one_of({"mean", "sum", "batchmean"})
              .doc("over the batch; `batchmean` (kl_div only) divides the sum by the batch size, "
                   "where `mean` divides by the number of elements"));
  v.field(key("label_smoothing", l.label_smoothing)
              .applies_to({"cross_entropy"})
              .in(Range{0, 1})
              .doc("as PyTorch's"));
  v.field(key("ignore_index", l.ignore_index)
              .applies_to({"cross_entropy"})
              .doc("examples with this label are skipped by the loss (as in PyTorch); every other "
                   "label must be a class of the model, and at least one example must have one"));
  v.field(key("pos_weight", l.pos_weight)
              .applies_to({"bce_with_logits"})
              .non_negative()
              .optional_output()
              .default_text("none")
              .doc("weight of the positive term, one value or one per output (the model's last "
                   "output dim), as PyTorch's `BCEWithLogitsLoss(pos_weight=...)`"));
  v.field(key("weight", l.weight)
              .applies_to({"cross_entropy", "bce_with_logits", "bce"})
              .non_negative()
              .optional_output()
              .default_text("none")
              .doc("cross_entropy: one weight per class (the mean divides by the weights of the "
                   "labels that count); bce, bce_with_logits: one value or one per output, "
                   "scaling each element's loss; as PyTorch's `weight=`"));
  v.field(key("beta", l.beta)
              .applies_to({"smooth_l1"})
              .non_negative()
              .doc("where the loss turns from quadratic to linear (0: l1)"));
  v.field(key("delta", l.delta)
              .applies_to({"huber"})
              .positive()
              .doc("where the loss turns from quadratic to linear"));
  v.field(key("log_target", l.log_target)
              .applies_to({"kl_div"})
              .doc("the targets are log-probabilities"));
}

// The optimizer's keys, in resolved.yaml's order, with their checks and documentation. Which
// optimizers take a key, its type and its default for each come from the options structs
// (nn/optim/*.h, their `each`), so a hyperparameter is a member there and a line here. A key
// added later is left out of resolved.yaml while it has its default (`optional`), so the config
// hash of every existing run stays as it was.
struct OptimizerKey {
  const char* name;
  Range range;
  const char* help;
  std::vector<std::string> not_for = {};  // types whose options have the field, but not the key
  bool optional = false;
};
inline const std::vector<OptimizerKey>& optimizer_keys() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const std::vector<OptimizerKey> keys = {
      {"lr", Range{0, inf, true, false}, "learning rate"},
      {"weight_decay", Range{0, inf}, "L2 penalty (adamw: decoupled)"},
      {"maximize", Range{}, "ascend the objective"},
      {"momentum", Range{0, inf}, "momentum"},
      {"dampening", Range{0, 1}, "dampening"},
      {"nesterov", Range{}, "Nesterov momentum"},
      {"betas", Range{0, 1, false, true},
       "running-average coefficients of the gradient and its square"},
      {"eps", Range{0, inf, true, false}, "added to the denominator"},
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
  };
  return keys;
}

// Each optimizer's default options, in kOptimizerTypes' order.
inline const std::vector<OptimizerOptions>& optimizer_defaults() {
  static const std::vector<OptimizerOptions> all = [] {
    std::vector<OptimizerOptions> v;
    [&v]<size_t... I>(std::index_sequence<I...>) { (v.emplace_back(std::in_place_index<I>), ...); }
    (std::make_index_sequence<std::variant_size_v<OptimizerOptions>>());
    return v;
  }();
  return all;
}

// The member named `name` of the options held, if it has one of type T.
template <typename T, typename Options>
auto* option_member(Options& options, const char* name) {
  using Ptr = std::conditional_t<std::is_const_v<Options>, const T*, T*>;
  Ptr found = nullptr;
  std::visit(
      [&](auto& opts) {
        std::decay_t<decltype(opts)>::each(opts, [&](const char* n, auto& member) {
          if constexpr (std::is_same_v<std::decay_t<decltype(member)>, T>) {
            if (std::string_view(n) == name) found = &member;
          }
        });
      },
      options);
  return found;
}

// One optimizer key of type T: bound to the held options' member, or (for the types that lack
// it) to a stand-in with the first type's default; applies to the types whose options have it,
// with their defaults where they differ from the first's.
template <typename T, typename V>
void optimizer_key(V& v, OptimizerConfig& o, const OptimizerKey& row) {
  std::vector<std::string> types;
  std::vector<T> defaults;
  for (size_t i = 0; i < optimizer_defaults().size(); ++i) {
    const T* d = option_member<T>(optimizer_defaults()[i], row.name);
    if (d != nullptr && std::find(row.not_for.begin(), row.not_for.end(), kOptimizerTypes[i]) ==
                            row.not_for.end()) {
      types.push_back(kOptimizerTypes[i]);
      defaults.push_back(*d);
    }
  }
  T stand_in = defaults.front();
  T* held = option_member<T>(o.options, row.name);
  Key<T> k(row.name, held != nullptr ? *held : stand_in);
  k.doc(row.help);
  k.in(row.range);
  if (row.optional) k.optional_output();
  if (types.size() < kOptimizerTypes.size()) k.applies_to(types);
  std::vector<bool> grouped(types.size(), false);
  for (size_t i = 1; i < types.size(); ++i) {
    if (grouped[i] || defaults[i] == defaults.front()) continue;
    std::vector<std::string> same{types[i]};
    for (size_t j = i + 1; j < types.size(); ++j) {
      if (!grouped[j] && defaults[j] == defaults[i]) {
        same.push_back(types[j]);
        grouped[j] = true;
      }
    }
    k.default_for(same, defaults[i]);
  }
  v.field(k);
}

template <typename V>
void describe(V& v, OptimizerConfig& o) {
  v.field(key("type", o.type).selector().one_of(kOptimizerTypes).doc("the optimizer"));
  o.select();
  for (const OptimizerKey& row : optimizer_keys()) {
    // The key's type is its member's in the first options struct that has it.
    bool done = false;
    for (const OptimizerOptions& d : optimizer_defaults()) {
      std::visit(
          [&](const auto& opts) {
            std::decay_t<decltype(opts)>::each(opts, [&](const char* n, const auto& member) {
              if (done || std::string_view(n) != row.name) return;
              done = true;
              optimizer_key<std::decay_t<decltype(member)>>(v, o, row);
            });
          },
          d);
      if (done) break;
    }
    if (std::string_view(row.name) == "nesterov") {
      v.rule({"nesterov",
              {"sgd"},
              [&o] {
                const auto* s = std::get_if<optim::SGDOptions>(&o.options);
                return s == nullptr || !s->nesterov || (s->momentum > 0 && s->dampening == 0);
              },
              "needs optimizer.momentum > 0 and dampening 0"});
    }
  }
  v.field(key("decay_min_ndim", o.decay_min_ndim)
              .at_least(0)
              .optional_output()
              .doc("apply `weight_decay` only to parameters of at least this many dimensions "
                   "(2: matrices and embeddings, not biases or norm gains, as nanoGPT); 0: to "
                   "all"));
}

template <typename V>
void describe(V& v, ScheduleConfig& s) {
  v.field(key("type", s.type)
              .selector()
              .one_of({"none", "step", "cosine", "multistep", "exponential", "cosine_annealing",
                       "linear", "onecycle", "plateau"})
              .doc("lr schedule (PyTorch's StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, "
                   "LinearLR, OneCycleLR, ReduceLROnPlateau; `cosine`: linear warmup then cosine "
                   "decay)"));
  v.field(key("step_size", s.step_size)
              .applies_to({"step"})
              .at_least(1)
              .doc("multiply the lr by `gamma` every `step_size` steps"));
  v.field(key("gamma", s.gamma)
              .applies_to({"step", "multistep", "exponential"})
              .positive()
              .doc("the factor (`exponential`: every step)"));
  v.field(key("milestones", s.milestones)
              .applies_to({"multistep"})
              .optional_output()
              .default_text("none (required for multistep)")
              .doc("steps at which the lr is multiplied by `gamma`"));
  v.field(key("warmup_steps", s.warmup_steps)
              .applies_to({"cosine"})
              .at_least(0)
              .doc("linear warmup from lr/W to lr"));
  v.field(key("total_steps", s.total_steps)
              .applies_to({"cosine", "cosine_annealing", "onecycle"})
              .at_least(0)
              .doc("end of the decay (0: the run's total steps)"));
  v.rule({"warmup_steps",
          {"cosine"},
          [&s] { return s.total_steps == 0 || s.warmup_steps <= s.total_steps; },
          "must be <= schedule.total_steps"});
  v.field(key("min_lr", s.min_lr)
              .applies_to({"cosine", "cosine_annealing", "plateau"})
              .non_negative()
              .doc("`cosine`: the lr at and after `total_steps`; `cosine_annealing`: eta_min; "
                   "`plateau`: the lr is never reduced below it"));
  v.field(key("start_factor", s.start_factor)
              .applies_to({"linear"})
              .in(Range{0, 1, true, false})
              .doc("lr factor of the first step"));
  v.field(key("end_factor", s.end_factor)
              .applies_to({"linear"})
              .in(Range{0, 1})
              .doc("lr factor from `total_iters` on"));
  v.field(key("total_iters", s.total_iters)
              .applies_to({"linear"})
              .at_least(0)
              .doc("steps from `start_factor` to `end_factor`"));
  v.field(key("max_lr", s.max_lr)
              .applies_to({"onecycle"})
              .non_negative()
              .doc("peak lr (0: optimizer.lr)"));
  v.field(key("pct_start", s.pct_start)
              .applies_to({"onecycle"})
              .in(Range{0, 1})
              .doc("fraction of the steps spent raising the lr"));
  v.field(key("anneal_strategy", s.anneal_strategy)
              .applies_to({"onecycle"})
              .one_of({"cos", "linear"})
              .doc("shape of each phase"));
  v.field(key("three_phase", s.three_phase)
              .applies_to({"onecycle"})
              .doc("back down to the start lr before the final decay"));
  v.field(key("div_factor", s.div_factor)
              .applies_to({"onecycle"})
              .positive()
              .doc("start lr = max_lr / div_factor"));
  v.field(key("final_div_factor", s.final_div_factor)
              .applies_to({"onecycle"})
              .positive()
              .doc("final lr = start lr / final_div_factor"));
  v.field(key("cycle_momentum", s.cycle_momentum)
              .applies_to({"onecycle"})
              .doc("move the momentum (sgd, rmsprop) or beta1 (adam, adamw, nadam, radam) "
                   "against the lr"));
  v.field(key("base_momentum", s.base_momentum)
              .applies_to({"onecycle"})
              .in(Range{0, 1})
              .doc("momentum at the lr's peak"));
  v.field(key("max_momentum", s.max_momentum)
              .applies_to({"onecycle"})
              .in(Range{0, 1})
              .doc("momentum at the lr's lowest"));
  v.field(key("mode", s.mode)
              .applies_to({"plateau"})
              .one_of({"min", "max"})
              .doc("whether the watched loss should fall or rise"));
  v.field(key("factor", s.factor)
              .applies_to({"plateau"})
              .in(Range{0, 1, false, true})
              .doc("lr multiplier on a plateau"));
  v.field(key("patience", s.patience)
              .applies_to({"plateau"})
              .at_least(0)
              .doc("steps without improvement before the lr is reduced"));
  v.field(key("threshold", s.threshold)
              .applies_to({"plateau"})
              .non_negative()
              .doc("smallest change that counts as an improvement"));
  v.field(key("threshold_mode", s.threshold_mode)
              .applies_to({"plateau"})
              .one_of({"rel", "abs"})
              .doc("`threshold` relative to the best value or absolute"));
  v.field(key("cooldown", s.cooldown)
              .applies_to({"plateau"})
              .at_least(0)
              .doc("steps to wait after a reduction before counting again"));
  v.field(key("eps", s.eps)
              .applies_to({"plateau"})
              .non_negative()
              .doc("lr changes smaller than this are not made"));
}

template <typename V>
void describe(V& v, ScalerConfig& g) {
  v.field(key("enabled", g.enabled).doc("`auto`: on for `precision: float16` only"));
  v.field(key("init_scale", g.init_scale).positive().doc("starting scale"));
  v.field(key("growth_factor", g.growth_factor)
              .in(Range{1, 1e300, true, false})
              .doc("multiply the scale after `growth_interval` clean steps"));
  v.field(key("backoff_factor", g.backoff_factor)
              .in(Range{0, 1, false, true})
              .doc("multiply the scale on an overflowing step (which is skipped); 0 drops it to "
                   "`min_scale`"));
  v.field(key("growth_interval", g.growth_interval)
              .at_least(0)
              .doc("clean steps between growths (0: never grow)"));
  v.field(
      key("min_scale", g.min_scale).non_negative().doc("never back off below this (0: no floor)"));
  v.field(key("hysteresis", g.hysteresis)
              .at_least(1)
              .doc("back off only on the N-th consecutive overflowing step"));
  v.rule({"min_scale",
          {},
          [&g] { return g.min_scale <= g.init_scale; },
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
              .doc("directory the ranks meet in (shared by every host); default: a fresh one per "
                   "launch, or `MANTISSA_STORE_PATH`"));
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
}

}  // namespace mantissa::runner::schema
