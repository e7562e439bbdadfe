#include "runner/training/build_from_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <variant>

#include "amp/autocast.h"
#include "autograd/functions.h"
#include "distributed/init.h"
#include "engine/generator.h"
#include "nn/float8.h"
#include "nn/loss.h"
#include "nn/optim/adagrad.h"
#include "nn/optim/adam.h"
#include "nn/optim/muon.h"
#include "nn/optim/nadam.h"
#include "nn/optim/param_groups.h"
#include "nn/optim/radam.h"
#include "nn/optim/rmsprop.h"
#include "nn/optim/schedulers.h"
#include "nn/optim/sgd.h"
#include "nn/transformer.h"
#include "runner/config/config_keys.h"
#include "runner/config/config_paths.h"
#include "runner/data/token_data.h"
#include "runner/files/atomic_file.h"
#include "runner/files/hf_gpt2_config.h"
#include "runner/files/safetensors.h"
#include "runner/files/text.h"
#include "runner/text/bpe_tokenizer.h"
#include "runner/training/determinism.h"
#include "runner/training/distributed_run.h"
#include "runner/training/float8_layers.h"
#include "runner/training/model_builder.h"
#include "runner/training/optimizer_groups.h"

namespace mantissa::runner {
namespace {

// The dtype `precision` autocasts to: float16 or bfloat16, or float32 for float32 and tf32. The
// config's schema has checked the name, so every use reads the parsed precision, not the text.
DType autocast_dtype(const Config& c) { return amp::Precision::parse(c.precision).dtype(); }

// Only regular files are read (runner/files/atomic_file.h): a FIFO or /dev/zero is a config error
// here, before anything runs, rather than a read that waits or never ends.
void require_exists(const Config& c, const std::string& key, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::string tried;
    for (const std::string& place : places_tried(c, path))
      tried += (tried.empty() ? "" : ", ") + place;
    c.fail(key, "file not found (looked for " + tried + ")");
  }
}

void require_file(const Config& c, const std::string& key, const std::string& path) {
  require_exists(c, key, path);
  if (const std::string problem = regular_file_problem(path); !problem.empty())
    c.fail(key, problem);
}

// A Hugging Face config.json beside model.init_from says what the GPT its weights belong to
// computes (n_head, the activation, LayerNorm's epsilon), which the weights do not: the model the
// config builds must be that one, or its logits would quietly differ.
void check_init_from_hf_config(const Config& c) {
  if (!is_gpt(c.model)) return;
  std::optional<HfGpt2Config> hf;
  try {
    hf = read_hf_gpt2_config_beside(c.model.init_from);
  } catch (const Error& e) {
    c.fail("model.init_from", first_line(e.what()));
  }
  if (!hf) return;
  const nn::GPTConfig g = gpt_config(c.model);
  const auto same = [&](const char* key, const std::string& ours, const std::string& theirs,
                        const std::string& note = "") {
    if (ours == theirs) return;
    const std::string path = std::string("model.") + key;
    const auto o = c.origin.find(path);
    const bool set = o != c.origin.end() && o->second != "default";
    c.fail(path, (set ? "is " + ours : "the model would use " + ours + ", its default") + ", but " +
                     hf->path + " (beside model.init_from) says " + theirs + note + "; " +
                     (set ? "set " : "add the line ") + path + ": " + theirs);
  };
  const auto num = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  same("n_layer", std::to_string(g.n_layer), std::to_string(hf->gpt.n_layer));
  same("n_head", std::to_string(g.n_head), std::to_string(hf->gpt.n_head));
  same("n_embd", std::to_string(g.n_embd), std::to_string(hf->gpt.n_embd));
  same("block_size", std::to_string(g.block_size), std::to_string(hf->gpt.block_size));
  same("vocab_size", std::to_string(g.vocab_size), std::to_string(hf->gpt.vocab_size));
  same("activation", g.activation, hf->gpt.activation,
       " (activation_function " + hf->activation_function + ")");
  same("layer_norm_eps", num(g.layer_norm_eps), num(hf->gpt.layer_norm_eps));
}

// The key that names the data's input tensor or file.
std::string input_key(const Config& c) {
  return c.data.type == "safetensors" ? "data.inputs"
         : c.data.type == "mnist"     ? "data.images"
                                      : "data.path";
}

// The model computes in float32 (autocast lowers it inside), and a NaN or infinity in the data
// poisons every step it is in: both are config errors before anything is written. A token model
// takes int64 ids instead.
void check_values(const Config& c, const Dataset& data) {
  if (is_gpt(c.model)) {
    if (data.input_dtype() != DType::Int64) {
      c.fail(input_key(c), "the data's inputs are " + std::string(dtype_name(data.input_dtype())) +
                               ", but model.preset " + c.model.preset + " takes int64 token ids");
    }
    return;
  }
  if (data.input_dtype() != DType::Float32) {
    c.fail(input_key(c), "the data's inputs are " + std::string(dtype_name(data.input_dtype())) +
                             ", but the model takes float32 inputs; store them as float32");
  }
  const auto* td = dynamic_cast<const TensorDataset*>(&data);
  if (td == nullptr) return;
  const std::pair<const Tensor*, const char*> parts[] = {{&td->inputs(), "inputs"},
                                                         {&td->targets(), "targets"}};
  for (const auto& [t, what] : parts) {
    if (!is_floating(t->dtype()) || t->numel() == 0 || all_finite(*t).item<bool>()) continue;
    const Tensor rows = t->reshape({t->size(0), -1});
    const std::vector<double> v = rows.to(DType::Float64).to_vector<double>();
    const int64_t per_row = rows.size(1);
    size_t first = 0;
    while (first < v.size() && std::isfinite(v[first])) ++first;
    const bool inputs = t == &td->inputs();
    c.fail(inputs || c.data.type != "safetensors" ? input_key(c) : "data.targets",
           std::string("the data's ") + what + " hold " + std::to_string(v[first]) +
               " at example " + std::to_string(static_cast<int64_t>(first) / per_row) +
               " (0-based): NaN and infinity are not trainable values");
  }
}

// Checks the model's output against the data's targets for the configured loss.
void check_output(const Config& c, const Dataset& data) {
  const Shape in = data.input_shape();
  const Shape out = infer_output_shape(c, in, "data input shape " + shape_str(in));
  const Shape target = data.target_shape();
  const std::string key = output_key(c.model);
  const std::string t = "the data's targets are " + shape_str(target) + " " +
                        std::string(dtype_name(data.target_dtype()));
  if (c.loss.reduction == "batchmean" && c.loss.type != "kl_div") {
    c.fail("loss.reduction", "batchmean applies to loss.type kl_div only (use mean)");
  }
  if (c.loss.type == "bce" && autocast_dtype(c) != DType::Float32) {
    // binary_cross_entropy refuses autocast, as PyTorch's: the output's probabilities lose the
    // distance from 0 and 1 that the loss needs.
    c.fail("loss.type", "bce is unsafe to autocast (precision " + c.precision +
                            "): use bce_with_logits on the logits, which is safe, or precision "
                            "float32");
  }
  if (const auto* ce = std::get_if<CrossEntropyLossOptions>(&c.loss.options)) {
    if (const size_t n = ce->weight.size();
        n > 0 && out.size() == 1 && static_cast<int64_t>(n) != out[0]) {
      c.fail("loss.weight", "has " + std::to_string(n) + " weights, but the model outputs " +
                                std::to_string(out[0]) + " class scores (give one per class)");
    }
    // One label per example against [classes], or one per position of a sequence ([T] labels
    // against [T, classes], as a language model's next-token targets).
    const bool sequence = target.size() == 1;
    if (data.target_dtype() != DType::Int64 || target.size() > 1) {
      c.fail("loss.type",
             "cross_entropy needs int64 class labels (one per example, or [T] per sequence), but " +
                 t + (c.data.type == "csv" ? "; set data.target_dtype: int64" : ""));
    }
    if (!sequence && out.size() != 1) {
      c.fail(key,
             "cross_entropy needs the model to output [classes], but it outputs " + shape_str(out));
    }
    if (sequence && (out.size() != 2 || out[0] != target[0])) {
      c.fail(key, "cross_entropy over " + shape_str(target) +
                      " labels needs the model to output [" + std::to_string(target[0]) +
                      ", classes], but it outputs " + shape_str(out));
    }
    if (auto* td = dynamic_cast<const TensorDataset*>(&data); td && td->targets().numel() > 0) {
      // Labels equal to loss.ignore_index mark examples the loss skips, as in PyTorch; the others
      // must name one of the model's classes, and at least one example must count. A negative
      // label that is not the ignored one is the data's fault, whatever the model.
      const Tensor labels = td->targets();
      const Tensor counted = labels != ce->ignore_index;
      const Tensor negative = logical_and(counted, labels < 0).reshape({-1});
      if (negative.any().item<bool>()) {
        const int64_t at = argmax(negative.to(DType::Int32)).item<int64_t>();
        c.fail(c.data.type == "safetensors" ? "data.targets" : input_key(c),
               "the data's labels hold " +
                   std::to_string(labels.reshape({-1}).narrow(0, at, 1).item<int64_t>()) +
                   (labels.dim() == 1 ? " at example " : " at flattened position ") +
                   std::to_string(at) +
                   " (0-based), a negative label that is not loss.ignore_index (" +
                   std::to_string(ce->ignore_index) +
                   "): labels are classes from 0, or loss.ignore_index for examples to skip");
      }
      const int64_t n_counted = counted.sum().item<int64_t>();
      if (n_counted == 0) {
        c.fail("loss.ignore_index", "every label of the data equals loss.ignore_index (" +
                                        std::to_string(ce->ignore_index) +
                                        "), so no example counts in the loss");
      }
      const Tensor real = where(counted, labels, zeros({}, TensorOptions().dtype(DType::Int64)));
      const Tensor below = logical_and(counted, labels < 0);
      const int64_t max_label = real.max().item<int64_t>();
      if (below.sum().item<int64_t>() > 0 || max_label >= out.back()) {
        const int64_t min_label =
            where(counted, labels, full({}, max_label, TensorOptions().dtype(DType::Int64)))
                .min()
                .item<int64_t>();
        c.fail(key, "the model outputs " + std::to_string(out.back()) +
                        " class scores, but the data's labels go from " +
                        std::to_string(min_label) + " to " + std::to_string(max_label) +
                        " (labels equal to loss.ignore_index, " + std::to_string(ce->ignore_index) +
                        ", are skipped)");
      }
    }
    return;
  }
  if (!is_floating(data.target_dtype())) {
    c.fail("loss.type", c.loss.type + " needs floating-point targets, but " + t +
                            " (class labels go with loss.type: cross_entropy)");
  }
  std::vector<std::pair<const char*, const std::vector<double>*>> weights;
  if (const auto* b = std::get_if<BceWithLogitsLossOptions>(&c.loss.options)) {
    weights = {{"loss.pos_weight", &b->pos_weight}, {"loss.weight", &b->weight}};
  } else if (const auto* b = std::get_if<BceLossOptions>(&c.loss.options)) {
    weights = {{"loss.weight", &b->weight}};
  }
  for (const auto& [name, w] : weights) {
    // Broadcast against the output's last dim, as PyTorch does.
    const size_t n = w->size();
    const int64_t classes = out.size() > 0 ? out[out.size() - 1] : 1;
    if (n > 1 && static_cast<int64_t>(n) != classes) {
      c.fail(name, "has " + std::to_string(n) + " weights, but the model outputs " +
                       shape_str(out) + " per example (give one weight, or " +
                       std::to_string(classes) + ")");
    }
  }
  if (!(out == target)) {
    c.fail(key, "the model outputs " + shape_str(out) + " per example, but " + t + " (loss " +
                    c.loss.type + " compares them elementwise)");
  }
}

// A float32 [n] tensor of the weights on `device`; undefined for none.
Tensor weight_tensor(const std::vector<double>& weights, Device device) {
  if (weights.empty()) return Tensor();
  std::vector<float> w(weights.begin(), weights.end());
  return from_vector(w, Shape{static_cast<int64_t>(w.size())}).to(device);
}

LossFn make_loss(const LossConfig& l, Device device) {
  namespace F = nn::functional;
  const nn::Reduction r = l.reduction == "sum" ? nn::Reduction::Sum : nn::Reduction::Mean;
  struct Make {
    nn::Reduction r;
    const std::string& reduction;
    Device device;

    LossFn operator()(const MseLossOptions&) const {
      return [r = r](const Tensor& o, const Tensor& t) { return F::mse_loss(o, t, r); };
    }
    LossFn operator()(const L1LossOptions&) const {
      return [r = r](const Tensor& o, const Tensor& t) { return F::l1_loss(o, t, r); };
    }
    LossFn operator()(const SmoothL1LossOptions& s) const {
      return [r = r, beta = s.beta](const Tensor& o, const Tensor& t) {
        return F::smooth_l1_loss(o, t, r, beta);
      };
    }
    LossFn operator()(const HuberLossOptions& s) const {
      return [r = r, delta = s.delta](const Tensor& o, const Tensor& t) {
        return F::huber_loss(o, t, r, delta);
      };
    }
    LossFn operator()(const BceLossOptions& s) const {
      return [r = r, weight = weight_tensor(s.weight, device)](const Tensor& o, const Tensor& t) {
        return F::binary_cross_entropy(o, t, r, weight);
      };
    }
    LossFn operator()(const KlDivLossOptions& s) const {
      return [kr = nn::parse_kl_div_reduction(reduction), log_target = s.log_target](
                 const Tensor& o, const Tensor& t) { return F::kl_div(o, t, kr, log_target); };
    }
    LossFn operator()(const CrossEntropyLossOptions& s) const {
      // [B, T, V] logits against [B, T] labels are B * T examples, as nanoGPT flattens them.
      return [r = r, ls = s.label_smoothing, ii = s.ignore_index,
              weight = weight_tensor(s.weight, device)](const Tensor& o, const Tensor& t) {
        if (o.dim() == 3 && t.dim() == 2) {
          return F::cross_entropy(o.reshape({-1, o.size(2)}), t.reshape({-1}), r, ls, ii, weight);
        }
        return F::cross_entropy(o, t, r, ls, ii, weight);
      };
    }
    LossFn operator()(const BceWithLogitsLossOptions& s) const {
      return [r = r, pos_weight = weight_tensor(s.pos_weight, device),
              weight = weight_tensor(s.weight, device)](const Tensor& o, const Tensor& t) {
        return F::binary_cross_entropy_with_logits(o, t, r, pos_weight, weight);
      };
    }
  };
  schema::check_selected(l.options, l.type, kLossTypes, "loss");
  return std::visit(Make{r, l.reduction, device}, l.options);
}

// The optimizer of each alternative of OptimizerOptions, in the same order.
using OptimizerClasses = std::tuple<optim::SGD, optim::Adam, optim::AdamW, optim::RMSprop,
                                    optim::Adagrad, optim::NAdam, optim::RAdam, optim::Muon>;
static_assert(std::tuple_size_v<OptimizerClasses> == std::variant_size_v<OptimizerOptions>);

// P: the parameters (one group with the optimizer's options) or parameter groups.
template <size_t I = 0, typename P>
std::shared_ptr<optim::Optimizer> make_optimizer(const OptimizerConfig& o, P params) {
  if constexpr (I == std::variant_size_v<OptimizerOptions>) {
    MT_THROW("optimizer: no optimizer for options index ", o.options.index());
  } else {
    if (o.options.index() != I) return make_optimizer<I + 1>(o, std::move(params));
    schema::check_selected(o.options, o.type, kOptimizerTypes, "optimizer");
    using Optimizer = std::tuple_element_t<I, OptimizerClasses>;
    return std::make_shared<Optimizer>(std::move(params), std::get<I>(o.options));
  }
}

// The scheduler of the schedule's options; `run_steps` is the run's optimizer steps (what a
// total_steps of 0 means). nullptr for `none`.
std::shared_ptr<optim::LRScheduler> make_scheduler(const Config& c, optim::Optimizer& opt,
                                                   int64_t run_steps) {
  using Ptr = std::shared_ptr<optim::LRScheduler>;
  struct Make {
    const Config& c;
    optim::Optimizer& opt;
    int64_t run_steps;

    int64_t steps(int64_t total) const { return total > 0 ? total : run_steps; }

    Ptr operator()(const NoSchedule&) const { return nullptr; }
    Ptr operator()(const StepSchedule& s) const {
      return std::make_shared<optim::StepLR>(opt, s.step_size, s.gamma);
    }
    Ptr operator()(const CosineSchedule& s) const {
      const int64_t total = steps(s.total_steps);
      if (s.warmup_steps > total) {
        c.fail("schedule.warmup_steps", "must be <= the run's " + std::to_string(total) + " steps");
      }
      return std::make_shared<optim::CosineWarmupLR>(opt, s.warmup_steps, total, s.min_lr);
    }
    Ptr operator()(const MultiStepSchedule& s) const {
      if (s.milestones.empty()) c.fail("schedule.milestones", "multistep needs at least one step");
      return std::make_shared<optim::MultiStepLR>(opt, s.milestones, s.gamma);
    }
    Ptr operator()(const ExponentialSchedule& s) const {
      return std::make_shared<optim::ExponentialLR>(opt, s.gamma);
    }
    Ptr operator()(const CosineAnnealingSchedule& s) const {
      return std::make_shared<optim::CosineAnnealingLR>(opt, steps(s.total_steps), s.min_lr);
    }
    Ptr operator()(const LinearSchedule& s) const {
      return std::make_shared<optim::LinearLR>(opt, s.start_factor, s.end_factor, s.total_iters);
    }
    Ptr operator()(const OneCycleSchedule& s) const {
      if (s.cycle_momentum && c.optimizer.type == "adagrad") {
        c.fail("schedule.cycle_momentum",
               "optimizer.type adagrad has no momentum to cycle; set it to false");
      }
      if (s.total_steps > 0 && s.total_steps < run_steps) {
        c.fail("schedule.total_steps", "must be >= the run's " + std::to_string(run_steps) +
                                           " steps (onecycle cannot step past its end)");
      }
      optim::OneCycleOptions o;
      o.max_lr = {s.max_lr > 0 ? s.max_lr : c.optimizer.lr()};
      o.total_steps = steps(s.total_steps);
      o.pct_start = s.pct_start;
      o.anneal_strategy = s.anneal_strategy;
      o.cycle_momentum = s.cycle_momentum;
      o.base_momentum = s.base_momentum;
      o.max_momentum = s.max_momentum;
      o.div_factor = s.div_factor;
      o.final_div_factor = s.final_div_factor;
      o.three_phase = s.three_phase;
      return std::make_shared<optim::OneCycleLR>(opt, std::move(o));
    }
    Ptr operator()(const PlateauSchedule& s) const {
      optim::PlateauOptions o;
      o.mode = s.mode;
      o.factor = s.factor;
      o.patience = s.patience;
      o.threshold = s.threshold;
      o.threshold_mode = s.threshold_mode;
      o.cooldown = s.cooldown;
      o.min_lr = {s.min_lr};
      o.eps = s.eps;
      return std::make_shared<optim::ReduceLROnPlateau>(opt, std::move(o));
    }
  };
  schema::check_selected(c.schedule.options, c.schedule.type, kScheduleTypes, "schedule");
  return std::visit(Make{c, opt, run_steps}, c.schedule.options);
}

// A backend this build or this device cannot use is refused before anything runs.
void check_distributed(const Config& c, Device device, const RunPlacement& placement) {
  if (placement.world_size == 1) return;
  const distributed::Backend backend = resolve_backend(c.distributed, device);
  if (!distributed::is_available(backend)) {
    c.fail("distributed.backend", std::string("this build of mantissa has no ") +
                                      distributed::backend_name(backend) + " backend");
  }
  if (backend == distributed::Backend::Nccl && !device.is_cuda()) {
    c.fail("distributed.backend", "nccl needs a CUDA device; this run's device is " + device.str());
  }
  if (backend == distributed::Backend::Gloo && device.is_cuda()) {
    c.fail("distributed.backend", "gloo reduces CPU tensors; this run's device is " + device.str());
  }
  if (c.distributed.rendezvous == "mpi" && !distributed::has_mpi_rendezvous()) {
    c.fail("distributed.rendezvous",
           "this build of mantissa has no MPI rendezvous (MPI was not found when it was built)");
  }
}

RunObjects build_common(const Config& c, const RunPlacement& placement = {}) {
  RunObjects r;
  r.config = c;
  r.device = resolve_device(c, placement.local_rank);
  check_distributed(c, r.device, placement);
  if (!c.model.init_from.empty()) {
    require_file(c, "model.init_from", c.model.init_from);
    check_init_from_hf_config(c);
  }
  r.dataset = build_dataset(c);
  check_values(c, *r.dataset);
  check_output(c, *r.dataset);
  r.train_data = r.dataset;
  if (auto* blocks = dynamic_cast<const TokenBlockDataset*>(r.dataset.get())) {
    // Token data splits by position: the tail (or val_path) is the validation part.
    try {
      const TokenBlockOptions to = blocks->options();
      const std::string val_path = c.data.val_path();
      const int64_t val_blocks = c.data.val_blocks();
      if (!val_path.empty()) {
        TokenBlockOptions vo = to;
        vo.random_offsets = false;
        vo.max_blocks = val_blocks;
        require_file(c, "data.val_path", val_path);
        auto val = map_token_file(val_path, blocks->file().format());
        const int64_t nv = val->tokens();
        r.val_data = std::make_shared<TokenBlockDataset>(std::move(val), 0, nv, vo);
      } else {
        const TokenSplit split =
            split_token_blocks(blocks->file_ptr(), to, c.data.val_split, val_blocks);
        r.train_data = split.train;
        r.val_data = split.val;
      }
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      c.fail(c.data.val_path().empty() ? "data.val_split" : "data.val_path", first_line(e.what()));
    }
  } else if (c.data.val_split > 0) {
    Split split;
    try {
      split = random_split(r.dataset, c.data.val_split, c.data.seed);
    } catch (const Error& e) {
      c.fail("data.val_split", first_line(e.what()));
    }
    r.train_data = split.train;
    r.val_data = split.val;
  }
  DataLoaderOptions lo;
  lo.batch_size = c.data.batch_size;
  lo.shuffle = c.data.shuffle;
  lo.seed = c.data.seed;
  lo.drop_last = c.data.drop_last;
  lo.device = r.device;
  lo.sampler = {placement.world_size, placement.rank, c.distributed.drop_last};
  try {
    r.train_loader = std::make_shared<DataLoader>(r.train_data, lo);
  } catch (const Error& e) {
    c.fail("data.batch_size", first_line(e.what()));
  }
  if (r.train_loader->batches_per_epoch() == 0) {
    c.fail("data.batch_size", "larger than the " + std::to_string(r.train_data->size()) +
                                  " training examples with data.drop_last: true (no batches)");
  }
  if (r.val_data) {
    DataLoaderOptions vo = lo;
    vo.shuffle = false;
    vo.drop_last = false;
    vo.sampler = {};  // every rank evaluates the whole split
    r.val_loader = std::make_shared<DataLoader>(r.val_data, vo);
  }

  manual_seed(c.seed);
  r.model = build_run_model(c.model);
  if (!c.model.init_from.empty()) {
    try {
      load_model_weights(*r.model, c.model.init_from);
    } catch (const Error& e) {
      c.fail("model.init_from", first_line(e.what()));
    }
  }
  r.model->to(r.device);
  apply_float8(c, *r.model, r.startup_lines);
  // master_weights: the model itself is stored in the low precision (half the memory) and the
  // optimizer updates float32 master copies, writing the rounded result back after each step.
  if (c.master_weights && autocast_dtype(c) != DType::Float32) r.model->to(autocast_dtype(c));
  // param_dtype: bfloat16 stores the model in bfloat16 with no float32 copy anywhere.
  if (c.param_dtype == "bfloat16") r.model->to(DType::BFloat16);
  r.loss = make_loss(c.loss, r.device);
  r.forward = [m = r.model.get()](const Tensor& x) { return m->forward(x); };
  if (auto* gpt = dynamic_cast<nn::GPTImpl*>(r.model.get()); gpt && c.model.gpt.fused_head_loss) {
    // The model's forward stops at the hidden states; the loss applies the output layer in chunks.
    const auto* ce = std::get_if<CrossEntropyLossOptions>(&c.loss.options);
    if (ce == nullptr || !ce->weight.empty()) {
      c.fail("model.fused_head_loss",
             ce == nullptr ? "needs loss.type cross_entropy, got " + c.loss.type
                           : std::string("does not take class weights (loss.weight)"));
    }
    r.forward = [gpt](const Tensor& x) { return gpt->hidden_states(x); };
    r.loss = [gpt, reduction = c.loss.reduction == "sum" ? Reduction::Sum : Reduction::Mean,
              ls = ce->label_smoothing,
              ii = ce->ignore_index](const Tensor& hidden, const Tensor& target) {
      return gpt->head_loss(hidden, target, reduction, ls, ii);
    };
  }
  return r;
}

}  // namespace

Device resolve_device(const Config& c, int local_rank) {
  if (c.device == "auto") return try_gpu(local_rank);
  Device d = Device::cpu();
  try {
    d = Device(c.device == "cuda" ? "cuda:" + std::to_string(local_rank) : c.device);
    check_device_exists(d);
  } catch (const Error& e) {
    c.fail("device", first_line(e.what()));
  }
  return d;
}

namespace {

// One overload per dataset. A read error blames the key that names the file it read.
struct DatasetMaker {
  const Config& c;
  std::string key = "data.path";

  template <typename O, typename F>
  std::shared_ptr<Dataset> synthetic(O o, F make) {
    o.seed = c.data.seed;
    key = "data.samples";  // out of memory for data.samples, most often
    return make(o);
  }
  std::shared_ptr<Dataset> operator()(const TeacherOptions& o) {
    return synthetic(o, make_teacher_dataset);
  }
  std::shared_ptr<Dataset> operator()(const SineOptions& o) {
    return synthetic(o, make_sine_dataset);
  }
  std::shared_ptr<Dataset> operator()(const SpiralsOptions& o) {
    return synthetic(o, make_spirals_dataset);
  }
  std::shared_ptr<Dataset> operator()(const CsvOptions& o) {
    require_file(c, key, o.path);
    // As in every reader: a label equal to the loss's ignore_index is read, and skipped by it.
    const auto* ce = std::get_if<CrossEntropyLossOptions>(&c.loss.options);
    return load_csv_dataset(o, ce ? std::optional<int64_t>(ce->ignore_index) : std::nullopt);
  }
  std::shared_ptr<Dataset> operator()(const SafetensorsDataOptions& o) {
    require_file(c, key, o.path);
    return load_safetensors_dataset(o);
  }
  std::shared_ptr<Dataset> operator()(const MnistOptions& o) {
    key = "data.images";
    require_file(c, key, o.images);
    key = "data.labels";
    require_file(c, key, o.labels);
    key = "data.images";
    return load_mnist_idx(o);
  }
  std::shared_ptr<Dataset> operator()(const TextDataOptions& o) {
    return tokens(o.path, o.block_size, TokenFormat::Bytes);
  }
  std::shared_ptr<Dataset> operator()(const TokensBinDataOptions& o) {
    if (!o.tokenizer.empty()) {
      key = "data.tokenizer";
      require_exists(c, key, o.tokenizer);  // a file or a folder
      const int64_t vocab = BpeTokenizer::load(o.tokenizer).vocab_size();
      if (is_gpt(c.model) && c.model.gpt.vocab_size < vocab) {
        c.fail("model.vocab_size", "is " + std::to_string(c.model.gpt.vocab_size) +
                                       ", smaller than data.tokenizer's vocabulary (" +
                                       std::to_string(vocab) + " tokens)");
      }
      key = "data.path";
    }
    return tokens(o.path, o.block_size, TokenFormat::Uint16);
  }
  std::shared_ptr<Dataset> tokens(const std::string& path, int64_t block_size, TokenFormat format) {
    require_file(c, key, path);
    auto file = map_token_file(path, format);
    TokenBlockOptions o;
    o.block_size = block_size;
    o.seed = c.data.seed;
    if (is_gpt(c.model)) o.vocab_size = c.model.gpt.vocab_size;
    const int64_t n = file->tokens();
    return std::make_shared<TokenBlockDataset>(std::move(file), 0, n, o);
  }
};

}  // namespace

std::shared_ptr<Dataset> build_dataset(const Config& c) {
  schema::check_selected(c.data.options, c.data.type, kDataTypes, "data");
  DatasetMaker make{c};
  try {
    return std::visit(make, c.data.options);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    c.fail(make.key, first_line(e.what()));
  }
}

RunObjects build_run(const Config& c, std::string config_text, const RunPlacement& placement) {
  RunObjects r = build_common(c, placement);
  r.config_text = config_text.empty() ? to_yaml(c) : std::move(config_text);
  r.config_hash = config_hash(r.config_text);
  if (c.deterministic) {
    // Refused before any file is written, rather than a run that silently is not reproducible.
    const auto parts = nondeterministic_parts(*r.model, r.device);
    if (!parts.empty()) {
      c.fail("deterministic",
             parts.front() +
                 (parts.size() > 1 ? " (and " + std::to_string(parts.size() - 1) + " more)" : "") +
                 "; set deterministic: false to allow it, or use device: cpu");
    }
  }
  if (std::holds_alternative<optim::MuonOptions>(c.optimizer.options)) {
    r.optimizer = make_optimizer(c.optimizer, muon_param_groups(c, *r.model, r.startup_lines));
  } else if (c.optimizer.decay_min_ndim > 0) {
    try {
      r.optimizer = make_optimizer(
          c.optimizer, optim::decay_groups(r.model->named_parameters(), c.optimizer.weight_decay(),
                                           c.optimizer.decay_min_ndim));
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      c.fail("optimizer.decay_min_ndim", first_line(e.what()));
    }
  } else {
    r.optimizer = make_optimizer(c.optimizer, r.model->parameters());
  }
  // As the Trainer will (for planned memory); the state dtype and stochastic rounding with the
  // run's seed: the same config draws the same rounding bits, also when resumed.
  auto configure = [c](optim::Optimizer& opt) {
    opt.set_master_weights(c.master_weights);
    if (!c.optimizer.state_dtype.empty()) opt.set_state_dtype(parse_dtype(c.optimizer.state_dtype));
    if (c.optimizer.stochastic_rounding) opt.set_stochastic_rounding(true, c.seed);
  };
  configure(*r.optimizer);
  if (c.distributed.zero_stage > 0 && r.optimizer->has_scalar_state()) {
    c.fail("distributed.zero_stage", "optimizer.type " + c.optimizer.type +
                                         " keeps a per-parameter scalar that ZeRO cannot shard; "
                                         "use another optimizer or zero_stage 0");
  }
  r.make_optimizer = [c, configure](std::vector<optim::ParamGroup> groups) {
    std::shared_ptr<optim::Optimizer> opt = make_optimizer(c.optimizer, std::move(groups));
    configure(*opt);
    return opt;
  };

  int64_t total_steps = c.steps;
  const int64_t accum = std::max<int64_t>(1, c.grad_accum_steps);
  if (c.steps <= 0) {
    if (__builtin_mul_overflow(c.epochs, r.train_loader->batches_per_epoch(), &total_steps)) {
      c.fail("epochs", std::to_string(c.epochs) + " epochs of " +
                           std::to_string(r.train_loader->batches_per_epoch()) +
                           " batches is more steps than int64 can count");
    }
    total_steps = total_steps / accum + (total_steps % accum != 0 ? 1 : 0);  // as the Trainer's
  }
  r.scheduler = make_scheduler(c, *r.optimizer, total_steps);
  r.make_scheduler = [c, total_steps](optim::Optimizer& opt) {
    return make_scheduler(c, opt, total_steps);
  };

  TrainerOptions& t = r.trainer_options;
  t.max_steps = c.steps;
  t.max_epochs = c.epochs > 0 ? c.epochs : 1;
  t.device = r.device;
  t.precision = amp::Precision::parse(c.precision);  // checked by the config's schema
  t.scaler = c.scaler.options;
  t.scaler->enabled = c.scaler.enabled.value_or(t.precision == amp::Precision::Float16);
  t.master_weights = c.master_weights;
  t.clip_grad_norm = c.clip_grad_norm;
  t.cuda_graphs = c.cuda_graphs;
  t.grad_accum_steps = accum;
  t.peak_flops = c.peak_tflops * 1e12;
  if (const auto* gpt = dynamic_cast<const nn::GPTImpl*>(r.model.get()))
    t.flops_per_token = gpt->flops_per_token();
  t.loss_sums_over_batch = c.loss.reduction == "sum";
  t.log_every = c.log_every;
  t.tensorboard = c.tensorboard;
  t.eval_every = c.eval_every;
  t.checkpoint_every = c.checkpoint_every;
  t.keep_last = c.keep_last;
  t.seed = c.seed;
  t.deterministic = c.deterministic;
  t.config_hash = r.config_hash;
  t.config_text = r.config_text;
  return r;
}

RunObjects build_eval(const Config& c) { return build_common(c); }

}  // namespace mantissa::runner
