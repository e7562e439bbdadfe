// The config schema (runner/config/config_schema.h) is the one list of keys: every declared key
// reaches resolved.yaml and is read back from it, the docs' key reference is made from it, and
// resolved texts (and so the config hashes that runs and checkpoints store) are those of the
// hand-written writer it replaced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "runner/config/config.h"
#include "runner/config/config_schema.h"
#include "runner/files/atomic_file.h"
#include "runner/training/model_builder.h"

namespace rn = mantissa::runner;
namespace schema = mantissa::runner::schema;
namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  const char* s = std::getenv("MANTISSA_SOURCE_DIR");
  return s ? s : ".";
}

// ---- a value other than the current one, valid for the key's own checks

template <typename T>
std::optional<T> other_value(const schema::Key<T>& k) {
  const T& v = *k.member;
  if constexpr (std::is_same_v<T, int64_t>) {
    if (k.min_int > v) return k.min_int + 4;
    return v < k.max_int ? v + 1 : v - 1;
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return v + 1;
  } else if constexpr (std::is_same_v<T, double>) {
    for (double c : {v + 0.25, v / 2, v - 0.25}) {
      if (c != v && k.range.contains(c)) return c;
    }
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, bool>) {
    return !v;
  } else if constexpr (std::is_same_v<T, std::optional<bool>>) {
    return v ? std::optional<bool>(!*v) : std::optional<bool>(true);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!k.choices.empty()) {
      for (const auto& c : k.choices) {
        if (c != v) return c;
      }
      return std::nullopt;
    }
    for (const std::string& c : {v + "_x", std::string("cpu")}) {
      if (!k.check || k.check(c).empty()) return c;
    }
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, mantissa::DType>) {
    for (const auto& c : k.choices) {
      if (mantissa::parse_dtype(c) != v) return mantissa::parse_dtype(c);
    }
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, char>) {
    return v == ';' ? '|' : ';';
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return std::vector<std::string>{"a", "b"};
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    return std::vector<int64_t>{3, 4};
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    return std::vector<double>{0.5, 2};
  } else if constexpr (std::is_same_v<T, std::pair<double, double>>) {
    return std::pair<double, double>{v.first / 2, v.second / 2};
  } else if constexpr (schema::kIsNumberArray<T>) {
    T halved = v;
    for (double& x : halved) x /= 2;
    return halved;
  } else if constexpr (std::is_enum_v<T>) {
    const auto n = option_names(v).size();
    const auto i = static_cast<size_t>(static_cast<std::underlying_type_t<T>>(v));
    return static_cast<T>(static_cast<std::underlying_type_t<T>>((i + 1) % n));
  } else if constexpr (std::is_same_v<T, rn::BlockSelection>) {
    return rn::BlockSelection{.all = false, .blocks = {0, 2}};
  } else {
    rn::LayerSpec relu;
    relu.type = "relu";
    relu.select();
    return std::vector<rn::LayerSpec>{relu};
  }
}

// Sets a section's selector to `type`, and the `target`-th key that applies to it (and every
// required key) to another value. Nested sections are walked on their own.
struct Perturb {
  std::string type;
  int target;
  std::string path;
  int index = 0;
  std::string touched;  // the target's path, once changed

  template <typename T>
  void field(const schema::Key<T>& k) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (k.is_selector) {
        *k.member = type;
        return;
      }
    }
    if (!k.applies(type)) return;
    const int i = index++;
    if (i != target && !k.is_required) return;
    if (auto v = other_value(k)) {
      *k.member = *v;
      if (i == target) touched = path + k.name;
    }
  }
  template <typename A, typename B>
  void either(const schema::Key<A>& a, const schema::Key<B>& b) {
    field(a);
    field(b);
  }
  void rule(const schema::Rule&) {}
  template <typename S>
  void section(const char*, S&, const char*, const std::vector<std::string>& = {}) {}
};

// "path=value" for every key of a section that applies, as resolved.yaml would hold it.
struct Values {
  std::string type;
  std::string path;
  std::vector<std::string> out;

  template <typename T>
  static std::string text(const T& v) {
    std::ostringstream os;
    if constexpr (std::is_same_v<T, std::optional<bool>>) {
      os << (v ? (*v ? "true" : "false") : "auto");
    } else if constexpr (std::is_same_v<T, mantissa::DType>) {
      os << mantissa::dtype_name(v);
    } else if constexpr (std::is_same_v<T, std::pair<double, double>>) {
      os << v.first << "," << v.second;
    } else if constexpr (std::is_enum_v<T>) {
      os << schema::enum_name(v);
    } else if constexpr (std::is_same_v<T, std::vector<rn::LayerSpec>>) {
      for (const auto& l : v) os << l.type << ";";
    } else if constexpr (std::is_same_v<T, rn::BlockSelection>) {
      os << v.all << ":";
      for (const auto& x : v.blocks) os << x << ";";
    } else if constexpr (requires { v.begin(); } && !std::is_same_v<T, std::string>) {
      for (const auto& x : v) os << x << ";";
    } else {
      os.precision(17);
      os << v;
    }
    return os.str();
  }
  template <typename T>
  void field(const schema::Key<T>& k) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (k.is_selector) type = *k.member;
    }
    if (k.applies(type)) out.push_back(path + k.name + "=" + text(*k.member));
  }
  template <typename A, typename B>
  void either(const schema::Key<A>& a, const schema::Key<B>& b) {
    bool set = false;
    if constexpr (std::is_arithmetic_v<B>) {
      set = *b.member != 0;
    } else {
      set = !b.member->empty();
    }
    if (set) {
      field(b);
    } else {
      field(a);
    }
  }
  void rule(const schema::Rule&) {}
  template <typename S>
  void section(const char*, S&, const char*, const std::vector<std::string>& = {}) {}
};

struct Selector {
  std::vector<std::string> choices{""};  // no selector: one pass
  template <typename T>
  void field(const schema::Key<T>& k) {
    if (k.is_selector) choices = k.choices;
  }
  // model.preset selects, and comes first in an either.
  template <typename A, typename B>
  void either(const schema::Key<A>& a, const schema::Key<B>&) {
    field(a);
  }
  void rule(const schema::Rule&) {}
  template <typename S>
  void section(const char*, S&, const char*, const std::vector<std::string>& = {}) {}
};

// For every type of the section and every key that applies to it: a config whose key has a
// non-default value goes through to_yaml and parse_config and comes back equal, key by key.
template <typename S, typename Get>
void round_trip_every_key(const std::string& path, Get get, std::vector<std::string>* touched,
                          std::vector<std::string>* unchangeable) {
  rn::Config probe;
  Selector sel;
  schema::describe(sel, get(probe));
  for (const auto& type : sel.choices) {
    for (int target = 0;; ++target) {
      rn::Config c;
      c.name = "base";
      S& s = get(c);
      Perturb p{type, target, path, 0, ""};
      schema::describe(p, s);
      if (target >= p.index) break;
      // A cross-key rule: Nesterov momentum needs momentum.
      if (auto* sgd = std::get_if<mantissa::optim::SGDOptions>(&c.optimizer.options);
          sgd != nullptr && sgd->nesterov)
        sgd->momentum = 0.5;
      // And the gpt preset's heads must divide its width.
      if (c.model.gpt.n_embd % c.model.gpt.n_head != 0)
        c.model.gpt.n_embd = 32 * c.model.gpt.n_head;
      // Keeping the attention outputs needs checkpointed blocks.
      if (c.model.gpt.checkpoint_keep_attention) c.model.gpt.activation_checkpointing.all = true;
      const std::string text = rn::to_yaml(c);
      SCOPED_TRACE(path + " type '" + type + "', key #" + std::to_string(target) + ":\n" + text);
      if (p.touched.empty()) {
        unchangeable->push_back(path + "#" + std::to_string(target));
        continue;
      }
      touched->push_back(p.touched + " (" + type + ")");
      rn::Config back;
      ASSERT_NO_THROW(back = rn::parse_config(text, "resolved.yaml")) << p.touched;
      Values want{"", path, {}}, got{"", path, {}};
      schema::describe(want, get(c));
      schema::describe(got, get(back));
      EXPECT_EQ(got.out, want.out) << p.touched;
      EXPECT_EQ(rn::to_yaml(back), text) << p.touched;
      EXPECT_EQ(back.origin.count(p.touched), 1u) << p.touched;
      EXPECT_NE(back.origin[p.touched], "default") << p.touched << " was not read back";
    }
  }
}

}  // namespace

TEST(RunnerConfigSchema, EveryDeclaredKeyRoundTripsWithANonDefaultValue) {
  std::vector<std::string> touched, unchangeable;
  round_trip_every_key<rn::Config>(
      "", [](rn::Config& c) -> rn::Config& { return c; }, &touched, &unchangeable);
  round_trip_every_key<rn::ModelConfig>(
      "model.", [](rn::Config& c) -> rn::ModelConfig& { return c.model; }, &touched, &unchangeable);
  round_trip_every_key<rn::LayerSpec>(
      "model.layers.0.",
      [](rn::Config& c) -> rn::LayerSpec& {
        c.model.layers.resize(1);
        return c.model.layers[0];
      },
      &touched, &unchangeable);
  round_trip_every_key<rn::DataConfig>(
      "data.", [](rn::Config& c) -> rn::DataConfig& { return c.data; }, &touched, &unchangeable);
  round_trip_every_key<rn::LossConfig>(
      "loss.", [](rn::Config& c) -> rn::LossConfig& { return c.loss; }, &touched, &unchangeable);
  round_trip_every_key<rn::OptimizerConfig>(
      "optimizer.", [](rn::Config& c) -> rn::OptimizerConfig& { return c.optimizer; }, &touched,
      &unchangeable);
  round_trip_every_key<mantissa::optim::AdamWOptions>(
      "optimizer.adamw.",
      [](rn::Config& c) -> mantissa::optim::AdamWOptions& {
        c.optimizer.type = "muon";
        c.optimizer.select();
        return c.optimizer.adamw;
      },
      &touched, &unchangeable);
  round_trip_every_key<rn::ScheduleConfig>(
      "schedule.", [](rn::Config& c) -> rn::ScheduleConfig& { return c.schedule; }, &touched,
      &unchangeable);
  round_trip_every_key<rn::ScalerConfig>(
      "scaler.", [](rn::Config& c) -> rn::ScalerConfig& { return c.scaler; }, &touched,
      &unchangeable);
  round_trip_every_key<rn::DistributedConfig>(
      "distributed.", [](rn::Config& c) -> rn::DistributedConfig& { return c.distributed; },
      &touched, &unchangeable);
  // Every key could be changed (model.preset is a selector, walked through its values).
  EXPECT_EQ(unchangeable, std::vector<std::string>{});
  // Spot checks that the walk reached the keys of every kind of section.
  for (const char* k :
       {"data.turns (spirals)", "model.layers.0.stride (maxpool2d)", "optimizer.betas (adamw)",
        "epochs ()", "data.delimiter (csv)", "loss.pos_weight (bce_with_logits)",
        "scaler.enabled ()", "distributed.static_graph ()", "model.n_head (gpt)",
        "optimizer.adjust_lr_fn (muon)", "optimizer.ns_coefficients (muon)",
        "optimizer.muon_params (muon)", "optimizer.adamw.betas ()"}) {
    EXPECT_NE(std::find(touched.begin(), touched.end(), k), touched.end()) << k;
  }
}

// The resolved texts of these configs, and so their hashes, are pinned: runs and checkpoints
// store the hash, and resume refuses a checkpoint whose hash differs. They are the hashes of the
// hand-written writer this schema replaced; a change here orphans every existing run.
TEST(RunnerConfigSchema, ConfigHashesOfExistingConfigsAreUnchanged) {
  const std::map<std::string, std::string> pinned = {
      {"configs/mlp_sine.yaml", "fd23a116c8623460"},
      {"configs/mnist_cnn.yaml", "44a972da371de96a"},
      {"configs/spirals_bf16.yaml", "4169ddb10cf01e23"},
      {"configs/toy.yaml", "795be2a85be338f3"},
      {"configs/toy_fp16.yaml", "f5eecb8ae183fd26"},
      {"configs/gpt_tiny.yaml", "1f4a9893aba8e3f7"},
      {"configs/gpt_tiny_muon.yaml", "0111ddf63bcbf8ef"},
      {"configs/gpt2_124m.yaml", "e7eb3390399b65b7"},
      {"tests/data/configs/csv_every_layer.yaml", "04eef1fd47c40f0c"},
      {"tests/data/configs/safetensors_adam_step.yaml", "20fb5dd3eb063abe"},
      {"tests/data/configs/mnist_nesterov.yaml", "dc05d8ade42a4f1e"},
      {"tests/data/configs/teacher_pos_weight.yaml", "7113eb397a2823ff"},
      {"tests/data/configs/sine_preset.yaml", "dc0899f68b4f57f3"},
      {"tests/data/configs/spirals_adamw.yaml", "38aa3ef4f56355c4"},
      {"tests/data/configs/empty.yaml", "8dd810279c79a183"},
      {"tests/data/configs/csv_defaults.yaml", "5c3ef79f658a9ddc"},
  };
  size_t seen = 0;
  for (const char* dir : {"configs", "tests/data/configs"}) {
    for (const auto& entry : fs::directory_iterator(source_dir() + "/" + dir)) {
      if (entry.path().extension() != ".yaml") continue;
      const std::string name = std::string(dir) + "/" + entry.path().filename().string();
      SCOPED_TRACE(name);
      const auto it = pinned.find(name);
      ASSERT_NE(it, pinned.end()) << "a new config: pin its hash here";
      const rn::Config c = rn::parse_config_file(entry.path().string());
      EXPECT_EQ(rn::config_hash(rn::to_yaml(c)), it->second) << rn::to_yaml(c);
      ++seen;
    }
  }
  EXPECT_EQ(seen, pinned.size());
}

// Each optimizer's section of resolved.yaml — which keys, in which order, with which defaults —
// is part of the config hash of every run that uses it: pinned for every type.
TEST(RunnerConfigSchema, EachOptimizerSectionIsPinned) {
  const std::map<std::string, std::string> pinned = {
      {"sgd",
       "optimizer:\n"
       "  type: sgd\n"
       "  lr: 0.01\n"
       "  weight_decay: 0.0\n"
       "  maximize: false\n"
       "  momentum: 0.0\n"
       "  dampening: 0.0\n"
       "  nesterov: false\n"},
      {"adam",
       "optimizer:\n"
       "  type: adam\n"
       "  lr: 0.001\n"
       "  weight_decay: 0.0\n"
       "  maximize: false\n"
       "  betas: [0.9, 0.999]\n"
       "  eps: 1e-08\n"
       "  amsgrad: false\n"},
      {"adamw",
       "optimizer:\n"
       "  type: adamw\n"
       "  lr: 0.001\n"
       "  weight_decay: 0.01\n"
       "  maximize: false\n"
       "  betas: [0.9, 0.999]\n"
       "  eps: 1e-08\n"
       "  amsgrad: false\n"},
      {"rmsprop",
       "optimizer:\n"
       "  type: rmsprop\n"
       "  lr: 0.01\n"
       "  weight_decay: 0.0\n"
       "  maximize: false\n"
       "  momentum: 0.0\n"
       "  eps: 1e-08\n"
       "  alpha: 0.99\n"
       "  centered: false\n"},
      {"adagrad",
       "optimizer:\n"
       "  type: adagrad\n"
       "  lr: 0.01\n"
       "  weight_decay: 0.0\n"
       "  maximize: false\n"
       "  eps: 1e-10\n"
       "  lr_decay: 0.0\n"
       "  initial_accumulator_value: 0.0\n"},
      {"nadam",
       "optimizer:\n"
       "  type: nadam\n"
       "  lr: 0.002\n"
       "  weight_decay: 0.0\n"
       "  betas: [0.9, 0.999]\n"
       "  eps: 1e-08\n"
       "  momentum_decay: 0.004\n"},
      {"radam",
       "optimizer:\n"
       "  type: radam\n"
       "  lr: 0.001\n"
       "  weight_decay: 0.0\n"
       "  betas: [0.9, 0.999]\n"
       "  eps: 1e-08\n"},
  };
  for (const auto& [type, want] : pinned) {
    const std::string text =
        rn::to_yaml(rn::parse_config("optimizer:\n  type: " + type + "\n", "<pin>"));
    const size_t begin = text.find("\noptimizer:\n");
    ASSERT_NE(begin, std::string::npos) << text;
    size_t end = begin + 1;
    while ((end = text.find('\n', end) + 1) < text.size() && text[end] == ' ') {
    }
    EXPECT_EQ(text.substr(begin + 1, end - begin - 1), want) << type;
  }
}

// Each layer type's entry in resolved.yaml — which keys, in which order, with which defaults — is
// part of the config hash of every run that uses it: pinned for every type, from the entry with
// only its required keys and from one that sets every key to a value other than its default.
TEST(RunnerConfigSchema, EachLayerTypeIsPinned) {
  const std::vector<std::pair<std::string, std::string>> pinned = {
      {"{type: linear, in: 3, out: 2}", "{type: linear, in: 3, out: 2, bias: true}"},
      {"{type: linear, name: l, in: 3, out: 2, bias: false}",
       "{type: linear, name: \"l\", in: 3, out: 2, bias: false}"},
      {"relu", "{type: relu}"},
      {"gelu", "{type: gelu, approximate: none}"},
      {"{type: gelu, approximate: tanh}", "{type: gelu, approximate: tanh}"},
      {"sigmoid", "{type: sigmoid}"},
      {"tanh", "{type: tanh}"},
      {"dropout", "{type: dropout, p: 0.5}"},
      {"{type: dropout, p: 0.25}", "{type: dropout, p: 0.25}"},
      {"{type: layernorm, shape: 4}", "{type: layernorm, shape: [4], eps: 1e-05, affine: true}"},
      {"{type: layernorm, shape: [2, 4], eps: 1e-6, affine: false}",
       "{type: layernorm, shape: [2, 4], eps: 1e-06, affine: false}"},
      {"{type: conv2d, in: 1, out: 2, kernel: 3}",
       "{type: conv2d, in: 1, out: 2, kernel: 3, stride: 1, padding: 0, bias: true}"},
      {"{type: conv2d, in: 1, out: 2, kernel: 3, stride: 2, padding: 1, bias: false}",
       "{type: conv2d, in: 1, out: 2, kernel: 3, stride: 2, padding: 1, bias: false}"},
      {"{type: maxpool2d, kernel: 3}", "{type: maxpool2d, kernel: 3, stride: 3, padding: 0}"},
      {"{type: maxpool2d, kernel: 3, stride: 1, padding: 1}",
       "{type: maxpool2d, kernel: 3, stride: 1, padding: 1}"},
      {"flatten", "{type: flatten, start_dim: 1, end_dim: -1}"},
      {"{type: flatten, start_dim: 0, end_dim: 2}", "{type: flatten, start_dim: 0, end_dim: 2}"},
      {"{type: conv1d, in: 1, out: 2, kernel: 3}",
       "{type: conv1d, in: 1, out: 2, kernel: 3, stride: 1, padding: 0, bias: true}"},
      {"{type: conv1d, in: 1, out: 2, kernel: 3, stride: 2, padding: 1, bias: false}",
       "{type: conv1d, in: 1, out: 2, kernel: 3, stride: 2, padding: 1, bias: false}"},
      {"{type: adaptive_avg_pool2d, output_size: 2}",
       "{type: adaptive_avg_pool2d, output_size: [2]}"},
      {"{type: adaptive_avg_pool2d, output_size: [2, 3]}",
       "{type: adaptive_avg_pool2d, output_size: [2, 3]}"},
      {"identity", "{type: identity}"},
      {"{type: batchnorm1d, features: 4}",
       "{type: batchnorm1d, features: 4, momentum: 0.1, eps: 1e-05, affine: true}"},
      {"{type: batchnorm1d, features: 4, momentum: 0.2, eps: 1e-3, affine: false}",
       "{type: batchnorm1d, features: 4, momentum: 0.2, eps: 0.001, affine: false}"},
      {"{type: batchnorm2d, features: 4}",
       "{type: batchnorm2d, features: 4, momentum: 0.1, eps: 1e-05, affine: true}"},
      {"{type: batchnorm2d, features: 4, momentum: 0.2, eps: 1e-3, affine: false}",
       "{type: batchnorm2d, features: 4, momentum: 0.2, eps: 0.001, affine: false}"},
      {"{type: groupnorm, features: 4, groups: 2}",
       "{type: groupnorm, features: 4, groups: 2, eps: 1e-05, affine: true}"},
      {"{type: groupnorm, features: 4, groups: 2, eps: 1e-3, affine: false}",
       "{type: groupnorm, features: 4, groups: 2, eps: 0.001, affine: false}"},
      {"{type: rmsnorm, shape: 4}",
       "{type: rmsnorm, eps: 1.1920928955078125e-07, affine: true, shape: [4]}"},
      {"{type: rmsnorm, shape: [2, 4], eps: 1e-3, affine: false}",
       "{type: rmsnorm, eps: 0.001, affine: false, shape: [2, 4]}"},
      {"silu", "{type: silu}"},
      {"mish", "{type: mish}"},
      {"hardswish", "{type: hardswish}"},
      {"selu", "{type: selu}"},
      {"softsign", "{type: softsign}"},
      {"logsigmoid", "{type: logsigmoid}"},
      {"leaky_relu", "{type: leaky_relu, negative_slope: 0.01}"},
      {"{type: leaky_relu, negative_slope: 0.2}", "{type: leaky_relu, negative_slope: 0.2}"},
      {"elu", "{type: elu, alpha: 1.0}"},
      {"{type: elu, alpha: 0.5}", "{type: elu, alpha: 0.5}"},
      {"celu", "{type: celu, alpha: 1.0}"},
      {"{type: celu, alpha: 0.5}", "{type: celu, alpha: 0.5}"},
      {"softplus", "{type: softplus, beta: 1.0, threshold: 20.0}"},
      {"{type: softplus, beta: 2, threshold: 10}", "{type: softplus, beta: 2.0, threshold: 10.0}"},
      {"hardtanh", "{type: hardtanh, min_val: -1.0, max_val: 1.0}"},
      {"{type: hardtanh, min_val: -2, max_val: 3}",
       "{type: hardtanh, min_val: -2.0, max_val: 3.0}"},
  };
  std::set<std::string> types;
  for (const auto& [entry, want] : pinned) {
    SCOPED_TRACE(entry);
    const rn::Config c = rn::parse_config("model:\n  layers:\n    - " + entry + "\n", "pin");
    types.insert(c.model.layers.at(0).type);
    const std::string text = rn::to_yaml(c);
    const auto at = text.find("  layers:\n    - ");
    ASSERT_NE(at, std::string::npos) << text;
    const auto from = at + std::string("  layers:\n    - ").size();
    EXPECT_EQ(text.substr(from, text.find('\n', from) - from), want);
  }
  EXPECT_EQ(types, std::set<std::string>(rn::kLayerTypes.begin(), rn::kLayerTypes.end()));
}

// The same for the lr schedule: every type's keys, order and defaults in resolved.yaml (and so in
// the config hash).
TEST(RunnerConfigSchema, EachScheduleSectionIsPinned) {
  const std::map<std::string, std::string> pinned = {
      {"none", "schedule:\n  type: none\n"},
      {"step", "schedule:\n  type: step\n  step_size: 100\n  gamma: 0.1\n"},
      {"cosine", "schedule:\n  type: cosine\n  warmup_steps: 0\n  total_steps: 0\n  min_lr: 0.0\n"},
      {"multistep", "schedule:\n  type: multistep\n  gamma: 0.1\n  milestones: [10, 20]\n"},
      {"exponential", "schedule:\n  type: exponential\n  gamma: 0.1\n"},
      {"cosine_annealing",
       "schedule:\n  type: cosine_annealing\n  total_steps: 0\n  min_lr: 0.0\n"},
      {"linear",
       "schedule:\n  type: linear\n  start_factor: 0.3333333333333333\n  end_factor: 1.0\n"
       "  total_iters: 5\n"},
      {"onecycle",
       "schedule:\n  type: onecycle\n  total_steps: 0\n  max_lr: 0.0\n  pct_start: 0.3\n"
       "  anneal_strategy: cos\n  three_phase: false\n  div_factor: 25.0\n"
       "  final_div_factor: 10000.0\n  cycle_momentum: true\n  base_momentum: 0.85\n"
       "  max_momentum: 0.95\n"},
      {"plateau",
       "schedule:\n  type: plateau\n  min_lr: 0.0\n  mode: min\n  factor: 0.1\n"
       "  patience: 10\n  threshold: 1e-04\n  threshold_mode: rel\n  cooldown: 0\n"
       "  eps: 1e-08\n"},
  };
  for (const auto& [type, want] : pinned) {
    const std::string milestones = type == "multistep" ? "  milestones: [10, 20]\n" : "";
    const std::string text =
        rn::to_yaml(rn::parse_config("schedule:\n  type: " + type + "\n" + milestones, "<pin>"));
    const size_t begin = text.find("\nschedule:\n");
    ASSERT_NE(begin, std::string::npos) << text;
    size_t end = begin + 1;
    while ((end = text.find('\n', end) + 1) < text.size() && text[end] == ' ') {
    }
    EXPECT_EQ(text.substr(begin + 1, end - begin - 1), want) << type;
  }
}

namespace {

// Each key of a section and the types it applies to (every type when the key says none; a key
// declared once per type collects them all).
struct KeyTypes {
  std::map<std::string, std::vector<std::string>>* out;
  std::vector<std::string> all = rn::kOptimizerTypes;
  template <typename T>
  void field(const schema::Key<T>& k) {
    if (k.is_selector) return;
    auto& types = (*out)[k.name];
    for (const auto& t : k.only.empty() ? all : k.only) {
      if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
    }
    std::sort(types.begin(), types.end());
  }
  template <typename A, typename B>
  void either(const schema::Key<A>&, const schema::Key<B>&) {}
  void rule(const schema::Rule&) {}
  template <typename S>
  void section(const char*, S&, const char*, const std::vector<std::string>& = {}) {}
};

// Every field of each type's options struct, and the types that have it (sorted).
template <typename Variant>
std::map<std::string, std::vector<std::string>> fields_of(const std::vector<std::string>& types) {
  std::map<std::string, std::vector<std::string>> fields;
  for (size_t i = 0; i < types.size(); ++i) {
    std::visit(
        [&](const auto& opts) {
          std::decay_t<decltype(opts)>::each(
              opts, [&](const char* name, const auto&) { fields[name].push_back(types[i]); });
        },
        schema::variant_defaults<Variant>()[i]);
  }
  for (auto& [name, t] : fields) std::sort(t.begin(), t.end());
  return fields;
}

// The keys a section's schema declares, and the types each applies to (sorted).
template <typename Section>
std::map<std::string, std::vector<std::string>> keys_of(const std::vector<std::string>& types) {
  std::map<std::string, std::vector<std::string>> declared;
  KeyTypes collect{&declared, types};
  Section s;
  schema::describe(collect, s);
  return declared;
}

}  // namespace

// Every field of every optimizer's options struct (nn/optim/*.h) is a config key of the types that
// have it — a hyperparameter added there and described in schema::optimizer_keys() needs nothing
// else — except AdamW's decoupled_weight_decay, which adamw always is.
TEST(RunnerConfigSchema, EveryOptimizerOptionIsAKeyOfItsTypes) {
  auto declared = keys_of<rn::OptimizerConfig>(rn::kOptimizerTypes);   // key -> types
  auto fields = fields_of<rn::OptimizerOptions>(rn::kOptimizerTypes);  // field -> types
  // AdamW always decouples: the one field that is not a key of its type.
  auto& decoupled = fields["decoupled_weight_decay"];
  decoupled.erase(std::find(decoupled.begin(), decoupled.end(), "adamw"));
  // Muon's AdamW groups: their betas come from optimizer.adamw, and use_muon from the split.
  auto& betas = fields["betas"];
  betas.erase(std::find(betas.begin(), betas.end(), "muon"));
  fields.erase("use_muon");
  declared.erase("decay_min_ndim");  // the runner's own: how the parameters are grouped
  declared.erase("muon_params");
  declared.erase("adamw_params");
  // The optimizer's own settings (optim::Optimizer::set_state_dtype, set_stochastic_rounding),
  // not group options.
  declared.erase("state_dtype");
  declared.erase("stochastic_rounding");
  EXPECT_EQ(declared, fields);
  // Each type's defaults are its options struct's.
  for (const std::string& type : rn::kOptimizerTypes) {
    const rn::Config c = rn::parse_config("optimizer: {type: " + type + "}\n", "<defaults>");
    EXPECT_EQ(c.optimizer.options.index(),
              static_cast<size_t>(
                  std::find(rn::kOptimizerTypes.begin(), rn::kOptimizerTypes.end(), type) -
                  rn::kOptimizerTypes.begin()));
    EXPECT_DOUBLE_EQ(c.optimizer.lr(),
                     std::visit([](const auto& d) { return d.lr; },
                                schema::optimizer_defaults()[c.optimizer.options.index()]))
        << type;
  }
}

// The same for the lr schedule, the loss and the dataset: each key applies to the types whose
// struct has it, and a config's type selects its struct.
TEST(RunnerConfigSchema, EveryScheduleOptionIsAKeyOfItsTypes) {
  EXPECT_EQ(keys_of<rn::ScheduleConfig>(rn::kScheduleTypes),
            fields_of<rn::ScheduleOptions>(rn::kScheduleTypes));
  for (size_t i = 0; i < rn::kScheduleTypes.size(); ++i) {
    const std::string milestones = rn::kScheduleTypes[i] == "multistep" ? ", milestones: [3]" : "";
    const rn::Config c = rn::parse_config(
        "schedule: {type: " + rn::kScheduleTypes[i] + milestones + "}\n", "<defaults>");
    EXPECT_EQ(c.schedule.options.index(), i) << rn::kScheduleTypes[i];
  }
}

TEST(RunnerConfigSchema, EveryLossOptionIsAKeyOfItsTypes) {
  auto declared = keys_of<rn::LossConfig>(rn::kLossTypes);
  declared.erase("reduction");  // every loss's
  EXPECT_EQ(declared, fields_of<rn::LossOptions>(rn::kLossTypes));
  for (size_t i = 0; i < rn::kLossTypes.size(); ++i) {
    const rn::Config c =
        rn::parse_config("loss: {type: " + rn::kLossTypes[i] + "}\n", "<defaults>");
    EXPECT_EQ(c.loss.options.index(), i) << rn::kLossTypes[i];
  }
  // A key of one loss is refused for another, and read into the struct of its own.
  const rn::Config ce = rn::parse_config(
      "loss: {type: cross_entropy, ignore_index: 3, label_smoothing: 0.25, weight: [1, 2]}\n", "t");
  const auto& o = std::get<rn::CrossEntropyLossOptions>(ce.loss.options);
  EXPECT_EQ(o.ignore_index, 3);
  EXPECT_EQ(o.label_smoothing, 0.25);
  EXPECT_EQ(o.weight, (std::vector<double>{1, 2}));
  const rn::Config bce = rn::parse_config("loss: {type: bce, weight: 0.5}\n", "t");
  EXPECT_EQ(std::get<rn::BceLossOptions>(bce.loss.options).weight, std::vector<double>{0.5});
  EXPECT_THROW(rn::parse_config("loss: {type: huber, log_target: true}\n", "t"), rn::ConfigError);
}

// The same for the layers (runner/config/layer_options.h): each key applies to the layer types
// whose struct has it, a layer's type selects its struct, and a key of one layer is refused for
// another.
TEST(RunnerConfigSchema, EveryLayerOptionIsAKeyOfItsTypes) {
  auto declared = keys_of<rn::LayerSpec>(rn::kLayerTypes);
  declared.erase("name");  // every layer's
  EXPECT_EQ(declared, fields_of<rn::LayerOptions>(rn::kLayerTypes));
  const rn::Config c = rn::parse_config(
      "model:\n  layers:\n    - {type: conv1d, in: 2, out: 3, kernel: 5, stride: 2}\n"
      "    - {type: maxpool2d, kernel: 3}\n    - {type: softplus, threshold: 4}\n",
      "t");
  const auto& conv = std::get<rn::Conv1dLayer>(c.model.layers.at(0).options);
  EXPECT_EQ(conv.in, 2);
  EXPECT_EQ(conv.out, 3);
  EXPECT_EQ(conv.kernel, 5);
  EXPECT_EQ(conv.stride, 2);
  EXPECT_EQ(conv.padding, 0);
  EXPECT_EQ(std::get<rn::MaxPool2dLayer>(c.model.layers.at(1).options).stride, 3);  // kernel
  const auto& softplus = std::get<rn::SoftplusLayer>(c.model.layers.at(2).options);
  EXPECT_EQ(softplus.beta, 1.0);
  EXPECT_EQ(softplus.threshold, 4.0);
  EXPECT_THROW(rn::parse_config("model:\n  layers:\n    - {type: relu, in: 3}\n", "t"),
               rn::ConfigError);
  // A struct that does not agree with its type (set without select()) is refused, not built.
  rn::ModelConfig model;
  model.layers.resize(1);
  model.layers[0].type = "relu";
  EXPECT_THROW(rn::build_model(model), mantissa::Error);
}

TEST(RunnerConfigSchema, EveryDatasetOptionIsAKeyOfItsTypes) {
  auto declared = keys_of<rn::DataConfig>(rn::kDataTypes);
  for (const char* loader : {"batch_size", "shuffle", "seed", "val_split", "drop_last"}) {
    EXPECT_EQ(declared[loader], [] {
      auto all = rn::kDataTypes;
      std::sort(all.begin(), all.end());
      return all;
    }()) << loader;
    declared.erase(loader);  // the loader's, for every dataset
  }
  EXPECT_EQ(declared, fields_of<rn::DataOptions>(rn::kDataTypes));
  const std::map<std::string, std::string> required = {{"csv", ", path: a.csv"},
                                                       {"safetensors", ", path: a.safetensors"},
                                                       {"mnist", ", images: i, labels: l"},
                                                       {"text", ", path: a.txt"},
                                                       {"tokens_bin", ", path: a.bin"}};
  for (size_t i = 0; i < rn::kDataTypes.size(); ++i) {
    const auto it = required.find(rn::kDataTypes[i]);
    const rn::Config c = rn::parse_config(
        "data: {type: " + rn::kDataTypes[i] + (it != required.end() ? it->second : "") + "}\n",
        "<defaults>");
    EXPECT_EQ(c.data.options.index(), i) << rn::kDataTypes[i];
  }
  // A key shared by name is read into the struct of the type given, and only there.
  const rn::Config bin = rn::parse_config(
      "data: {type: tokens_bin, path: t.bin, val_path: v.bin, block_size: 7}\n", "t");
  const auto& t = std::get<rn::TokensBinDataOptions>(bin.data.options);
  EXPECT_EQ(t.path, "t.bin");
  EXPECT_EQ(t.block_size, 7);
  EXPECT_EQ(bin.data.val_path(), "v.bin");
  const rn::Config spirals = rn::parse_config("data: {type: spirals, samples: 5}\n", "t");
  EXPECT_EQ(std::get<rn::SpiralsOptions>(spirals.data.options).samples, 5);
  EXPECT_EQ(std::get<rn::SpiralsOptions>(spirals.data.options).noise, 0.1);  // its own default
  EXPECT_EQ(spirals.data.val_path(), "");
  EXPECT_THROW(rn::parse_config("data: {type: text}\n", "t"), rn::ConfigError);  // path required
  EXPECT_THROW(rn::parse_config("data: {type: text, path: a, turns: 2}\n", "t"), rn::ConfigError);
}

// docs/configs.md holds config_reference_markdown() between two markers, so that every declared
// key is documented with its declared default, checks and types. MANTISSA_UPDATE_DOCS=1 rewrites
// the block.
TEST(RunnerConfigSchema, DocsKeyReferenceIsMadeFromTheSchema) {
  const std::string path = source_dir() + "/docs/configs.md";
  std::string doc = rn::read_file_bytes(path);
  const std::string begin = "<!-- key reference: made by runner::config_reference_markdown() -->\n";
  const std::string end = "<!-- end of key reference -->\n";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/configs.md lacks: " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/configs.md lacks: " << end;
  const std::string want = rn::config_reference_markdown();
  const std::string have = doc.substr(b + begin.size(), e - b - begin.size());
  if (have != want && std::getenv("MANTISSA_UPDATE_DOCS") != nullptr) {
    doc.replace(b + begin.size(), e - b - begin.size(), want);
    std::ofstream(path, std::ios::binary) << doc;
    return;
  }
  EXPECT_EQ(have, want) << "run with MANTISSA_UPDATE_DOCS=1 to rewrite the block";
  // And the reference names the key at the heart of the schema's example.
  EXPECT_NE(want.find("| `turns` | float | `1.5` | > 0 | spirals |"), std::string::npos) << want;
}

// The distributed section is written only when a key differs from its default, so that every
// config written before it existed keeps its resolved text and hash (the test above); once set,
// it is part of the hash like any section.
TEST(RunnerConfigSchema, DistributedSectionIsOmittedWhileDefault) {
  const rn::Config plain = rn::parse_config("steps: 3\n", "<test>");
  EXPECT_EQ(rn::to_yaml(plain).find("distributed"), std::string::npos) << rn::to_yaml(plain);
  const rn::Config two = rn::parse_config("steps: 3\n", "<test>", {"distributed.nproc=2"});
  const std::string text = rn::to_yaml(two);
  EXPECT_NE(text.find("distributed:\n  nproc: 2\n"), std::string::npos) << text;
  EXPECT_NE(rn::config_hash(text), rn::config_hash(rn::to_yaml(plain)));
  const rn::Config back = rn::parse_config(text, "<resolved>");
  EXPECT_EQ(back.distributed.nproc, 2);
  EXPECT_EQ(rn::to_yaml(back), text);
}
