// Run configs: the YAML schema of `mantissa train`, declared key by key in config_schema.h (and
// listed from there in docs/configs.md), parsed and validated completely before anything runs or
// any file is written.
//
//   runner::Config cfg = runner::parse_config_file("configs/toy.yaml", {"optimizer.lr=0.1"});
//   std::string text = runner::to_yaml(cfg);   // the resolved config, every default filled in
//
// Every problem — an unknown key (with the nearest valid key suggested), a wrong type, a value out
// of range — is one ConfigError whose message is one line naming the key path, the value and
// where it came from ("line 7", or "--set" for a command-line override). Checks that need more
// than the config (files exist, model and data shapes agree) are in build_from_config.h; they
// report through Config::fail so their messages look the same.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "amp/grad_scaler.h"
#include "engine/error.h"
#include "nn/optim/adagrad.h"
#include "nn/optim/adam.h"
#include "nn/optim/muon.h"
#include "nn/optim/nadam.h"
#include "nn/optim/radam.h"
#include "nn/optim/rmsprop.h"
#include "nn/optim/sgd.h"
#include "runner/config/layer_options.h"
#include "runner/data/data.h"

namespace mantissa::runner {

// A bad config. what() is one line, starting "config error: ".
class ConfigError : public Error {
 public:
  using Error::Error;
};

// One entry of model.layers: `type` names the layer (kLayerTypes), and `options` holds that
// type's keys (runner/config/layer_options.h).
struct LayerSpec {
  std::string type = "linear";
  std::string name;  // the child's name; empty: its index, as nn.Sequential
  std::string path;  // "model.layers.3", for messages
  LayerOptions options;
  // Makes `options` the struct `type` names (its defaults when it held another type's).
  void select();
};

// model.preset gpt: nn::GPTConfig's fields (nanoGPT's GPTConfig).
// Blocks of a model a config chooses: `true` (every block), `false` (none) or a list of indices.
struct BlockSelection {
  bool all = false;
  std::vector<int64_t> blocks;
  bool empty() const { return !all && blocks.empty(); }
  bool operator==(const BlockSelection&) const = default;
  // The chosen indices of a model with n blocks, ascending.
  std::vector<int64_t> indices(int64_t n) const;
};

struct GptModelOptions {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;
  int64_t vocab_size = 256;
  double dropout = 0.0;
  bool bias = true;
  // Unset (left out of resolved.yaml, so that older configs keep their hash): nanoGPT's exact
  // GELU and LayerNorm epsilon 1e-5.
  std::string activation;                   // gelu | gelu_tanh
  double layer_norm_eps = 0.0;              // > 0
  BlockSelection activation_checkpointing;  // nn::GPTImpl::set_activation_checkpointing
  bool checkpoint_keep_attention = false;   // its options: save_ops scaled_dot_product_attention
  bool fused_head_loss = false;             // the loss through nn::GPTImpl::head_loss
};

struct ModelConfig {
  std::string preset = "toy";  // toy gpt; empty with layers
  std::vector<LayerSpec> layers;
  std::string init_from;  // safetensors weights loaded after construction (empty: none)
  GptModelOptions gpt;
};

// A byte-level text file (runner/data/token_data.h): blocks of block_size + 1 tokens; the
// validation part is the file's tail data.val_split.
struct TextDataOptions {
  std::string path{};
  int64_t block_size = 128;
  int64_t val_blocks = 0;  // 0: every consecutive block of the validation part
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("path", s.path), f("block_size", s.block_size), f("val_blocks", s.val_blocks);
  }
};
// nanoGPT's uint16 token files: as text, with the validation part val_path's file when given.
struct TokensBinDataOptions {
  std::string path{};
  std::string val_path{};  // empty: the tail data.val_split of `path`
  // The BPE tokenizer the ids come from (runner/text/bpe_tokenizer.h), for `mantissa generate` and
  // the check of model.vocab_size; empty: none.
  std::string tokenizer{};
  int64_t block_size = 128;
  int64_t val_blocks = 0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("path", s.path), f("val_path", s.val_path), f("tokenizer", s.tokenizer),
        f("block_size", s.block_size), f("val_blocks", s.val_blocks);
  }
};

inline const std::vector<std::string> kDataTypes = {
    "teacher", "sine", "spirals", "csv", "safetensors", "mnist", "text", "tokens_bin"};
// In kDataTypes' order: the options of each dataset's loader (runner/data/data.h); the synthetic
// datasets take data.seed as their seed.
using DataOptions =
    std::variant<TeacherOptions, SineOptions, SpiralsOptions, CsvOptions, SafetensorsDataOptions,
                 MnistOptions, TextDataOptions, TokensBinDataOptions>;

struct DataConfig {
  std::string type = "teacher";
  DataOptions options;  // the alternative `type` names
  // loading
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;
  double val_split = 0.0;
  bool drop_last = false;

  // Makes `options` the alternative `type` names (default options when it was another); throws
  // for a type that is not one of kDataTypes.
  void select();
  // tokens_bin's val_path; empty for every other dataset.
  std::string val_path() const;
  // tokens_bin's tokenizer; empty for every other dataset.
  std::string tokenizer() const;
  // text's and tokens_bin's val_blocks; 0 for every other dataset.
  int64_t val_blocks() const;
};

// The loss: `type` names it, and `options` holds that loss's keys (PyTorch's arguments of the
// same names). Each struct lists its keys once in `each`; config_schema.h describes each key once.
struct MseLossOptions {
  template <typename Self, typename F>
  static void each(Self&, F&&) {}
};
struct L1LossOptions {
  template <typename Self, typename F>
  static void each(Self&, F&&) {}
};
struct CrossEntropyLossOptions {
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  std::vector<double> weight{};  // one per class; empty: none (PyTorch's weight=None)
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("label_smoothing", s.label_smoothing), f("ignore_index", s.ignore_index),
        f("weight", s.weight);
  }
};
struct BceWithLogitsLossOptions {
  // One value or one per output (last dim); empty: none (PyTorch's pos_weight=None, weight=None).
  std::vector<double> pos_weight{};
  std::vector<double> weight{};
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("pos_weight", s.pos_weight), f("weight", s.weight);
  }
};
struct SmoothL1LossOptions {
  double beta = 1.0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("beta", s.beta);
  }
};
struct HuberLossOptions {
  double delta = 1.0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("delta", s.delta);
  }
};
struct BceLossOptions {
  std::vector<double> weight{};  // one value or one per output; empty: none
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("weight", s.weight);
  }
};
struct KlDivLossOptions {
  bool log_target = false;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("log_target", s.log_target);
  }
};

inline const std::vector<std::string> kLossTypes = {
    "mse", "l1", "cross_entropy", "bce_with_logits", "smooth_l1", "huber", "bce", "kl_div"};
// In kLossTypes' order.
using LossOptions =
    std::variant<MseLossOptions, L1LossOptions, CrossEntropyLossOptions, BceWithLogitsLossOptions,
                 SmoothL1LossOptions, HuberLossOptions, BceLossOptions, KlDivLossOptions>;

struct LossConfig {
  std::string type = "mse";
  std::string reduction = "mean";  // batchmean: kl_div only
  LossOptions options;             // the alternative `type` names

  // Makes `options` the alternative `type` names (default options when it was another); throws
  // for a type that is not one of kLossTypes.
  void select();
};

// The optimizer: `type` names it, and `options` holds that optimizer's own options struct
// (nn/optim/*.h: the same fields, names and defaults as the C++ API), so a hyperparameter is
// declared once, there, and described once in config_schema.h.
inline const std::vector<std::string> kOptimizerTypes = {"sgd",     "adam",  "adamw", "rmsprop",
                                                         "adagrad", "nadam", "radam", "muon"};
// In kOptimizerTypes' order.
using OptimizerOptions = std::variant<optim::SGDOptions, optim::AdamOptions, optim::AdamWOptions,
                                      optim::RMSpropOptions, optim::AdagradOptions,
                                      optim::NAdamOptions, optim::RAdamOptions, optim::MuonOptions>;

struct OptimizerConfig {
  std::string type = "sgd";
  OptimizerOptions options;  // the alternative `type` names
  // > 0: weight decay only on parameters of at least this many dimensions (optim::decay_groups);
  // 0: on every parameter.
  int64_t decay_min_ndim = 0;
  // Adam/AdamW: the moments' dtype ("" follows the parameters; "bfloat16") and stochastic
  // rounding of the bfloat16 stores (optim::Optimizer::set_state_dtype, set_stochastic_rounding).
  std::string state_dtype;
  bool stochastic_rounding = false;
  // muon: the AdamW group of the parameters Muon is not for (its lr, betas, eps and
  // weight_decay), and name patterns that override optim::muon_split's rule.
  optim::AdamWOptions adamw;
  std::vector<std::string> muon_params, adamw_params;

  // Makes `options` the alternative `type` names (default options when it was another); throws
  // for a type that is not one of kOptimizerTypes.
  void select();
  // Every optimizer has these two.
  double lr() const;
  double weight_decay() const;
};

// The lr schedule: `type` names it, and `options` holds that schedule's keys. Each struct lists
// its keys once in `each` (as the optimizers' options structs do), and config_schema.h describes
// each key once; which schedules take a key comes from the structs.
struct NoSchedule {
  template <typename Self, typename F>
  static void each(Self&, F&&) {}
};
struct StepSchedule {  // StepLR
  int64_t step_size = 100;
  double gamma = 0.1;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("step_size", s.step_size), f("gamma", s.gamma);
  }
};
struct CosineSchedule {  // linear warmup, then cosine decay (optim::CosineWarmupLR)
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // 0: the run's total steps
  double min_lr = 0.0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("warmup_steps", s.warmup_steps), f("total_steps", s.total_steps), f("min_lr", s.min_lr);
  }
};
struct MultiStepSchedule {  // MultiStepLR
  double gamma = 0.1;
  std::vector<int64_t> milestones;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("gamma", s.gamma), f("milestones", s.milestones);
  }
};
struct ExponentialSchedule {  // ExponentialLR
  double gamma = 0.1;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("gamma", s.gamma);
  }
};
struct CosineAnnealingSchedule {  // CosineAnnealingLR: T_max, eta_min
  int64_t total_steps = 0;        // 0: the run's total steps
  double min_lr = 0.0;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("total_steps", s.total_steps), f("min_lr", s.min_lr);
  }
};
struct LinearSchedule {  // LinearLR
  double start_factor = 1.0 / 3.0;
  double end_factor = 1.0;
  int64_t total_iters = 5;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("start_factor", s.start_factor), f("end_factor", s.end_factor),
        f("total_iters", s.total_iters);
  }
};
struct OneCycleSchedule {   // OneCycleLR
  int64_t total_steps = 0;  // 0: the run's total steps
  double max_lr = 0.0;      // 0: optimizer.lr
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";
  bool three_phase = false;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("total_steps", s.total_steps), f("max_lr", s.max_lr), f("pct_start", s.pct_start),
        f("anneal_strategy", s.anneal_strategy), f("three_phase", s.three_phase),
        f("div_factor", s.div_factor), f("final_div_factor", s.final_div_factor),
        f("cycle_momentum", s.cycle_momentum), f("base_momentum", s.base_momentum),
        f("max_momentum", s.max_momentum);
  }
};
struct PlateauSchedule {  // ReduceLROnPlateau
  double min_lr = 0.0;
  std::string mode = "min";
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  std::string threshold_mode = "rel";
  int64_t cooldown = 0;
  double eps = 1e-8;
  template <typename Self, typename F>
  static void each(Self& s, F&& f) {
    f("min_lr", s.min_lr), f("mode", s.mode), f("factor", s.factor), f("patience", s.patience),
        f("threshold", s.threshold), f("threshold_mode", s.threshold_mode),
        f("cooldown", s.cooldown), f("eps", s.eps);
  }
};

inline const std::vector<std::string> kScheduleTypes = {
    "none",   "step",     "cosine", "multistep", "exponential", "cosine_annealing",
    "linear", "onecycle", "plateau"};
// In kScheduleTypes' order.
using ScheduleOptions =
    std::variant<NoSchedule, StepSchedule, CosineSchedule, MultiStepSchedule, ExponentialSchedule,
                 CosineAnnealingSchedule, LinearSchedule, OneCycleSchedule, PlateauSchedule>;

struct ScheduleConfig {
  std::string type = "none";
  ScheduleOptions options;  // the alternative `type` names

  // Makes `options` the alternative `type` names (default options when it was another); throws
  // for a type that is not one of kScheduleTypes.
  void select();
};

// The scaler section is the library's own GradScalerOptions, but for `enabled`, whose default
// depends on the precision.
struct ScalerConfig {
  std::optional<bool> enabled;     // nullopt: on for float16 only
  amp::GradScalerOptions options;  // its `enabled` is set from the key above when a run is built
};

// Data-parallel training (docs/distributed.md). The whole section is left out of resolved.yaml
// while every key has its default, so configs that do not use it keep their config hash.
struct DistributedConfig {
  // The section is omitted from resolved.yaml (and so from the config hash) while at defaults.
  static constexpr bool kOmittedWhenDefault = true;
  int64_t nproc = 1;                // local ranks `mantissa train` starts (1: none)
  std::string backend = "auto";     // auto gloo nccl
  double timeout_s = 1800.0;        // rendezvous and each collective
  std::string store_path;           // empty: a fresh directory per launch / MANTISSA_STORE_PATH
  std::string rendezvous = "auto";  // auto file mpi
  bool drop_last = false;           // the sampler drops the tail instead of padding
  double bucket_cap_mb = 25.0;      // DistributedDataParallel options
  double first_bucket_mb = 1.0;
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool broadcast_buffers = true;
  int64_t zero_stage = 0;  // 0: plain DDP; 1: sharded optimizer state; 2: and gradients
};

// Float8 training of the model's Linear layers (docs/mixed-precision.md, nn/float8.h). The whole
// section is left out of resolved.yaml while every key has its default, so configs that do not
// use it keep their config hash.
struct Float8TrainingConfig {
  static constexpr bool kOmittedWhenDefault = true;
  std::string recipe = "none";      // none, or a name Float8LinearConfig::from_recipe takes
  std::vector<std::string> layers;  // patterns of the Linear layers to convert; empty: all
  std::vector<std::string> skip;    // patterns of Linear layers left in high precision
  // recipe delayed only (Float8DelayedScaling, TE's DelayedScaling defaults).
  int64_t amax_history_len = 1024;
  std::string amax_compute_algo = "max";
  double margin = 0.0;
  bool stats = false;  // per-layer saturation, underflow and amax in the metrics
};

struct Config {
  std::string name;  // run name; default: the config file's stem ("toy")
  uint64_t seed = 0;
  // Refuse what is not run-to-run deterministic (runner/training/determinism.h).
  bool deterministic = true;
  std::string device = "auto";  // auto cpu cuda cuda:N
  std::string precision = "float32";
  bool master_weights = false;
  std::string param_dtype;  // the parameters' storage: "" (float32) or bfloat16 (no float32 copy)
  int64_t steps = 100;      // > 0: stop after this many steps ...
  int64_t epochs = 0;       // ... else after this many epochs (one of the two is set)
  int64_t log_every = 10;
  int64_t eval_every = 0;
  int64_t checkpoint_every = 0;
  int64_t keep_last = 3;
  double clip_grad_norm = 0.0;   // 0: off
  bool cuda_graphs = false;      // TrainerOptions::cuda_graphs
  bool tensorboard = true;       // TrainerOptions::tensorboard
  int64_t grad_accum_steps = 0;  // micro-batches per optimizer step; 0 and 1: one
  double peak_tflops = 0.0;      // the device's peak for MFU where the built-in table has none
  // A byte-level GPT run prints this many sampled bytes after training (0: none).
  int64_t sample_tokens = 0;
  std::string sample_prompt;  // empty: a newline
  int64_t sample_top_k = 0;   // 0: every byte
  ModelConfig model;
  DataConfig data;
  LossConfig loss;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  ScalerConfig scaler;
  DistributedConfig distributed;
  Float8TrainingConfig float8;

  // Where each key's value came from ("line 7", "--set", "default"), and its text as written;
  // keys are dotted paths ("optimizer.lr", "model.layers.2.out").
  std::map<std::string, std::string> origin;
  std::map<std::string, std::string> value_text;
  std::string source;  // the file name, or "<default config>"

  // "optimizer.lr = -1 (line 5)": the key, its value and where it came from.
  std::string describe(const std::string& path) const;
  // Throws ConfigError("config error: <describe(path)>: <problem>").
  [[noreturn]] void fail(const std::string& path, const std::string& problem) const;
};

// Parses YAML text. `source` names it in messages; `overrides` are "key.path=value" strings
// (values parsed as YAML, so `--set data.shuffle=false` is a bool) applied before validation;
// `default_name` is used when the config has no `name:`.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides = {},
                    const std::string& default_name = "run");
// Reads `path` (a missing or unreadable file is a ConfigError) and parses it; the default name
// is the file's stem.
Config parse_config_file(const std::string& path, const std::vector<std::string>& overrides = {});

// The resolved config as YAML: every key with its value, defaults filled in. parse_config of
// this text gives back an equal Config.
std::string to_yaml(const Config& config);
// A short stable hash of a resolved config's text (16 hex digits, FNV-1a 64).
std::string config_hash(const std::string& text);

// The key reference of docs/configs.md (Markdown tables, one per section), made from the
// declarations in config_schema.h.
std::string config_reference_markdown();

// The key of `candidates` nearest to `key` by edit distance, or "" if none is close.
std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace mantissa::runner
