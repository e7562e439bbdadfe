// The optimizer and schedule types added to the config (rmsprop, adagrad, nadam, radam;
// multistep, exponential, cosine_annealing, linear, onecycle, plateau): each builds from YAML,
// bad values are one-line config errors, and the Trainer feeds plateau its metric.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/factory.h"
#include "nn/optim/param_groups.h"
#include "nn/optim/schedulers.h"
#include "runner/config/config.h"
#include "runner/training/build_from_config.h"
#include "runner/training/checkpoint.h"
#include "runner/training/trainer.h"

namespace rn = mantissa::runner;
namespace optim = mantissa::optim;
namespace fs = std::filesystem;

namespace {

// A small synthetic run on the CPU; `yaml` may give its own `data`.
std::string with_data(const std::string& yaml) {
  const bool has_data = yaml.rfind("data:", 0) == 0 || yaml.find("\ndata:") != std::string::npos;
  return yaml + (has_data ? "" : "data: {samples: 64, batch_size: 16}\n") + "device: cpu\n";
}

rn::RunObjects build(const std::string& yaml) {
  return rn::build_run(rn::parse_config(with_data(yaml), "test.yaml"));
}

void expect_config_error(const std::string& yaml, const std::vector<std::string>& parts,
                         bool at_build = false) {
  try {
    const rn::Config c = rn::parse_config(with_data(yaml), "test.yaml");
    if (at_build) rn::build_run(c);
    ADD_FAILURE() << "expected a config error for:\n" << yaml;
  } catch (const rn::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks: " << p;
  }
}

TEST(RunnerOptimConfig, EachNewOptimizerBuildsWithItsKeys) {
  auto r =
      build("optimizer: {type: rmsprop, lr: 0.02, alpha: 0.9, momentum: 0.5, centered: true}\n");
  EXPECT_STREQ(r.optimizer->name(), "RMSprop");
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("alpha"), 0.9);
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("centered"), 1.0);
  r = build("optimizer: {type: adagrad, lr_decay: 0.1, initial_accumulator_value: 0.2}\n");
  EXPECT_STREQ(r.optimizer->name(), "Adagrad");
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("eps"), 1e-10);  // Adagrad's default
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("lr_decay"), 0.1);
  r = build("optimizer: {type: nadam, betas: [0.8, 0.99], momentum_decay: 0.01}\n");
  EXPECT_STREQ(r.optimizer->name(), "NAdam");
  EXPECT_DOUBLE_EQ(r.optimizer->lr(), 2e-3);
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("momentum_decay"), 0.01);
  r = build("optimizer: {type: radam, weight_decay: 0.1}\n");
  EXPECT_STREQ(r.optimizer->name(), "RAdam");
  EXPECT_DOUBLE_EQ(r.optimizer->lr(), 1e-3);
}

// PyTorch 2's decoupled weight decay: a key of adam, nadam and radam, left out of resolved.yaml
// while false (existing runs keep their config hash); adamw always decouples and has no such key.
TEST(RunnerOptimConfig, DecoupledWeightDecayReachesTheOptimizer) {
  for (const char* type : {"adam", "nadam", "radam"}) {
    const std::string yaml = std::string("optimizer: {type: ") + type +
                             ", weight_decay: 0.1, decoupled_weight_decay: true}\n";
    const auto r = build(yaml);
    EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("decoupled_weight_decay"), 1.0) << type;
    const rn::Config c = rn::parse_config(with_data(yaml), "test.yaml");
    EXPECT_NE(rn::to_yaml(c).find("decoupled_weight_decay: true"), std::string::npos) << type;
    const rn::Config plain =
        rn::parse_config(with_data(std::string("optimizer: {type: ") + type + "}\n"), "t.yaml");
    EXPECT_EQ(rn::to_yaml(plain).find("decoupled_weight_decay"), std::string::npos) << type;
  }
  expect_config_error("optimizer: {type: adamw, decoupled_weight_decay: false}\n",
                      {"optimizer.decoupled_weight_decay", "does not apply to optimizer.type"});
}

TEST(RunnerOptimConfig, EachNewScheduleBuilds) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"schedule: {type: multistep, milestones: [10, 20], gamma: 0.5}\n", "MultiStepLR"},
      {"schedule: {type: exponential, gamma: 0.99}\n", "ExponentialLR"},
      {"schedule: {type: cosine_annealing, min_lr: 0.001}\n", "CosineAnnealingLR"},
      {"schedule: {type: linear, start_factor: 0.5, total_iters: 10}\n", "LinearLR"},
      {"schedule: {type: onecycle, max_lr: 0.1, three_phase: true, anneal_strategy: linear}\n",
       "OneCycleLR"},
      {"schedule: {type: plateau, mode: max, patience: 3, threshold_mode: abs}\n",
       "ReduceLROnPlateau"},
  };
  for (const auto& [yaml, name] : cases) {
    auto r = build("optimizer: {type: sgd, momentum: 0.9}\n" + yaml);
    ASSERT_NE(r.scheduler, nullptr) << yaml;
    EXPECT_STREQ(r.scheduler->name(), name.c_str()) << yaml;
  }
  // onecycle starts at max_lr / div_factor and cycles SGD's momentum from max_momentum.
  auto r = build("optimizer: {type: sgd, momentum: 0.9, lr: 0.4}\nschedule: {type: onecycle}\n");
  EXPECT_DOUBLE_EQ(r.optimizer->lr(), 0.4 / 25.0);
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("momentum"), 0.95);
}

TEST(RunnerOptimConfig, BadValuesAreOneLineErrors) {
  expect_config_error("optimizer: {type: rmsprop, alpha: 1.5}\n", {"optimizer.alpha", "1.5"});
  expect_config_error("optimizer: {type: adagrad, lr_decay: -1}\n", {"optimizer.lr_decay"});
  expect_config_error("optimizer: {type: nadam, maximize: true}\n",
                      {"optimizer.maximize", "does not apply", "nadam"});
  expect_config_error("optimizer: {type: radam, centered: true}\n", {"optimizer.centered"});
  expect_config_error("optimizer: {type: lion}\n", {"optimizer.type", "lion"});
  expect_config_error("schedule: {type: plateau, mode: up}\n", {"schedule.mode", "up"});
  expect_config_error("schedule: {type: plateau, factor: 1.0}\n", {"schedule.factor"});
  expect_config_error("schedule: {type: linear, start_factor: 0}\n", {"schedule.start_factor"});
  expect_config_error("schedule: {type: onecycle, anneal_strategy: exp}\n",
                      {"schedule.anneal_strategy", "exp"});
  expect_config_error("schedule: {type: exponential, milestones: [3]}\n",
                      {"schedule.milestones", "does not apply"});
  expect_config_error("schedule: {type: onecycle, total_steps: 10}\nsteps: 20\n",
                      {"schedule.total_steps", "20 steps"}, /*at_build=*/true);
  expect_config_error("optimizer: {type: adagrad}\nschedule: {type: onecycle}\n",
                      {"schedule.cycle_momentum", "adagrad"}, /*at_build=*/true);
}

// Runs a config through the Trainer as `mantissa train` does.
struct TrainRun {
  rn::RunObjects objects;
  std::unique_ptr<rn::Trainer> trainer;
  explicit TrainRun(const std::string& yaml, const std::string& run_dir = "")
      : objects(build(yaml)) {
    rn::TrainerOptions o = objects.trainer_options;
    o.run_dir = run_dir;
    o.progress = false;
    o.log_to_stdout = false;
    trainer = std::make_unique<rn::Trainer>(objects.model, objects.loss, objects.optimizer,
                                            objects.train_loader, o);
    trainer->set_scheduler(objects.scheduler);
    if (objects.val_loader) trainer->set_val_loader(objects.val_loader);
  }
};

TEST(RunnerOptimConfig, PlateauWatchesTheTrainingLossWithoutEvaluation) {
  TrainRun run("schedule: {type: plateau}\nsteps: 12\n");
  run.trainer->fit();
  EXPECT_EQ(run.objects.scheduler->last_epoch(), 12);  // one step per training step
  auto* plateau = dynamic_cast<optim::ReduceLROnPlateau*>(run.objects.scheduler.get());
  ASSERT_NE(plateau, nullptr);
  EXPECT_TRUE(std::isfinite(plateau->best()));
}

TEST(RunnerOptimConfig, PlateauWatchesTheValidationLossWhenTheRunEvaluates) {
  TrainRun run(
      "schedule: {type: plateau}\nsteps: 12\neval_every: 4\n"
      "data: {samples: 80, batch_size: 16, val_split: 0.2}\n");
  const rn::TrainSummary summary = run.trainer->fit();
  EXPECT_EQ(run.objects.scheduler->last_epoch(), 3);  // one step per evaluation
  auto* plateau = dynamic_cast<optim::ReduceLROnPlateau*>(run.objects.scheduler.get());
  ASSERT_NE(plateau, nullptr);
  ASSERT_TRUE(summary.final_eval.has_value());
  EXPECT_TRUE(std::isfinite(plateau->best()));
}

TEST(RunnerOptimConfig, PlateauStateSurvivesACheckpoint) {
  const fs::path dir = fs::temp_directory_path() / ("mt_plateau_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string yaml = "schedule: {type: plateau, patience: 1}\nsteps: 10\n";
  TrainRun a(yaml, (dir / "a").string());
  a.trainer->fit();
  const std::string ckpt = a.trainer->save_checkpoint((dir / rn::checkpoint_filename(10)).string());
  TrainRun b(yaml);
  b.trainer->resume_from(ckpt);
  const optim::SchedulerState sa = a.objects.scheduler->state_dict();
  const optim::SchedulerState sb = b.objects.scheduler->state_dict();
  EXPECT_EQ(sb.last_epoch, sa.last_epoch);
  EXPECT_EQ(sb.extra, sa.extra);
  EXPECT_EQ(sb.last_lr, sa.last_lr);
  fs::remove_all(dir);
}

}  // namespace

TEST(RunnerOptimConfig, DecayGroupsSpareBiasesAsNanoGpt) {
  // In C++: matrices decay, biases do not; group order and parameter order as nanoGPT's.
  auto r = build("model: {preset: toy}\noptimizer: {type: adamw, weight_decay: 0.1}\n");
  const auto named = r.model->named_parameters();
  const auto groups = optim::decay_groups(named, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_DOUBLE_EQ(groups[0].get("weight_decay"), 0.1);
  EXPECT_DOUBLE_EQ(groups[1].get("weight_decay"), 0.0);
  for (const auto& p : groups[0].params) EXPECT_EQ(p.dim(), 2);
  for (const auto& p : groups[1].params) EXPECT_EQ(p.dim(), 1);
  EXPECT_EQ(groups[0].params.size() + groups[1].params.size(), named.size());
  EXPECT_EQ(optim::decay_groups(named, 0.1, /*min_ndim=*/0).size(), 1u);  // all decay
  EXPECT_THROW(optim::decay_groups({}, 0.1), mantissa::Error);

  // From YAML: with zero gradients AdamW's step is the decay alone, so the weights shrink by
  // (1 - lr * weight_decay) and the biases do not move.
  r = build(
      "model: {preset: toy}\n"
      "optimizer: {type: adamw, lr: 0.5, weight_decay: 0.1, decay_min_ndim: 2}\n");
  ASSERT_EQ(r.optimizer->param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("weight_decay"), 0.1);
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[1].get("weight_decay"), 0.0);
  std::vector<std::vector<float>> before;
  for (const auto& [name, p] : r.model->named_parameters()) {
    before.push_back(p.to_vector<float>());
    p.set_grad(mantissa::zeros_like(p));
  }
  r.optimizer->step();
  size_t i = 0;
  for (const auto& [name, p] : r.model->named_parameters()) {
    const auto after = p.to_vector<float>();
    const float factor = p.dim() >= 2 ? 1.0f - 0.5f * 0.1f : 1.0f;
    for (size_t j = 0; j < after.size(); ++j)
      EXPECT_FLOAT_EQ(after[j], before[i][j] * factor) << name << "[" << j << "]";
    ++i;
  }
  // Without the key every parameter decays (one group), and the resolved config leaves it out.
  r = build("model: {preset: toy}\noptimizer: {type: adamw}\n");
  EXPECT_EQ(r.optimizer->param_groups().size(), 1u);
  EXPECT_EQ(r.config_text.find("decay_min_ndim"), std::string::npos);
  EXPECT_NE(
      build("optimizer: {type: adamw, decay_min_ndim: 2}\n").config_text.find("decay_min_ndim: 2"),
      std::string::npos);
  expect_config_error("optimizer: {type: adamw, decay_min_ndim: -1}\n", {"decay_min_ndim"});
}

TEST(RunnerOptimConfig, GradAccumStepsReachesTheTrainerAndCountsEpochSteps) {
  auto r = build("grad_accum_steps: 3\nepochs: 2\n");  // 4 batches per epoch
  EXPECT_EQ(r.trainer_options.grad_accum_steps, 3);
  EXPECT_NE(r.config_text.find("grad_accum_steps: 3"), std::string::npos);
  rn::Trainer t(r.model, r.loss, r.optimizer, r.train_loader, r.trainer_options);
  EXPECT_EQ(t.total_steps(), 3);  // 8 micro-batches in steps of 3
  r = build("steps: 5\n");
  EXPECT_EQ(r.trainer_options.grad_accum_steps, 1);
  EXPECT_EQ(r.config_text.find("grad_accum_steps"), std::string::npos);
  EXPECT_EQ(r.config_text.find("peak_tflops"), std::string::npos);
  EXPECT_DOUBLE_EQ(build("peak_tflops: 2.5\n").trainer_options.peak_flops, 2.5e12);
}

namespace {

// Four linear layers: the two middle weights are Muon's by the rule, the first and last layers'
// weights and every bias AdamW's.
const char* kMuonModel =
    "model:\n  layers:\n    - {type: linear, in: 10, out: 24}\n    - relu\n"
    "    - {type: linear, in: 24, out: 24}\n    - relu\n"
    "    - {type: linear, in: 24, out: 16}\n    - relu\n"
    "    - {type: linear, in: 16, out: 5}\n"
    "data: {type: teacher, samples: 64, batch_size: 16}\n";

std::vector<std::string> names_of(const optim::ParamGroup& g, mantissa::nn::Module& model) {
  std::vector<std::string> out;
  for (const auto& p : g.params) {
    for (const auto& [name, t] : model.named_parameters()) {
      if (t.is_same(p)) out.push_back(name);
    }
  }
  return out;
}

}  // namespace

// optimizer.type muon: one config line gives the hybrid of the speedrun and Moonlight (Muon for
// the hidden matrices, AdamW with its own options for the rest), printed at start-up, each key
// reaching its group, the name patterns overriding the rule, and the resolved YAML reading back.
TEST(RunnerOptimConfig, MuonHybridGroupsFromOneConfigLine) {
  const std::string yaml = std::string(kMuonModel) +
                           "optimizer: {type: muon, lr: 0.02, momentum: 0.9, nesterov: false, "
                           "ns_coefficients: [3, -4, 2], ns_steps: 3, adjust_lr_fn: "
                           "match_rms_adamw, weight_decay: 0.05,\n"
                           "  adamw: {lr: 0.003, betas: [0.8, 0.95], eps: 1e-10, "
                           "weight_decay: 0.01}}\n";
  auto r = build(yaml);
  EXPECT_STREQ(r.optimizer->name(), "Muon");
  const auto& groups = r.optimizer->param_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(names_of(groups[0], *r.model), (std::vector<std::string>{"2.weight", "4.weight"}));
  EXPECT_EQ(
      names_of(groups[1], *r.model),
      (std::vector<std::string>{"0.weight", "0.bias", "2.bias", "4.bias", "6.weight", "6.bias"}));
  const auto muon = groups[0].options_as<optim::MuonOptions>();
  EXPECT_TRUE(muon.use_muon);
  EXPECT_DOUBLE_EQ(muon.lr, 0.02);
  EXPECT_DOUBLE_EQ(muon.momentum, 0.9);
  EXPECT_FALSE(muon.nesterov);
  EXPECT_EQ(muon.ns_coefficients, (std::array<double, 3>{3, -4, 2}));
  EXPECT_EQ(muon.ns_steps, 3);
  EXPECT_EQ(muon.adjust_lr_fn, optim::MuonAdjustLr::MatchRmsAdamW);
  EXPECT_DOUBLE_EQ(muon.weight_decay, 0.05);
  const auto adamw = groups[1].options_as<optim::MuonOptions>();
  EXPECT_FALSE(adamw.use_muon);
  EXPECT_DOUBLE_EQ(adamw.lr, 0.003);
  EXPECT_EQ(adamw.betas, (std::pair<double, double>{0.8, 0.95}));
  EXPECT_DOUBLE_EQ(adamw.eps, 1e-10);
  EXPECT_DOUBLE_EQ(adamw.weight_decay, 0.01);
  ASSERT_EQ(r.startup_lines.size(), 2u);
  EXPECT_EQ(r.startup_lines[0],
            "optimizer muon: Muon 2 tensors (960 parameters): 2.weight, 4.weight");
  EXPECT_EQ(r.startup_lines[1],
            "optimizer muon: AdamW 6 tensors (389 parameters): 0.weight, 0.bias, 2.bias, 4.bias, "
            "6.weight, 6.bias");

  // The resolved YAML holds every key and reads back to the same config (and hash).
  const rn::Config c = rn::parse_config(with_data(yaml), "test.yaml");
  const std::string text = rn::to_yaml(c);
  for (const char* k : {"adjust_lr_fn: match_rms_adamw", "ns_coefficients: [3.0, -4.0, 2.0]",
                        "adamw:", "betas: [0.8, 0.95]"}) {
    EXPECT_NE(text.find(k), std::string::npos) << k << " in\n" << text;
  }
  EXPECT_EQ(rn::to_yaml(rn::parse_config(text, "resolved.yaml")), text);

  // Patterns override the rule: the first layer's weight to Muon, one hidden weight to AdamW.
  r = build(std::string(kMuonModel) +
            "optimizer: {type: muon, muon_params: ['0.*weight'], adamw_params: ['4.*']}\n");
  EXPECT_EQ(names_of(r.optimizer->param_groups()[0], *r.model),
            (std::vector<std::string>{"0.weight", "2.weight"}));
  // The defaults: PyTorch's Muon and AdamW.
  r = build(std::string(kMuonModel) + "optimizer: {type: muon}\n");
  const auto d = r.optimizer->param_groups()[0].options_as<optim::MuonOptions>();
  EXPECT_DOUBLE_EQ(d.lr, 1e-3);
  EXPECT_DOUBLE_EQ(d.weight_decay, 0.1);
  EXPECT_EQ(d.adjust_lr_fn, optim::MuonAdjustLr::Original);
  const auto da = r.optimizer->param_groups()[1].options_as<optim::MuonOptions>();
  EXPECT_DOUBLE_EQ(da.lr, 1e-3);
  EXPECT_DOUBLE_EQ(da.weight_decay, 1e-2);
  EXPECT_DOUBLE_EQ(da.eps, 1e-8);
}

// Hostile input: each a one-line error naming the key.
TEST(RunnerOptimConfig, MuonBadInputNamesTheKey) {
  const std::string m = kMuonModel;
  expect_config_error(m + "optimizer: {type: muon, ns_steps: 0}\n",
                      {"optimizer.ns_steps = 0", "must be in [1, 99]"});
  expect_config_error(m + "optimizer: {type: muon, ns_steps: 2.5}\n",
                      {"optimizer.ns_steps = 2.5", "integer"});
  expect_config_error(m + "optimizer: {type: muon, adjust_lr_fn: match_rms}\n",
                      {"optimizer.adjust_lr_fn = match_rms",
                       "expected one of original, match_rms_adamw, spectral_unclamped"});
  expect_config_error(m + "optimizer: {type: muon, ns_coefficients: [1, 2]}\n",
                      {"optimizer.ns_coefficients",
                       "expected [ns_coefficient1, ns_coefficient2, ns_coefficient3]"});
  expect_config_error(m + "optimizer: {type: muon, betas: [0.9, 0.99]}\n",
                      {"optimizer.betas", "does not apply to optimizer.type 'muon'"});
  expect_config_error(m + "optimizer: {type: adamw, adamw: {lr: 0.1}}\n",
                      {"optimizer.adamw", "does not apply to optimizer.type 'adamw'"});
  expect_config_error(m + "optimizer: {type: sgd, muon_params: ['2.weight']}\n",
                      {"optimizer.muon_params", "does not apply"});
  expect_config_error(m + "optimizer: {type: muon, adamw: {lr: 0}}\n", {"optimizer.adamw.lr"});
  expect_config_error(m + "optimizer: {type: muon, adamw: {momentum: 0.9}}\n",
                      {"optimizer.adamw.momentum"});
  expect_config_error(m + "optimizer: {type: muon, decay_min_ndim: 2}\n",
                      {"optimizer.decay_min_ndim", "does not apply to optimizer.type 'muon'"});
  expect_config_error(m + "optimizer: {type: muon, muon_params: ['h.*']}\n",
                      {"optimizer.muon_params", "'h.*' matches no parameter"}, true);
  expect_config_error(m + "optimizer: {type: muon, adamw_params: ['9.*']}\n",
                      {"optimizer.adamw_params", "'9.*' matches no parameter"}, true);
  expect_config_error(m + "optimizer: {type: muon, muon_params: ['2.*']}\n",
                      {"optimizer.muon_params", "'2.bias'", "only supports 2D"}, true);
  expect_config_error(m + "optimizer: {type: muon, muon_params: ['2.weight'], "
                          "adamw_params: ['2.*']}\n",
                      {"optimizer.muon_params", "matches both"}, true);
  // Two layers: no hidden matrix, and nothing named for Muon.
  expect_config_error(
      "model:\n  layers:\n    - {type: linear, in: 10, out: 8}\n    - relu\n"
      "    - {type: linear, in: 8, out: 5}\noptimizer: {type: muon}\n",
      {"optimizer.type", "no parameter of this model is for Muon", "muon_params"}, true);
}

// onecycle's cycle_momentum cycles each group's own momentum: Muon's `momentum`, AdamW's beta1
// (PyTorch's Muon has no betas, so it cycles `momentum`).
TEST(RunnerOptimConfig, MuonOneCycleCyclesEachGroupsMomentum) {
  auto r = build(std::string(kMuonModel) +
                 "optimizer: {type: muon, lr: 0.02, momentum: 0.5, adamw: {betas: [0.5, 0.99]}}\n"
                 "schedule: {type: onecycle, max_momentum: 0.95, base_momentum: 0.85}\n");
  const auto& g = r.optimizer->param_groups();
  EXPECT_DOUBLE_EQ(g[0].get("momentum"), 0.95);
  EXPECT_DOUBLE_EQ(g[0].get("beta1"), 0.9);  // the Muon group's unused beta1, untouched
  EXPECT_DOUBLE_EQ(g[1].get("beta1"), 0.95);
  EXPECT_DOUBLE_EQ(g[1].get("momentum"), 0.5);
  for (int i = 0; i < 5; ++i) r.scheduler->step();
  EXPECT_LT(g[0].get("momentum"), 0.95);
  EXPECT_DOUBLE_EQ(g[0].get("momentum"), g[1].get("beta1"));
  EXPECT_DOUBLE_EQ(g[1].get("momentum"), 0.5);
}
