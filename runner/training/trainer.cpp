// The Trainer's loop, evaluation, checkpoints and summary. The per-step path
// does no host reads unless the step is logged (or clipping asks for the
// gradient norm): the loss is summed on the device and read once per log
// interval.
#include "runner/training/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "autograd/functions.h"
#include "autograd/graph_memory.h"
#include "autograd/node.h"
#include "cuda/memory.h"
#include "cuda/stream.h"
#include "distributed/zero.h"
#include "engine/error.h"
#include "engine/factory.h"
#include "engine/fast_path_stats.h"
#include "engine/generator.h"
#include "engine/graph_capture.h"
#include "nn/clip_grad.h"
#include "nn/layers.h"
#include "runner/files/atomic_file.h"
#include "runner/files/run_lock.h"
#include "runner/training/checkpoint.h"
#include "runner/training/determinism.h"
#include "runner/training/metrics.h"
#include "runner/training/metrics_json.h"
#include "runner/training/peak_flops.h"
#include "runner/training/progress.h"
#include "runner/training/tensorboard.h"

namespace mantissa::runner {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

amp::GradScalerOptions default_scaler(const TrainerOptions& o) {
  if (o.scaler) return *o.scaler;
  amp::GradScalerOptions s;
  s.enabled = o.precision == amp::Precision::Float16;
  return s;
}

}  // namespace

// What the loop carries between steps besides the counters in Trainer.
struct Trainer::Impl {
  // float64 0-d on the device: the sum of step losses since the last log.
  // float64 so that a sum split by a checkpoint (host part + device part)
  // rounds as the unsplit one does.
  Tensor loss_sum;
  Tensor step_loss;  // float64 0-d: the last step's loss (ReduceLROnPlateau without evaluation)
  int64_t loss_count = 0;
  double pending_loss_sum = 0.0;  // restored from a checkpoint taken between logs
  int64_t samples_since_log = 0;
  int64_t tokens_since_log = 0;
  double peak_flops = 0.0;  // options' or the GPU table's; 0: no mfu
  Clock::time_point last_log_time;
  Clock::time_point session_start;
  double prior_wall_time_s = 0.0;  // from the runs this one resumes
  int64_t last_checkpoint_step = -1;
  int64_t last_eval_step = -1;
  std::optional<EvalMetrics> last_eval;
  double last_grad_norm = std::numeric_limits<double>::quiet_NaN();
  Tensor last_grad_norm_device;  // clipping on a CUDA device: the norm, read when logged
  // cuda_graphs: the captured step, the static tensors it reads (the batch) and writes (its loss
  // and gradient norm, float64 0-d), the scaler's result of every replay, and the counts.
  std::optional<cuda::GraphedStep> graphed;
  Tensor graph_input, graph_target, graph_loss, graph_norm;
  std::optional<amp::StepResult> graph_result;
  std::string graph_fallback;
  int64_t graphed_steps = 0, eager_steps = 0;
  std::vector<std::shared_ptr<Callback>> builtins;
  std::vector<Tensor> params;   // for clipping, collected once per fit()
  nn::AmaxReduce amax_reduce;   // set_float8_amax_reduce
  bool delayed_float8 = false;  // the model has delayed float8 layers (found once per fit())
  std::optional<Float8Saturation> first_saturation;
  // The metrics' bytes_per_parameter, counted at the first record (the state exists after the
  // first step and keeps its size; counting reads each parameter's step count, a sync on CUDA).
  double bytes_per_parameter = 0.0;
  std::optional<int64_t> activation_bytes;  // TrainingMemory::activation_bytes
};

Trainer::Trainer(std::shared_ptr<nn::Module> model, ForwardFn forward, LossFn loss,
                 std::shared_ptr<optim::Optimizer> optimizer,
                 std::shared_ptr<DataLoader> train_loader, TrainerOptions options)
    : model_(std::move(model)),
      forward_(std::move(forward)),
      loss_(std::move(loss)),
      optimizer_(std::move(optimizer)),
      train_loader_(std::move(train_loader)),
      options_(std::move(options)),
      scaler_(default_scaler(options_)),
      impl_(std::make_unique<Impl>()) {
  MT_CHECK(model_ != nullptr && optimizer_ != nullptr && train_loader_ != nullptr,
           "Trainer: model, optimizer and train loader are required");
  MT_CHECK(forward_ && loss_, "Trainer: forward and loss functions are required");
  MT_CHECK(options_.max_steps > 0 || options_.max_epochs > 0,
           "Trainer: max_steps or max_epochs must be positive, got max_steps ", options_.max_steps,
           " and max_epochs ", options_.max_epochs);
  MT_CHECK(options_.max_steps >= 0 && options_.max_epochs >= 0 && options_.log_every >= 0 &&
               options_.eval_every >= 0 && options_.checkpoint_every >= 0 &&
               options_.keep_last >= 0,
           "Trainer: step counts and intervals must be >= 0");
  MT_CHECK(options_.clip_grad_norm >= 0.0, "Trainer: clip_grad_norm must be >= 0, got ",
           options_.clip_grad_norm);
  MT_CHECK(options_.grad_accum_steps >= 1, "Trainer: grad_accum_steps must be >= 1, got ",
           options_.grad_accum_steps);
  MT_CHECK(options_.flops_per_token >= 0.0 && options_.peak_flops >= 0.0,
           "Trainer: flops_per_token and peak_flops must be >= 0, got ", options_.flops_per_token,
           " and ", options_.peak_flops);
  impl_->peak_flops = options_.peak_flops > 0
                          ? options_.peak_flops
                          : device_peak_flops(options_.device, options_.precision).value_or(0.0);
  if (options_.deterministic) {  // by module type, so before anything touches the device
    const auto parts = nondeterministic_parts(*model_, options_.device);
    MT_CHECK(parts.empty(), "Trainer: deterministic is set, but ", parts.empty() ? "" : parts[0],
             "; set TrainerOptions::deterministic = false to allow it");
  }
  model_->to(options_.device);
  train_loader_->set_device(options_.device);
  optimizer_->set_master_weights(options_.master_weights);
}

Trainer::~Trainer() = default;

void Trainer::set_scheduler(std::shared_ptr<optim::LRScheduler> scheduler) {
  MT_CHECK(scheduler == nullptr || &scheduler->optimizer() == optimizer_.get(),
           "Trainer.set_scheduler: the scheduler drives a different optimizer");
  scheduler_ = std::move(scheduler);
}

void Trainer::set_float8_amax_reduce(nn::AmaxReduce reduce) {
  MT_CHECK(step_ == 0, "Trainer.set_float8_amax_reduce: must be called before training starts");
  impl_->amax_reduce = std::move(reduce);
}

void Trainer::set_scaler(const amp::GradScalerOptions& options) {
  MT_CHECK(step_ == 0, "Trainer.set_scaler: must be called before training starts");
  options_.scaler = options;
  scaler_ = amp::GradScaler(options);
}

void Trainer::set_val_loader(std::shared_ptr<DataLoader> loader) {
  if (loader) loader->set_device(options_.device);
  val_loader_ = std::move(loader);
}

void Trainer::set_zero(std::shared_ptr<distributed::ZeroRedundancyOptimizer> zero,
                       bool checkpoints) {
  MT_CHECK(step_ == 0 && !resumed_, "Trainer.set_zero: must be called before training starts");
  MT_CHECK(zero == nullptr || &zero->optimizer() == optimizer_.get(),
           "Trainer.set_zero: the trainer's optimizer must be the ZeroRedundancyOptimizer's "
           "optimizer()");
  zero_ = std::move(zero);
  zero_checkpoints_ = checkpoints;
}

bool Trainer::takes_checkpoints() const {
  return zero_ ? zero_checkpoints_ : !options_.run_dir.empty();
}

TrainingMemory Trainer::memory_now() const {
  TrainingMemory m = training_memory(*model_, *optimizer_);
  if (zero_) m.gradient_bytes = zero_->gradient_bytes();
  m.activation_bytes = impl_->activation_bytes;
  return m;
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  MT_CHECK(callback != nullptr, "Trainer.add_callback: null callback");
  callbacks_.push_back(std::move(callback));
}

int64_t Trainer::epoch() const { return train_loader_->epoch(); }

int64_t Trainer::total_steps() const {
  if (options_.max_steps > 0) return options_.max_steps;
  // An epoch's last step may take micro-batches of the next epoch.
  const int64_t micro = options_.max_epochs * train_loader_->batches_per_epoch();
  return (micro + options_.grad_accum_steps - 1) / options_.grad_accum_steps;
}

TrainerState Trainer::trainer_state() const {
  TrainerState s;
  s.step = step_;
  s.epoch = epoch();
  s.loader = train_loader_->state();
  s.steps_skipped = steps_skipped();
  s.best_loss = best_loss_;
  s.last_loss = last_loss_;
  // The loss accumulated since the last log, so the first record after a resume
  // is the same.
  s.pending_loss_sum =
      impl_->pending_loss_sum +
      (impl_->loss_count > 0 && impl_->loss_sum.defined() ? impl_->loss_sum.item<double>() : 0.0);
  s.pending_loss_count = impl_->loss_count;
  s.pending_samples = impl_->samples_since_log;
  s.wall_time_s = impl_->prior_wall_time_s + seconds_since(impl_->session_start);
  s.precision = std::string(options_.precision.name());
  s.seed = options_.seed;
  s.data_fingerprint = train_loader_->dataset().fingerprint();
  s.float8_first_saturation = impl_->first_saturation;
  return s;
}

void Trainer::clip_gradients() {
  if (options_.clip_grad_norm <= 0.0) return;
  // Clip the true gradients: unscale first (PyTorch's recipe), then step() does not unscale
  // again. On an overflowing step the norm is inf/NaN and the step is skipped anyway.
  scaler_.unscale_(*optimizer_);
  if (zero_) {
    impl_->last_grad_norm = zero_->clip_grad_norm_(options_.clip_grad_norm);
  } else if (options_.device.is_cuda()) {
    // No host read, eager or captured alike, so that both clip the same way.
    impl_->last_grad_norm_device =
        nn::clip_grad_norm_on_device_(impl_->params, options_.clip_grad_norm);
  } else {
    impl_->last_grad_norm = nn::clip_grad_norm_(impl_->params, options_.clip_grad_norm);
  }
}

std::string Trainer::graph_refusal() {
  if (!options_.device.is_cuda() && !cuda::detail::graph_emulation())
    return "the device is " + options_.device.str() + ", not a CUDA device";
  if (options_.grad_accum_steps > 1)
    return "grad_accum_steps is " + std::to_string(options_.grad_accum_steps) +
           " (each micro-batch comes from the loader)";
  if (zero_) return "ZeRO waits on the host for its collectives";
  if (optimizer_->step_reads_host())
    return std::string(optimizer_->fused() ? "the " : "the unfused ") + optimizer_->name() +
           " step reads on the host";
  // The rate on the device whenever the optimizer can read it there, so that a replay follows
  // any change (a schedule's, or a callback's set_lr); without it, only a fixed rate may be baked
  // into the graph.
  try {
    optimizer_->set_lr_on_device(true);
  } catch (const Error&) {
    if (scheduler_)
      return std::string("a schedule changes the learning rate, and ") + optimizer_->name() +
             " reads it on the host (Adam and AdamW read it on the device)";
  }
  return "";
}

bool Trainer::graphable(const Batch& batch) {
  if (!options_.cuda_graphs || !impl_->graph_fallback.empty()) return false;
  if (!impl_->graph_input.defined()) {
    autograd::NoGradGuard no_grad;
    impl_->graph_input = batch.input.clone();
    impl_->graph_target = batch.target.clone();
    const auto f64 = TensorOptions(options_.device).dtype(DType::Float64);
    impl_->graph_loss = zeros({}, f64);
    impl_->graph_norm = zeros({}, f64);
    return true;
  }
  const auto same = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype();
  };
  if (same(batch.input, impl_->graph_input) && same(batch.target, impl_->graph_target)) return true;
  if (detail::count_fallback("cuda.graphed_step", "shape", false))
    MT_THROW("Trainer: cuda_graphs: a batch of input shape ", batch.input.shape(),
             " differs from the captured step's ", impl_->graph_input.shape());
  return false;
}

// The step as train_one_step runs it (one micro-batch), reading the static batch and writing the
// static loss and norm; the first calls run it eagerly on the graph's stream, then it is captured
// and replayed (cuda::GraphedStep).
amp::StepResult Trainer::graphed_step(const Batch& batch) {
  if (!impl_->graphed) {
    impl_->graphed.emplace([this] {
      optimizer_->zero_grad();
      const Tensor loss = backward_micro_batch(impl_->graph_input, impl_->graph_target, 1);
      clip_gradients();
      impl_->graph_result = scaler_.step(*optimizer_);
      scaler_.update();
      if (impl_->delayed_float8) nn::update_float8_scales(*model_, impl_->amax_reduce);
      autograd::NoGradGuard no_grad;
      impl_->graph_loss.copy_(loss.detach().reshape({}).to(DType::Float64));
      if (impl_->last_grad_norm_device.defined())
        impl_->graph_norm.copy_(impl_->last_grad_norm_device.reshape({}).to(DType::Float64));
    });
  }
  for (auto& cb : callbacks_) cb->on_micro_batch(*this, 0, true);
  {
    autograd::NoGradGuard no_grad;
    impl_->graph_input.copy_(batch.input);
    impl_->graph_target.copy_(batch.target);
  }
  optimizer_->sync_lr_to_device();  // the replay reads this step's rate
  if (impl_->graphed->warming_up()) {
    // The eager warm-ups vet the step: whatever in it a capture would refuse (a host read, a
    // random draw) is found here, before any capture starts, and the run goes on eagerly.
    ::mantissa::detail::CaptureProbe probe;
    (*impl_->graphed)();
    if (!probe.first().empty()) {
      impl_->graph_fallback = "the step cannot be captured: " + probe.first();
      if (detail::count_fallback("cuda.graphed_step", "uncapturable", false))
        MT_THROW("Trainer: cuda_graphs: ", impl_->graph_fallback);
    }
  } else {
    try {
      (*impl_->graphed)();
    } catch (const GraphCaptureError& e) {
      // The warm-ups ran clean, so something the probes do not know refused the capture. The
      // step did not run and the host may have counted part of it: stop rather than go on.
      MT_THROW(
          "Trainer: cuda_graphs: capturing the training step failed although its eager "
          "warm-up steps ran clean: ",
          e.what(), "; set cuda_graphs: false for this model");
    }
  }
  detail::count_fast_path("cuda.graphed_step", impl_->graphed->captured() ? "replay" : "warmup");
  if (impl_->graphed->captured()) {
    ++impl_->graphed_steps;
  } else {
    ++impl_->eager_steps;
  }
  count_batch(batch);
  {
    autograd::NoGradGuard no_grad;
    record_step_loss(impl_->graph_loss.clone());
    if (options_.clip_grad_norm > 0.0) impl_->last_grad_norm_device = impl_->graph_norm.clone();
  }
  return *impl_->graph_result;  // a copy: its found_inf is rewritten by each replay
}

// Returns whether the optimizer stepped, read lazily: converting it to bool is a device sync,
// done only on logged steps.
amp::StepResult Trainer::train_one_step(const Batch& first) {
  if (graphable(first)) return graphed_step(first);
  if (options_.cuda_graphs) ++impl_->eager_steps;
  if (zero_) {
    zero_->zero_grad();
  } else {
    optimizer_->zero_grad();
  }
  const int64_t micro = options_.grad_accum_steps;
  Tensor step_loss;  // float64 0-d: the mean of the micro-batches' losses
  for (int64_t m = 0; m < micro; ++m) {
    std::optional<Batch> later;
    while (m > 0 && !later) later = train_loader_->next();  // nullopt once at an epoch's end
    const Batch& batch = m == 0 ? first : *later;
    for (auto& cb : callbacks_) cb->on_micro_batch(*this, m, m + 1 == micro);
    const Tensor loss = backward_micro_batch(batch.input, batch.target, micro);
    {
      autograd::NoGradGuard no_grad;
      const Tensor l = loss.detach().reshape({}).to(DType::Float64);
      step_loss = m == 0 ? l : step_loss.add(l);
    }
    count_batch(batch);
  }
  if (zero_) zero_->prepare_gradients();
  clip_gradients();
  amp::StepResult stepped = scaler_.step(*optimizer_);
  scaler_.update();
  // Delayed float8 scales for the next step (TE updates them after each step, skipped or not).
  if (impl_->delayed_float8) nn::update_float8_scales(*model_, impl_->amax_reduce);
  if (zero_) zero_->gather_parameters();
  {
    autograd::NoGradGuard no_grad;
    record_step_loss(step_loss);
  }
  return stepped;
}

Tensor Trainer::backward_micro_batch(const Tensor& input, const Tensor& target, int64_t micro) {
  Tensor loss;
  {
    amp::autocast guard(options_.device, options_.precision,
                        /*enabled=*/options_.precision != amp::Precision::Float32);
    loss = loss_(forward_(input), target);
  }
  MT_CHECK(loss.numel() == 1, "Trainer: the loss function must return one value, got shape ",
           loss.shape());
  if (!impl_->activation_bytes && loss.grad_fn() != nullptr) {
    std::vector<Tensor> kept = model_->parameters();
    for (const Tensor& b : model_->buffers()) kept.push_back(b);
    impl_->activation_bytes = autograd::saved_tensor_bytes(loss, kept).total;
  }
  // The mean over the step's micro-batches, as one batch of all of them would give (for a
  // mean-reduced loss and equal batches); one micro-batch is left as it is.
  if (micro > 1) loss = loss / static_cast<double>(micro);
  scaler_.scale(loss).backward();
  return loss;
}

void Trainer::count_batch(const Batch& batch) {
  impl_->samples_since_log += batch.size();
  if (batch.input.dtype() == DType::Int64) impl_->tokens_since_log += batch.input.numel();
}

void Trainer::record_step_loss(const Tensor& step_loss) {
  impl_->loss_sum = impl_->loss_count == 0 ? step_loss.clone() : impl_->loss_sum.add(step_loss);
  impl_->step_loss = step_loss;
  ++impl_->loss_count;
}

void Trainer::emit_log(bool skipped, double lr) {
  const double elapsed = seconds_since(impl_->last_log_time);
  StepMetrics m;
  m.step = step_;
  m.epoch = epoch();
  const double sum = impl_->pending_loss_sum + impl_->loss_sum.item<double>();
  m.loss = sum / static_cast<double>(impl_->loss_count);
  m.lr = lr;
  m.loss_scale = scaler_.get_scale();
  m.skipped = skipped;
  m.skipped_total = steps_skipped();
  m.grad_norm = impl_->last_grad_norm_device.defined()
                    ? impl_->last_grad_norm_device.to(DType::Float64).item<double>()
                    : impl_->last_grad_norm;
  m.samples_per_s = elapsed > 0 ? static_cast<double>(impl_->samples_since_log) / elapsed : 0.0;
  m.step_time_ms = 1000.0 * elapsed / static_cast<double>(impl_->loss_count);
  m.tokens_per_s = elapsed > 0 ? static_cast<double>(impl_->tokens_since_log) / elapsed : 0.0;
  if (m.tokens_per_s > 0 && options_.flops_per_token > 0 && impl_->peak_flops > 0)
    m.mfu = options_.flops_per_token * m.tokens_per_s / impl_->peak_flops;
  if (impl_->bytes_per_parameter == 0.0)
    impl_->bytes_per_parameter = memory_now().bytes_per_parameter();
  m.bytes_per_parameter = impl_->bytes_per_parameter;
  m.float8 = nn::take_float8_stats(*model_);
  if (!impl_->first_saturation) {
    Float8Saturation worst;
    for (const nn::Float8LayerStats& l : m.float8)
      for (int r = 0; r < 3; ++r)
        if (l.tensors[r].saturated > worst.values)
          worst = {m.step, l.layer, nn::kFloat8TensorNames[r], l.tensors[r].saturated};
    if (worst.values > 0) impl_->first_saturation = worst;
  }
  m.float8_first_saturation = impl_->first_saturation;
  m.diverging = !std::isfinite(m.loss) || (best_loss_ > 0 && m.loss > 10.0 * best_loss_);
  last_loss_ = m.loss;
  if (std::isfinite(m.loss) && !(m.loss >= best_loss_)) best_loss_ = m.loss;
  impl_->loss_count = 0;
  impl_->pending_loss_sum = 0.0;
  impl_->samples_since_log = 0;
  impl_->tokens_since_log = 0;
  impl_->last_log_time = Clock::now();
  for (auto& cb : impl_->builtins) cb->on_step_end(*this, m);
  for (auto& cb : callbacks_) cb->on_step_end(*this, m);
}

EvalMetrics evaluate_model(nn::Module& model, const ForwardFn& forward, const LossFn& loss_fn,
                           DataLoader& loader, const EvalOptions& options) {
  loader.set_device(options.device);
  const LoaderPosition position = loader.state();
  const bool was_training = model.is_training();
  model.eval();
  autograd::NoGradGuard no_grad;
  double loss_sum = 0.0;
  int64_t samples = 0, correct = 0;
  bool classification = false;
  loader.set_epoch(loader.epoch());
  try {
    while (auto batch = loader.next()) {
      Tensor output;
      Tensor loss;
      {
        amp::autocast guard(options.device, options.precision,
                            options.precision != amp::Precision::Float32);
        output = forward(batch->input);
        loss = loss_fn(output, batch->target);
      }
      const int64_t n = batch->size();
      // The per-example mean over the loader: a batch mean counts n times, a batch sum once.
      loss_sum +=
          loss.item<double>() * (options.loss_sums_over_batch ? 1.0 : static_cast<double>(n));
      samples += n;
      if (batch->target.dtype() == DType::Int64 && output.dim() == 2) {
        classification = true;
        const auto pred = output.argmax(1).to_vector<int64_t>();
        const auto truth = batch->target.to_vector<int64_t>();
        for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
      }
    }
  } catch (...) {
    loader.load_state(position);
    model.train(was_training);
    throw;
  }
  loader.load_state(position);
  model.train(was_training);
  EvalMetrics m;
  m.samples = samples;
  m.loss = samples > 0 ? loss_sum / static_cast<double>(samples) : std::nan("");
  if (classification) m.accuracy = static_cast<double>(correct) / static_cast<double>(samples);
  return m;
}

EvalMetrics Trainer::evaluate(DataLoader& loader) {
  EvalMetrics m =
      evaluate_model(*model_, forward_, loss_, loader,
                     {options_.device, options_.precision, options_.loss_sums_over_batch});
  m.step = step_;
  m.epoch = epoch();
  return m;
}

void Trainer::run_eval() {
  EvalMetrics m = evaluate(*val_loader_);
  impl_->last_eval = m;
  impl_->last_eval_step = step_;
  if (scheduler_ && scheduler_->takes_metric()) {
    // The evaluation is valid whether or not the last training step was skipped.
    optimizer_->set_last_step_skipped(false);
    scheduler_->step(m.loss);
  }
  for (auto& cb : impl_->builtins) cb->on_eval(*this, m);
  for (auto& cb : callbacks_) cb->on_eval(*this, m);
}

std::string Trainer::save_checkpoint(const std::string& path) {
  if (zero_ && path.empty() && options_.run_dir.empty()) {
    // A rank that does not write: it takes part in gathering the optimizer state.
    (void)zero_->consolidated_state_dict();
    impl_->last_checkpoint_step = step_;
    return "";
  }
  std::string target = path;
  if (target.empty()) {
    MT_CHECK(!options_.run_dir.empty(),
             "Trainer.save_checkpoint: no path given and no run_dir to put "
             "checkpoints in");
    const fs::path dir = fs::path(options_.run_dir) / "checkpoints";
    fs::create_directories(dir);
    target = (dir / checkpoint_filename(step_)).string();
  }
  CheckpointParts parts;
  parts.model = model_.get();
  parts.optimizer = optimizer_.get();
  parts.zero = zero_.get();
  parts.scaler = &scaler_;
  parts.scheduler = scheduler_.get();
  parts.trainer_state = trainer_state();
  parts.config_hash = options_.config_hash;
  parts.config_text = options_.config_text;
  runner::save_checkpoint(target, parts);
  impl_->last_checkpoint_step = step_;
  for (auto& cb : impl_->builtins) cb->on_checkpoint(*this, target);
  for (auto& cb : callbacks_) cb->on_checkpoint(*this, target);
  if (path.empty()) prune_checkpoints();
  return target;
}

void Trainer::prune_checkpoints() {
  if (options_.keep_last <= 0) return;
  std::vector<std::string> left;  // checkpoints it would not resume from: never deleted
  runner::prune_checkpoints((fs::path(options_.run_dir) / "checkpoints").string(),
                            options_.keep_last, options_.config_hash, &left);
}

void Trainer::resume_from(const std::string& checkpoint_path) {
  // Refused before anything is restored: another run's checkpoint, or this run's over other data.
  const CheckpointInfo info = read_checkpoint(checkpoint_path);
  if (!options_.config_hash.empty()) {
    // Every checkpoint records a config hash (read_checkpoint refuses an empty one), so a missing
    // hash is no way around this check.
    MT_CHECK(info.config_hash == options_.config_hash, "Trainer.resume_from: '", checkpoint_path,
             "' was written with config hash ", info.config_hash, " but this run's config hash is ",
             options_.config_hash);
  }
  if (info.trainer_state) {
    const std::string& saved = info.trainer_state->data_fingerprint;
    const std::string now = train_loader_->dataset().fingerprint();
    MT_CHECK(saved.empty() || now.empty() || saved == now,
             "Trainer.resume_from: the training data (", train_loader_->dataset().describe(),
             ") is not the data of the run that wrote '", checkpoint_path, "' (fingerprint ", now,
             ", the checkpoint's ", saved,
             "): a data file changed since; restore it, or start a new run");
  }
  CheckpointParts parts;
  parts.model = model_.get();
  parts.optimizer = optimizer_.get();
  parts.zero = zero_.get();
  parts.scaler = &scaler_;
  parts.scheduler = scheduler_.get();
  load_checkpoint(checkpoint_path, parts);
  MT_CHECK(parts.trainer_state.has_value(), "Trainer.resume_from: '", checkpoint_path,
           "' has no trainer state (not written by a Trainer)");
  const TrainerState& s = *parts.trainer_state;
  // Its counters were range-checked on reading (validate_checkpoint_info); the loader checks its
  // position against its own batches per epoch.
  train_loader_->load_state(s.loader);
  step_ = s.step;
  best_loss_ = s.best_loss;
  last_loss_ = s.last_loss;
  impl_->pending_loss_sum = s.pending_loss_sum;
  impl_->loss_count = s.pending_loss_count;
  impl_->samples_since_log = s.pending_samples;
  impl_->loss_sum = zeros({}, TensorOptions(options_.device).dtype(DType::Float64));
  impl_->prior_wall_time_s = s.wall_time_s;
  impl_->first_saturation = s.float8_first_saturation;
  impl_->last_checkpoint_step = step_;
  resumed_from_step_ = step_;
  resumed_ = true;
}

void Trainer::write_summary(const TrainSummary& summary) {
  const fs::path path = fs::path(options_.run_dir) / "summary.json";
  write_file_atomically(path.string(), json::dump(summary_json(summary), 2) + "\n");
}

TrainSummary Trainer::fit() {
  if (!resumed_ && step_ == 0) manual_seed(options_.seed);
  impl_->session_start = impl_->last_log_time = Clock::now();
  impl_->builtins.clear();
  std::optional<RunDirLock> lock;  // held until the run's last file is written
  if (!options_.run_dir.empty()) {
    fs::create_directories(options_.run_dir);
    lock.emplace(options_.run_dir);
    impl_->builtins.push_back(std::make_shared<MetricsJsonlWriter>(
        (fs::path(options_.run_dir) / "metrics.jsonl").string()));
    impl_->builtins.push_back(std::make_shared<HumanLog>(
        (fs::path(options_.run_dir) / "train.log").string(), options_.log_to_stdout));
    if (options_.tensorboard) {
      impl_->builtins.push_back(std::make_shared<TensorBoardWriter>(
          (fs::path(options_.run_dir) / "tensorboard").string()));
    }
  }
  if (options_.progress) impl_->builtins.push_back(std::make_shared<ProgressBar>());
  for (auto& cb : impl_->builtins) cb->on_train_begin(*this);
  for (auto& cb : callbacks_) cb->on_train_begin(*this);

  const int64_t total = total_steps();
  model_->train();
  impl_->params = model_->parameters();
  // Not a module walk on every step of a model without delayed float8 layers.
  impl_->delayed_float8 = !nn::float8_delayed_layers(*model_).empty();
  if (zero_) scaler_.set_found_inf_hook(zero_->found_inf_hook());
  if (options_.cuda_graphs && !impl_->graphed) {
    impl_->graph_fallback = graph_refusal();
    if (!impl_->graph_fallback.empty() &&
        detail::count_fallback("cuda.graphed_step", "refused", false))
      MT_THROW("Trainer: cuda_graphs: ", impl_->graph_fallback);
  }
  stop_requested_ = false;
  while (step_ < total && !stop_requested_) {
    std::optional<Batch> batch = train_loader_->next();
    if (!batch) continue;  // epoch boundary: the loader moved to the next epoch
    const bool last = step_ + 1 == total;
    const bool log_now = last || (options_.log_every > 0 && (step_ + 1) % options_.log_every == 0);
    const double lr = optimizer_->lr(0);  // the lr this step uses (the scheduler moves it after)
    const amp::StepResult stepped = train_one_step(*batch);
    ++step_;
    if (scheduler_ && !scheduler_->takes_metric()) {
      scheduler_->step();
    } else if (scheduler_ && !val_loader_) {
      // A metric-driven schedule watches the training loss when the run does not evaluate
      // (a host read of the loss each step); otherwise it steps after each evaluation.
      scheduler_->step(impl_->step_loss.item<double>());
    }
    if (log_now || stop_requested_) emit_log(!stepped.stepped(), lr);
    for (auto& cb : impl_->builtins) cb->on_batch_end(*this);
    for (auto& cb : callbacks_) cb->on_batch_end(*this);
    if (val_loader_ && options_.eval_every > 0 && step_ % options_.eval_every == 0) run_eval();
    if (takes_checkpoints() && options_.checkpoint_every > 0 &&
        step_ % options_.checkpoint_every == 0)
      save_checkpoint();
  }
  if (val_loader_ && impl_->last_eval_step != step_) run_eval();
  if (takes_checkpoints() && impl_->last_checkpoint_step != step_) save_checkpoint();

  TrainSummary summary;
  summary.final_loss = last_loss_;
  summary.best_loss = best_loss_;
  summary.final_eval = impl_->last_eval;
  summary.steps = step_;
  summary.total_steps = total;
  summary.steps_skipped = steps_skipped();
  summary.epochs = train_loader_->epoch() + (train_loader_->index() > 0 ? 1 : 0);
  summary.resumed_from_step = resumed_from_step_;
  summary.wall_time_s = impl_->prior_wall_time_s + seconds_since(impl_->session_start);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  summary.peak_memory_bytes.emplace_back("cpu", static_cast<int64_t>(usage.ru_maxrss) * 1024);
  if (options_.device.is_cuda())
    summary.peak_memory_bytes.emplace_back(
        options_.device.str(), cuda::memory_stats(options_.device.index()).peak_allocated_bytes);
  summary.memory = memory_now();
  for (const auto& [name, m] : model_->named_modules()) {
    const auto* linear = dynamic_cast<const nn::LinearImpl*>(m.get());
    if (linear != nullptr && linear->float8) summary.float8_layers.push_back(name);
  }
  summary.float8_first_saturation = impl_->first_saturation;
  if (options_.cuda_graphs) {
    summary.graphed_steps = impl_->graphed_steps;
    summary.eager_steps = impl_->eager_steps;
    summary.graph_fallback = impl_->graph_fallback;
  }
  if (!options_.run_dir.empty()) write_summary(summary);
  for (auto& cb : impl_->builtins) cb->on_train_end(*this, summary);
  for (auto& cb : callbacks_) cb->on_train_end(*this, summary);
  return summary;
}

double TrainingMemory::bytes_per_parameter() const {
  if (parameters == 0) return 0.0;
  return static_cast<double>(weight_bytes + gradient_bytes + optimizer_state_bytes) /
         static_cast<double>(parameters);
}

TrainingMemory training_memory(const nn::Module& model, const optim::Optimizer& optimizer) {
  TrainingMemory m;
  for (const Tensor& p : model.parameters()) {
    m.parameters += p.numel();
    m.weight_bytes += p.nbytes();
    if (p.grad().defined()) m.gradient_bytes += p.grad().nbytes();
  }
  size_t index = 0;  // the optimizer's parameter ids: positions across its groups
  for (const optim::ParamGroup& g : optimizer.param_groups()) {
    for (size_t i = 0; i < g.params.size(); ++i, ++index) {
      const optim::ParamState* state = optimizer.state(index);
      if (state == nullptr) continue;
      for (const auto& [name, buffer] : state->buffers) {
        if (buffer.defined()) m.optimizer_state_bytes += buffer.nbytes();
      }
    }
  }
  return m;
}

TrainingMemory planned_training_memory(const nn::Module& model, const optim::Optimizer& optimizer) {
  TrainingMemory m;
  for (const Tensor& p : model.parameters()) {
    m.parameters += p.numel();
    m.weight_bytes += p.nbytes();
    m.gradient_bytes += p.nbytes();
  }
  for (const optim::ParamGroup& g : optimizer.param_groups()) {
    for (const Tensor& p : g.params) m.optimizer_state_bytes += optimizer.planned_state_bytes(g, p);
  }
  return m;
}

}  // namespace mantissa::runner
