// The Trainer: PyTorch's mixed-precision training loop as a library object.
//
//   per step: zero_grad -> forward + loss under autocast -> scaler.scale(loss).backward()
//             -> [unscale_ + clip_grad_norm_] -> scaler.step(opt) -> scaler.update()
//             -> [update_float8_scales] -> scheduler.step()
//
// with callbacks for logging, evaluation and checkpoints, an optional run directory
// (metrics.jsonl, train.log, checkpoints/, summary.json), and exact resume: a run of N steps and
// a run stopped after a checkpoint and resumed from it with fresh objects agree bitwise, because
// the checkpoint carries the model, optimizer, scaler, scheduler, RNG states and the loader
// position.
//
// The loss is read back to the host only on log/eval steps (a device sync on CUDA); between them
// it is accumulated on the device.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "engine/device.h"
#include "engine/tensor.h"
#include "nn/float8.h"
#include "nn/module.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/optimizer.h"
#include "runner/data/data.h"
#include "runner/training/trainer_state.h"

namespace mantissa::distributed {
class ZeroRedundancyOptimizer;
}  // namespace mantissa::distributed

namespace mantissa::runner {

struct TrainerOptions {
  // Stop after max_steps optimizer steps (taken or skipped) when > 0, else after max_epochs.
  int64_t max_steps = 0;
  int64_t max_epochs = 1;
  Device device = Device::cpu();
  amp::Precision precision = amp::Precision::Float32;
  // GradScaler options; by default enabled for float16 only, as is PyTorch practice (bfloat16
  // has float32's range).
  std::optional<amp::GradScalerOptions> scaler{};
  bool master_weights = false;
  double clip_grad_norm = 0.0;  // > 0: clip the total 2-norm (after unscaling)
  // Loader batches (micro-batches) per optimizer step: each one's loss is divided by their number
  // and backpropagated, gradients add up, and the optimizer and scaler step once. Checkpoints and
  // logs happen between steps only, so a resume is as exact as without accumulation.
  int64_t grad_accum_steps = 1;
  // Model FLOPs per token of a training step (forward and backward, e.g. nn::GPT's
  // flops_per_token()); with a peak, the metrics report mfu. 0: unknown.
  double flops_per_token = 0.0;
  // The device's peak FLOP/s for mfu; 0: from the GPU table (runner/training/peak_flops.h), none on
  // the CPU.
  double peak_flops = 0.0;
  int64_t log_every = 10;  // steps between metrics records (0: never; the last step always)
  int64_t eval_every = 0;  // steps between evaluations on the validation loader (0: at the end)
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: only at the end, with a run_dir)
  int64_t keep_last = 3;         // checkpoints kept in run_dir/checkpoints (0: keep all)
  std::string run_dir{};         // empty: no files are written
  // With a run_dir: the logged metrics also as TensorBoard scalars in run_dir/tensorboard
  // (runner/training/tensorboard.h).
  bool tensorboard = true;
  uint64_t seed = 0;  // seeds the engine's generators at the start of a fresh run
  // Refuse (at construction) a model/device with parts that are not run-to-run deterministic;
  // what is guaranteed is in runner/training/determinism.h.
  bool deterministic = true;
  // The loss function sums over the batch (reduction sum) rather than averaging: evaluate() then
  // adds batch losses as they are instead of weighting means by the batch size, so its per-example
  // loss does not depend on the batch size either way.
  bool loss_sums_over_batch = false;
  // Capture the training step into a CUDA graph after warm-up steps and replay it
  // (cuda::GraphedStep): forward, backward, clipping, the GradScaler and the fused optimizer step
  // with no host synchronisation, the learning rate read on the device. A run whose steps cannot
  // be captured (not a CUDA device, gradient accumulation, ZeRO, an unfused optimizer, a schedule
  // with an optimizer that reads its rate on the host) runs them eagerly and says why in the
  // summary (cuda_graphs.fallback); so does a step whose batch has another shape (an epoch's
  // short last batch). The fast-path counters count both ("cuda.graphed_step").
  bool cuda_graphs = false;
  bool progress = true;        // progress bar (TTY) or periodic plain lines on stderr
  bool log_to_stdout = false;  // also echo the human log lines to stdout
  // Stored in checkpoints (the CLI passes the resolved config) and checked on resume.
  std::string config_hash{};
  std::string config_text{};
};

struct StepMetrics {
  int64_t step = 0;  // steps done, counting this one (1-based)
  int64_t epoch = 0;
  double loss = 0.0;  // mean loss since the previous record (unscaled)
  double lr = 0.0;
  double loss_scale = 1.0;
  bool skipped = false;  // this step was skipped by the scaler (inf/NaN gradients)
  int64_t skipped_total = 0;
  double grad_norm = std::numeric_limits<double>::quiet_NaN();  // NaN unless clipping
  double samples_per_s = 0.0;
  double step_time_ms = 0.0;  // mean since the previous record
  // Token inputs (int64 ids) only: input tokens of the interval's micro-batches per second, and
  // model FLOPs utilisation when the model's FLOPs per token and the device's peak are known.
  double tokens_per_s = 0.0;
  std::optional<double> mfu{};
  // Weights, gradients and optimizer state over the parameters (TrainingMemory), as held at the
  // run's first record (after its first step).
  double bytes_per_parameter = 0.0;
  // With float8 stats tracked (nn::track_float8_stats): each layer's since the last record, and
  // the run's first saturation so far.
  std::vector<nn::Float8LayerStats> float8{};
  std::optional<Float8Saturation> float8_first_saturation{};
  // The loss is not finite, or above 10 times the lowest (positive) logged loss before it.
  bool diverging = false;
};

struct EvalMetrics {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0.0;
  std::optional<double> accuracy{};  // classification (int64 targets)
  int64_t samples = 0;
};

// What the training state holds, counted at the end of a run: the model's parameters, their
// gradients and the optimizer's per-parameter state (moments, momentum buffers, float32 master
// copies; the 8-byte step counts aside). bytes_per_parameter() is the figure the ZeRO paper and
// llm.c quote (16 for float32 weights with AdamW).
struct TrainingMemory {
  int64_t parameters = 0;  // elements of the model's parameters
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;  // the parameters' defined gradients
  int64_t optimizer_state_bytes = 0;
  double bytes_per_parameter() const;
  // Activations: what the forward of the run's first micro-batch kept for its backward (its
  // saved tensors, each storage once, the parameters left out: autograd::saved_tensor_bytes).
  // Set by the Trainer; not part of bytes_per_parameter.
  std::optional<int64_t> activation_bytes{};
};
TrainingMemory training_memory(const nn::Module& model, const optim::Optimizer& optimizer);
// The same before the first step: the gradients as the parameters' dtype and the optimizer state
// as its first step will create it (optim::Optimizer::planned_state_bytes).
TrainingMemory planned_training_memory(const nn::Module& model, const optim::Optimizer& optimizer);

struct TrainSummary {
  double final_loss = std::numeric_limits<double>::quiet_NaN();
  double best_loss = std::numeric_limits<double>::quiet_NaN();
  std::optional<EvalMetrics> final_eval{};
  int64_t steps = 0;
  int64_t total_steps = 0;  // what the run was asked for: steps < total_steps when it was stopped
  int64_t steps_skipped = 0;
  int64_t epochs = 0;
  int64_t resumed_from_step = 0;
  double wall_time_s = 0.0;
  std::vector<std::pair<std::string, int64_t>> peak_memory_bytes;  // per device
  TrainingMemory memory{};
  // With TrainerOptions::cuda_graphs: steps replayed from (or captured into) the graph, steps run
  // eagerly (warm-up included), and why the run could not use a graph ("" when it could).
  std::optional<int64_t> graphed_steps{};
  int64_t eager_steps = 0;
  std::string graph_fallback{};
  // The Linear layers that ran their products in float8 (nn/float8.h), by module name.
  std::vector<std::string> float8_layers{};
  std::optional<Float8Saturation> float8_first_saturation{};  // with float8 stats tracked
  bool completed() const { return steps >= total_steps; }
};

class Trainer;

// Every hook has an empty default.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Trainer&) {}
  virtual void on_step_end(Trainer&, const StepMetrics&) {}  // logged steps only
  // After every step, logged or not (keep it cheap: no device reads).
  virtual void on_batch_end(Trainer&) {}
  // Before each micro-batch's forward and backward (grad_accum_steps of them per step); `last` is
  // true for the one whose backward completes the step's gradients. A data-parallel wrapper
  // synchronises gradients on that backward only (DDP's no_sync() for the others).
  virtual void on_micro_batch(Trainer&, int64_t /*index*/, bool /*last*/) {}
  virtual void on_eval(Trainer&, const EvalMetrics&) {}
  virtual void on_checkpoint(Trainer&, const std::string& /*path*/) {}
  virtual void on_train_end(Trainer&, const TrainSummary&) {}
};

using ForwardFn = std::function<Tensor(const Tensor& input)>;
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// The mean loss (and, for int64 class labels and [batch, classes] outputs, the accuracy) of a
// model over a loader, in eval mode and without grad, under autocast for `precision`: what the
// Trainer's evaluations and `mantissa eval` report. The loader's position and the model's mode are
// left as they were.
struct EvalOptions {
  Device device = Device::cpu();
  amp::Precision precision = amp::Precision::Float32;
  bool loss_sums_over_batch = false;  // see TrainerOptions
};
EvalMetrics evaluate_model(nn::Module& model, const ForwardFn& forward, const LossFn& loss,
                           DataLoader& loader, const EvalOptions& options);

class Trainer {
 public:
  // `forward` runs the model (a module's forward is not virtual in general); the model is used for
  // parameters, train/eval mode, device placement and checkpoints.
  Trainer(std::shared_ptr<nn::Module> model, ForwardFn forward, LossFn loss,
          std::shared_ptr<optim::Optimizer> optimizer, std::shared_ptr<DataLoader> train_loader,
          TrainerOptions options);
  // For any module with `Tensor forward(const Tensor&)` and any loss module or callable.
  template <typename M, typename L>
  requires requires(M& m, const Tensor& x) {
    { m.forward(x) } -> std::convertible_to<Tensor>;
  }
  Trainer(std::shared_ptr<M> model, L loss, std::shared_ptr<optim::Optimizer> optimizer,
          std::shared_ptr<DataLoader> train_loader, TrainerOptions options)
      : Trainer(
            model, [m = model.get()](const Tensor& x) { return Tensor(m->forward(x)); },
            make_loss(std::move(loss)), std::move(optimizer), std::move(train_loader),
            std::move(options)) {}
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void set_scheduler(std::shared_ptr<optim::LRScheduler> scheduler);
  // Replaces options().scaler (before fit()).
  void set_scaler(const amp::GradScalerOptions& options);
  void set_val_loader(std::shared_ptr<DataLoader> loader);
  // ZeRO (distributed/zero.h): the trainer's optimizer must be zero->optimizer(). Each step then
  // clears the model's gradients too, hands the reduced gradients to the shards, clips the whole
  // gradient's norm, combines the GradScaler's inf checks over the ranks and gathers the
  // parameters after the step. Checkpoints hold the consolidated optimizer state, gathered by
  // every rank at the same steps: `checkpoints` tells every rank whether the run takes them (the
  // writer has the run_dir; the others only take part). Before fit().
  void set_zero(std::shared_ptr<distributed::ZeroRedundancyOptimizer> zero, bool checkpoints);
  void add_callback(std::shared_ptr<Callback> callback);
  // Data-parallel runs with delayed float8 scaling: how each step's absolute maxima are combined
  // over the ranks before the scales are updated (nn/float8.h; a max all-reduce). Before fit().
  void set_float8_amax_reduce(nn::AmaxReduce reduce);

  // Restores model, optimizer, scaler, scheduler, RNG states, loader position and counters from a
  // checkpoint written by this trainer (runner/training/checkpoint.h); the next fit() continues
  // from there.
  void resume_from(const std::string& checkpoint_path);
  // Trains until max_steps / max_epochs; returns (and, with a run_dir, writes) the summary.
  TrainSummary fit();
  // Mean loss over the whole loader (and accuracy for int64 targets), in eval mode and without
  // autograd, under the same autocast precision; restores the loader's position and train mode.
  EvalMetrics evaluate(DataLoader& loader);
  // Writes a checkpoint now (run_dir/checkpoints/step-<N>.ckpt unless a path is given); returns
  // its path. Prunes to keep_last.
  std::string save_checkpoint(const std::string& path = "");

  int64_t step() const { return step_; }
  int64_t epoch() const;
  // The step count fit() stops at (max_steps, or max_epochs * batches per epoch).
  int64_t total_steps() const;
  // Steps the scaler skipped (inf/NaN gradients) so far; reads the scaler's device counter.
  int64_t steps_skipped() const { return scaler_.steps_skipped(); }
  // The mean loss of the last logged interval, and the lowest such mean (NaN before any log).
  double last_loss() const { return last_loss_; }
  double best_loss() const { return best_loss_; }
  const TrainerOptions& options() const { return options_; }
  nn::Module& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  amp::GradScaler& scaler() { return scaler_; }
  optim::LRScheduler* scheduler() { return scheduler_.get(); }
  DataLoader& train_loader() { return *train_loader_; }
  // The state written under CheckpointParts::trainer_state.
  TrainerState trainer_state() const;
  // Requests a stop after the current step; fit() then evaluates, checkpoints (with a run_dir)
  // and summarises as at a normal end. Async-signal-safe (a lock-free atomic store).
  void request_stop() { stop_requested_.store(true, std::memory_order_relaxed); }

 private:
  template <typename L>
  static LossFn make_loss(L loss) {
    if constexpr (requires(L & l, const Tensor& a) { l->forward(a, a); }) {
      return [l = std::move(loss)](const Tensor& out, const Tensor& target) {
        return Tensor(l->forward(out, target));
      };
    } else {
      return LossFn(std::move(loss));
    }
  }
  struct Impl;
  amp::StepResult train_one_step(const Batch& batch);
  // cuda_graphs: why this run's steps cannot be captured ("" if they can), and the step through
  // the graph, for a batch shaped like the first.
  std::string graph_refusal();
  bool graphable(const Batch& batch);
  amp::StepResult graphed_step(const Batch& batch);
  void clip_gradients();
  // One micro-batch's forward under autocast, its loss divided by `micro`, and the scaled
  // backward; returns the (divided) loss.
  Tensor backward_micro_batch(const Tensor& input, const Tensor& target, int64_t micro);
  // The interval's samples and tokens, and the step's loss into the interval's sum (no grad).
  void count_batch(const Batch& batch);
  void record_step_loss(const Tensor& step_loss);
  void emit_log(bool skipped, double lr);
  void run_eval();
  void prune_checkpoints();
  void write_summary(const TrainSummary& summary);
  bool takes_checkpoints() const;
  TrainingMemory memory_now() const;

  std::shared_ptr<nn::Module> model_;
  ForwardFn forward_;
  LossFn loss_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<DataLoader> train_loader_;
  std::shared_ptr<DataLoader> val_loader_;
  std::shared_ptr<optim::LRScheduler> scheduler_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  TrainerOptions options_;
  amp::GradScaler scaler_;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<distributed::ZeroRedundancyOptimizer> zero_;
  bool zero_checkpoints_ = false;

  int64_t step_ = 0;
  double best_loss_ = std::numeric_limits<double>::quiet_NaN();
  double last_loss_ = std::numeric_limits<double>::quiet_NaN();
  int64_t resumed_from_step_ = 0;
  bool resumed_ = false;
  std::atomic<bool> stop_requested_{false};  // set from callbacks or signal handlers
};

}  // namespace mantissa::runner
