// From a validated Config to the objects of a run: datasets and loaders, the model (with
// init_from weights), loss, optimizer, LR scheduler and TrainerOptions — the CLI's `train`,
// `resume` and `eval` are thin shells over this.
//
// build_run checks everything that needs more than the config before anything is written: the
// device exists, data files exist and parse, the model's layers fit the data's input shape and
// its output fits the targets and the loss, and init_from loads into the model. Each failure is a
// ConfigError naming the key, the value and its line, like the parser's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "nn/layers.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/optimizer.h"
#include "runner/config/config.h"
#include "runner/data/data.h"
#include "runner/training/trainer.h"

namespace mantissa::runner {

struct RunObjects {
  Config config;
  std::string config_text;  // what resolved.yaml holds (and checkpoints store)
  std::string config_hash;
  Device device;
  std::shared_ptr<Dataset> dataset;     // the whole dataset, before the validation split
  std::shared_ptr<Dataset> train_data;  // == dataset without val_split
  std::shared_ptr<Dataset> val_data;    // null without val_split
  std::shared_ptr<DataLoader> train_loader;
  std::shared_ptr<DataLoader> val_loader;  // null without val_split
  std::shared_ptr<nn::UnaryModule> model;
  // The model's forward as the trainer calls it, and the loss of its output: model->forward and
  // the configured loss, or, with model.fused_head_loss, the GPT's hidden states and its head_loss.
  ForwardFn forward;
  LossFn loss;
  std::shared_ptr<optim::Optimizer> optimizer;
  // What a run prints at start-up about its float8 layers and its optimizer's groups (muon:
  // which parameters go to Muon and which to AdamW).
  std::vector<std::string> startup_lines;
  std::shared_ptr<optim::LRScheduler> scheduler;  // null for schedule.type none
  // The configured optimizer (master weights, state dtype and stochastic rounding set) over
  // other parameter groups, and the configured schedule driving another optimizer (null for
  // schedule.type none): what distributed.zero_stage shards.
  std::function<std::shared_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)> make_optimizer;
  std::function<std::shared_ptr<optim::LRScheduler>(optim::Optimizer&)> make_scheduler;
  TrainerOptions trainer_options;  // run_dir left empty
};

// Where a rank of a data-parallel run stands (runner/training/distributed_run.h): its loader takes
// its shard of each epoch, and `device: auto` / `cuda` mean the GPU of its local rank.
struct RunPlacement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
};

// The device of `config.device` ("auto": try_gpu(), the local rank's GPU); a device this machine
// lacks is a ConfigError on the `device` key.
Device resolve_device(const Config& config, int local_rank = 0);

// The dataset of `config.data` (files read here; a missing or malformed file is a ConfigError on
// the key naming it).
std::shared_ptr<Dataset> build_dataset(const Config& config);

// Everything for a run, validated (see above). `config_text` is the resolved YAML to store in
// checkpoints (to_yaml(config) when empty). Seeds the engine's generators with config.seed before
// creating the model, so its initial weights are reproducible.
RunObjects build_run(const Config& config, std::string config_text = "",
                     const RunPlacement& placement = {});

// The model, loss and loaders only (no optimizer), for evaluation.
RunObjects build_eval(const Config& config);

}  // namespace mantissa::runner
