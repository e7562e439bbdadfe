// Checkpoints: training k steps, saving, loading into fresh objects (other weights, other random
// state) and continuing is bitwise equal to training without interruption — SGD with momentum and
// Adam, float32 and float16/bfloat16 autocast with a GradScaler (including a step the scaler
// skipped), master weights — and truncated, corrupted, wrong-version and wrong-model files are
// refused, with latest_valid_checkpoint falling back past them; so are files whose values no
// writer produces (forged with a recomputed checksum), misnamed copies and another run's
// checkpoints, which pruning never deletes.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>

#include "json_doc.h"
#include "runner/config/config.h"
#include "runner/files/atomic_file.h"
#include "runner/files/json.h"
#include "runner/training/checkpoint.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
namespace optim = mantissa::optim;
using mt::Tensor;
using mt::runner::CheckpointParts;
using mt::runner::Json;
using mt::runner::TrainerState;
using mt::testing::expect_error;

namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("mantissa_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// ToyModel with dropout, so the forward pass draws from the cpu generator too.
struct ToyModel : mt::testing::ToyModel {
  explicit ToyModel(int64_t hidden = 10)
      : mt::testing::ToyModel({.hidden = hidden, .dropout = 0.1, .name = "ToyModel"}) {}
};

struct RunSetup {
  std::string optimizer = "sgd";         // "sgd" (momentum, nesterov) or "adam"
  std::optional<mt::DType> autocast;     // run the forward under autocast to this dtype
  mt::DType param_dtype = mt::kFloat32;  // model parameters' dtype
  bool master_weights = false;
  bool scaler = false;
  std::vector<int> inf_steps;  // steps whose gradient is made inf (the scaler skips them)
  mt::Device device = mt::Device::cpu();
};

RunSetup make_setup(std::string optimizer, std::optional<mt::DType> autocast = std::nullopt,
                    mt::DType param_dtype = mt::kFloat32, bool master_weights = false,
                    bool scaler = false, std::vector<int> inf_steps = {}) {
  RunSetup s;
  s.optimizer = std::move(optimizer);
  s.autocast = autocast;
  s.param_dtype = param_dtype;
  s.master_weights = master_weights;
  s.scaler = scaler;
  s.inf_steps = std::move(inf_steps);
  return s;
}

struct Training {
  std::shared_ptr<ToyModel> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> sched;
  std::unique_ptr<mt::amp::GradScaler> scaler;
  RunSetup setup;

  Training(const RunSetup& s, uint64_t seed) : setup(s) {
    mt::manual_seed(seed);
    model = std::make_shared<ToyModel>();
    model->to(s.device);
    if (s.param_dtype != mt::kFloat32) model->to(s.param_dtype);
    if (s.optimizer == "sgd") {
      opt = std::make_unique<optim::SGD>(model->parameters(), 0.05,
                                         optim::SGDOptions{.momentum = 0.9, .nesterov = true});
      sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
    } else {
      opt = std::make_unique<optim::Adam>(model->parameters(),
                                          optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-3});
      sched = std::make_unique<optim::CosineWarmupLR>(*opt, 2, 10, 1e-4);
    }
    opt->set_master_weights(s.master_weights);
    if (s.scaler)
      scaler = std::make_unique<mt::amp::GradScaler>(
          mt::amp::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 2});
    // Consume some randomness so a run that forgot to restore the generators would differ.
    if (seed != 42) (void)mt::randn({17}, s.device);
  }

  CheckpointParts parts(std::optional<TrainerState> trainer_state = std::nullopt) {
    CheckpointParts p;
    p.model = model.get();
    p.optimizer = opt.get();
    p.scheduler = sched.get();
    p.scaler = scaler.get();
    p.trainer_state = std::move(trainer_state);
    p.config_hash = "hash-1";
    p.config_text = "model: toy\n";
    return p;
  }

  void step(int i) {
    const Tensor x = mt::randn({8, 10}, setup.device);
    const Tensor y = x.narrow(1, 0, 5) * 0.5 - x.narrow(1, 5, 5).relu();
    Tensor out;
    {
      std::optional<mt::amp::autocast> guard;
      if (setup.autocast) guard.emplace(setup.device, mt::amp::Precision(*setup.autocast));
      out = model->forward(x.to(setup.param_dtype));
    }
    const Tensor loss = nn::functional::mse_loss(out.to(mt::kFloat32), y);
    const bool make_inf =
        std::find(setup.inf_steps.begin(), setup.inf_steps.end(), i) != setup.inf_steps.end();
    if (scaler) {
      scaler->scale(loss).backward();
      if (make_inf) model->net1->weight.grad().fill_(std::numeric_limits<double>::infinity());
      const bool stepped = scaler->step(*opt);
      EXPECT_EQ(stepped, !make_inf) << "step " << i;
      scaler->update();
    } else {
      loss.backward();
      opt->step();
    }
    sched->step();
    opt->zero_grad();
  }
};

std::string raw_bytes(const Tensor& t) {
  const Tensor c = t.cpu().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.nbytes()));
}

void expect_same_state(Training& a, Training& b) {
  const auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(raw_bytes(pa[i].second) == raw_bytes(pb[i].second)) << pa[i].first << " differs:\n"
                                                                    << pa[i].second << "\nvs\n"
                                                                    << pb[i].second;
  const auto sa = a.opt->state_dict(), sb = b.opt->state_dict();
  ASSERT_EQ(sa.state.size(), sb.state.size());
  for (const auto& [id, s] : sa.state) {
    const auto& t = sb.state.at(id);
    EXPECT_EQ(s.step, t.step) << "param " << id;
    for (const auto& [name, buf] : s.buffers)
      EXPECT_TRUE(raw_bytes(buf) == raw_bytes(t.buffers.at(name))) << id << "." << name;
  }
  EXPECT_EQ(a.opt->lr(), b.opt->lr());
  EXPECT_EQ(a.sched->last_epoch(), b.sched->last_epoch());
  if (a.scaler) {
    EXPECT_EQ(a.scaler->get_scale(), b.scaler->get_scale());
    EXPECT_EQ(a.scaler->growth_tracker(), b.scaler->growth_tracker());
    EXPECT_EQ(a.scaler->steps_skipped(), b.scaler->steps_skipped());
    EXPECT_EQ(a.scaler->steps_taken(), b.scaler->steps_taken());
  }
}

// N steps straight vs k steps, save, load into fresh objects, N - k more.
void check_exact_resume(const RunSetup& setup, int k, int n) {
  TempDir dir;
  Training straight(setup, 42);
  for (int i = 0; i < n; ++i) straight.step(i);
  const auto rng_straight = mt::get_rng_states();

  const std::string path = dir.file(mt::runner::checkpoint_filename(k));
  {
    Training first(setup, 42);
    for (int i = 0; i < k; ++i) first.step(i);
    TrainerState ts;
    ts.step = k;
    ts.loader.index = k;
    mt::runner::save_checkpoint(path, first.parts(ts));
  }
  Training resumed(setup, 999);  // other weights, other random state
  CheckpointParts parts = resumed.parts();
  mt::runner::load_checkpoint(path, parts);
  ASSERT_TRUE(parts.trainer_state.has_value());
  EXPECT_EQ(parts.trainer_state->step, k);
  EXPECT_EQ(parts.config_hash, "hash-1");
  EXPECT_EQ(parts.config_text, "model: toy\n");
  for (int i = k; i < n; ++i) resumed.step(i);
  expect_same_state(straight, resumed);
  const auto rng_resumed = mt::get_rng_states();
  ASSERT_EQ(rng_resumed.size(), rng_straight.size());
  for (size_t i = 0; i < rng_straight.size(); ++i) {
    EXPECT_EQ(rng_resumed[i].seed, rng_straight[i].seed) << rng_straight[i].device;
    EXPECT_EQ(rng_resumed[i].offset, rng_straight[i].offset) << rng_straight[i].device;
  }
}

void flip_byte(const std::string& path, size_t pos_from_end) {
  std::string bytes = mt::runner::read_file_bytes(path);
  bytes[bytes.size() - pos_from_end] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void truncate_file(const std::string& path, size_t keep) {
  const std::string bytes = mt::runner::read_file_bytes(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, keep);
}

// A trainer state as at `step` of the first epoch.
TrainerState trainer_state(int64_t step) {
  TrainerState ts;
  ts.step = step;
  ts.loader.index = step;
  ts.wall_time_s = 1.5;
  return ts;
}

// Rewrites checkpoint `src` as `dst` with its "mantissa.checkpoint" metadata changed by `edit` and
// the checksum recomputed as docs/checkpoints.md describes (FNV-1a 64 over the file, the
// checksum's 16 hex digits read as '0'): every integrity check passes, only the values are forged.
void forge(const std::string& src, const std::string& dst, const std::function<void(Json&)>& edit) {
  auto file = mt::runner::parse_safetensors(mt::runner::read_file_bytes(src), src);
  Json meta = mt::runner::json::parse(file.metadata.at("mantissa.checkpoint"));
  edit(meta);
  file.metadata["mantissa.checkpoint"] = mt::runner::json::dump(meta);
  file.metadata["mantissa.checksum"] = std::string(16, '0');
  std::string bytes = mt::runner::serialize_safetensors(file.tensors, file.metadata);
  const std::string key = "\"mantissa.checksum\":\"";
  const size_t pos = bytes.find(key);
  ASSERT_NE(pos, std::string::npos);
  uint64_t h = 14695981039346656037ull;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  bytes.replace(pos + key.size(), 16, hex);
  std::ofstream(dst, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST(RunnerCheckpoint, ResumeIsBitwiseExactSgdFloat32) {
  check_exact_resume(make_setup("sgd"), 4, 8);
}

TEST(RunnerCheckpoint, ResumeIsBitwiseExactAdamFloat32) {
  check_exact_resume(make_setup("adam"), 3, 7);
}

TEST(RunnerCheckpoint, ResumeIsBitwiseExactBFloat16AutocastWithSkippedStepAtK) {
  check_exact_resume(make_setup("adam", mt::kBFloat16, mt::kFloat32, false, true, {3, 5}), 4, 8);
}

TEST(RunnerCheckpoint, ResumeIsBitwiseExactFloat16AutocastWithSkippedStep) {
  check_exact_resume(make_setup("sgd", mt::kFloat16, mt::kFloat32, false, true, {1, 3}), 4, 7);
}

TEST(RunnerCheckpoint, ResumeIsBitwiseExactBFloat16MasterWeights) {
  check_exact_resume(make_setup("adam", std::nullopt, mt::kBFloat16, true, true, {2}), 3, 6);
}

TEST(RunnerCheckpoint, ResumeIsBitwiseExactOnTheGpu) {
  MT_REQUIRE_GPU();
  RunSetup adam = make_setup("adam");
  adam.device = mt::testing::kGpu;
  check_exact_resume(adam, 3, 6);
  RunSetup fp16 = make_setup("sgd", mt::kFloat16, mt::kFloat32, false, true, {2, 4});
  fp16.device = mt::testing::kGpu;
  check_exact_resume(fp16, 3, 6);
}

TEST(RunnerCheckpoint, GpuCheckpointLoadsOnTheCpu) {
  MT_REQUIRE_GPU();
  TempDir dir;
  RunSetup gpu = make_setup("adam", std::nullopt, mt::kFloat32, false, true);
  gpu.device = mt::testing::kGpu;
  Training run(gpu, 42);
  run.step(0);
  const std::string path = dir.file("gpu.ckpt");
  mt::runner::save_checkpoint(path, run.parts());
  Training cpu(make_setup("adam", std::nullopt, mt::kFloat32, false, true), 7);
  CheckpointParts parts = cpu.parts();
  mt::runner::load_checkpoint(path, parts);
  EXPECT_TRUE(cpu.model->net1->weight.device().is_cpu());
  EXPECT_TRUE(raw_bytes(cpu.model->net1->weight) == raw_bytes(run.model->net1->weight));
  EXPECT_EQ(cpu.scaler->get_scale(), run.scaler->get_scale());
}

TEST(RunnerCheckpoint, ReadCheckpointWithoutAModel) {
  TempDir dir;
  Training run(make_setup("sgd"), 42);
  run.step(0);
  const std::string path = dir.file("step-000000001.ckpt");
  mt::runner::save_checkpoint(path, run.parts(trainer_state(1)));
  const auto info = mt::runner::read_checkpoint(path);
  EXPECT_EQ(info.format_version, mt::runner::kCheckpointFormatVersion);
  ASSERT_TRUE(info.trainer_state.has_value());
  EXPECT_EQ(info.trainer_state->step, 1);
  EXPECT_EQ(info.config_text, "model: toy\n");
  ASSERT_EQ(info.weights.size(), 4u);
  EXPECT_EQ(info.weights[0].first, "net1.weight");
  EXPECT_TRUE(raw_bytes(info.weights[0].second) == raw_bytes(run.model->net1->weight));
  // It is a safetensors file other tools can open.
  const auto st = mt::runner::load_safetensors(path);
  EXPECT_EQ(st.metadata.at("format"), "mantissa-checkpoint");
  EXPECT_NE(st.find("model.net2.bias"), nullptr);
  EXPECT_NE(st.find("optim.0.momentum_buffer"), nullptr);
  EXPECT_EQ(JsonDoc(st.metadata.at("mantissa.checkpoint")).at("optimizer").at("name").as_string(),
            "SGD");
  // Eval-style load: model only.
  ToyModel other;
  CheckpointParts only_model;
  only_model.model = &other;
  only_model.rng = false;
  mt::runner::load_checkpoint(path, only_model);
  EXPECT_TRUE(raw_bytes(other.net2->weight) == raw_bytes(run.model->net2->weight));
}

TEST(RunnerCheckpoint, RefusesCorruptedTruncatedWrongVersionAndWrongModel) {
  TempDir dir;
  Training run(make_setup("adam", std::nullopt, mt::kFloat32, false, true), 42);
  run.step(0);
  const std::string good = dir.file("good.ckpt");
  mt::runner::save_checkpoint(good, run.parts());
  const std::string good_bytes = mt::runner::read_file_bytes(good);

  auto refused = [&](const std::string& path, std::vector<std::string> parts) {
    Training target(make_setup("adam", std::nullopt, mt::kFloat32, false, true), 7);
    const Tensor before = target.model->net1->weight.clone();
    CheckpointParts p = target.parts();
    parts.push_back(path);
    expect_error([&] { mt::runner::load_checkpoint(path, p); }, parts);
    EXPECT_TRUE(raw_bytes(before) == raw_bytes(target.model->net1->weight))
        << "a refused load changed the model";
  };

  const std::string flipped = dir.file("flipped.ckpt");
  std::ofstream(flipped, std::ios::binary) << good_bytes;
  flip_byte(flipped, 5);  // inside the last tensor's data
  refused(flipped, {"checksum mismatch", "corrupted"});

  // A flip inside the JSON metadata text (a digit of the learning rate, say) is caught too.
  std::string meta_flip = good_bytes;
  const size_t lr = meta_flip.find("\\\"lr\\\": ");
  ASSERT_NE(lr, std::string::npos);
  meta_flip[lr + 9] = meta_flip[lr + 9] == '1' ? '2' : '1';
  const std::string meta_path = dir.file("meta.ckpt");
  std::ofstream(meta_path, std::ios::binary) << meta_flip;
  refused(meta_path, {"checksum mismatch"});

  const std::string truncated = dir.file("truncated.ckpt");
  std::ofstream(truncated, std::ios::binary) << good_bytes;
  truncate_file(truncated, good_bytes.size() - 100);
  refused(truncated, {"truncated"});
  truncate_file(truncated, 3);
  refused(truncated, {"truncated"});

  // Another format version (its checksum is not even looked at).
  auto file = mt::runner::parse_safetensors(good_bytes, "good");
  file.metadata["format_version"] = "2";
  const std::string v2 = dir.file("v2.ckpt");
  mt::runner::save_safetensors(v2, file.tensors, file.metadata);
  refused(v2, {"unsupported checkpoint format version '2'", "reads version 1"});

  // A plain weights file is not a checkpoint.
  const std::string weights = dir.file("weights.safetensors");
  mt::runner::save_weights(*run.model, weights);
  refused(weights, {"not a mantissa checkpoint"});

  // Another model: the first differing parameter is named with both shapes.
  {
    ToyModel wide(20);
    CheckpointParts p;
    p.model = &wide;
    expect_error([&] { mt::runner::load_checkpoint(good, p); },
                 {good, "does not match the model", "'net1.weight'", "[10, 10]", "[20, 10]"});
    ToyModel bf16;
    bf16.to(mt::kBFloat16);
    p.model = &bf16;
    expect_error([&] { mt::runner::load_checkpoint(good, p); },
                 {"'net1.weight' has dtype float32 in the checkpoint but bfloat16"});
  }
  // Another optimizer.
  {
    Training sgd(make_setup("sgd", std::nullopt, mt::kFloat32, false, true), 7);
    CheckpointParts p = sgd.parts();
    expect_error([&] { mt::runner::load_checkpoint(good, p); },
                 {"holds Adam optimizer state but the optimizer is SGD"});
  }
  // Parts present on load must have been saved.
  {
    Training no_scaler(make_setup("adam"), 42);
    const std::string path = dir.file("noscaler.ckpt");
    mt::runner::save_checkpoint(path, no_scaler.parts());
    CheckpointParts p = run.parts();
    expect_error([&] { mt::runner::load_checkpoint(path, p); }, {"has no GradScaler state"});
  }
}

TEST(RunnerCheckpoint, LatestValidCheckpointFallsBackWithReasons) {
  TempDir dir;
  EXPECT_FALSE(mt::runner::latest_valid_checkpoint(dir.path.string()).has_value());
  EXPECT_FALSE(mt::runner::latest_valid_checkpoint(dir.file("missing")).has_value());
  Training run(make_setup("sgd"), 42);
  for (int step : {2, 4, 6, 10}) {
    run.step(step);
    mt::runner::save_checkpoint(dir.file(mt::runner::checkpoint_filename(step)),
                                run.parts(trainer_state(step)));
  }
  EXPECT_EQ(mt::runner::checkpoint_filename(10), "step-000000010.ckpt");
  // Noise the listing must ignore: a temporary of a killed writer, other files.
  std::ofstream(dir.file(".step-000000012.ckpt.tmp-999999999")) << "partial";
  std::ofstream(dir.file("notes.txt")) << "x";
  std::ofstream(dir.file("step-abc.ckpt")) << "x";
  const auto listed = mt::runner::list_checkpoints(dir.path.string());
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(fs::path(listed[0]).filename(), "step-000000010.ckpt");  // by step, not by name
  EXPECT_EQ(fs::path(listed[3]).filename(), "step-000000002.ckpt");

  flip_byte(listed[0], 1);
  truncate_file(listed[1], 1000);
  std::vector<std::string> refused;
  const auto choice = mt::runner::latest_valid_checkpoint(dir.path.string(), &refused);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->path, listed[2]);
  ASSERT_EQ(choice->refused.size(), 2u);
  EXPECT_NE(choice->refused[0].find(listed[0]), std::string::npos);
  EXPECT_NE(choice->refused[0].find("checksum mismatch"), std::string::npos);
  EXPECT_NE(choice->refused[1].find(listed[1]), std::string::npos);
  EXPECT_NE(choice->refused[1].find("truncated"), std::string::npos);
  EXPECT_EQ(refused, choice->refused);
  EXPECT_EQ(mt::runner::read_checkpoint(choice->path).trainer_state->step, 4);

  // Every one refused: nullopt, with every reason.
  truncate_file(listed[2], 10);
  truncate_file(listed[3], 0);
  EXPECT_FALSE(mt::runner::latest_valid_checkpoint(dir.path.string(), &refused).has_value());
  EXPECT_EQ(refused.size(), 4u);
}

TEST(RunnerCheckpoint, PruneKeepsTheNewestAndRemovesStaleTemporaries) {
  TempDir dir;
  Training run(make_setup("sgd"), 42);
  for (int step = 1; step <= 5; ++step) {
    mt::runner::save_checkpoint(dir.file(mt::runner::checkpoint_filename(step * 10)),
                                run.parts(trainer_state(step * 10)));
  }
  std::ofstream(dir.file(".step-000000060.ckpt.tmp-999999999")) << "partial";  // dead writer
  const std::string live = ".step-000000070.ckpt.tmp-" + std::to_string(::getpid());
  std::ofstream(dir.file(live)) << "being written";
  const auto deleted = mt::runner::prune_checkpoints(dir.path.string(), 2);
  EXPECT_EQ(deleted.size(), 4u);  // steps 10, 20, 30 and the dead writer's temporary
  const auto left = mt::runner::list_checkpoints(dir.path.string());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(fs::path(left[0]).filename(), "step-000000050.ckpt");
  EXPECT_EQ(fs::path(left[1]).filename(), "step-000000040.ckpt");
  EXPECT_TRUE(fs::exists(dir.file(live)));
  EXPECT_TRUE(mt::runner::prune_checkpoints(dir.path.string(), 0).empty());  // 0 keeps all
}

// A checkpoint copied under another step's name is refused naming both steps, and the genuine
// one is chosen: resuming it would otherwise continue from a step that is not in the file.
TEST(RunnerCheckpoint, RenamedCheckpointIsRefusedAndTheGenuineOneChosen) {
  TempDir dir;
  Training run(make_setup("sgd"), 42);
  auto save_at = [&](int64_t step) {
    const std::string path = dir.file(mt::runner::checkpoint_filename(step));
    mt::runner::save_checkpoint(path, run.parts(trainer_state(step)));
    return path;
  };
  save_at(3);
  run.step(0);
  const std::string s5 = save_at(5);
  const std::string s9 = dir.file(mt::runner::checkpoint_filename(9));
  fs::copy_file(s5, s9);

  std::vector<std::string> refused;
  const auto choice = mt::runner::latest_valid_checkpoint(dir.path.string(), &refused);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->path, s5);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find(s9), std::string::npos) << refused[0];
  EXPECT_NE(refused[0].find("its name says step 9 but its trainer state holds step 5"),
            std::string::npos)
      << refused[0];
  expect_error([&] { (void)mt::runner::read_checkpoint(s9); }, {s9, "step 9", "step 5"});
  {
    Training target(make_setup("sgd"), 7);
    CheckpointParts p = target.parts();
    expect_error([&] { mt::runner::load_checkpoint(s9, p); }, {s9, "step 9", "step 5"});
  }
  // A file named for a step must hold one; a writer cannot make a misnamed one either.
  const std::string s7 = dir.file(mt::runner::checkpoint_filename(7));
  expect_error([&] { mt::runner::save_checkpoint(s7, run.parts(trainer_state(5))); },
               {s7, "the name says step 7 but trainer_state.step is 5"});
  expect_error([&] { mt::runner::save_checkpoint(s7, run.parts()); },
               {"the name says step 7 but there is no trainer_state"});
  EXPECT_FALSE(fs::exists(s7));
  mt::runner::save_checkpoint(dir.file("any-name.ckpt"), run.parts());  // other names: no step
}

// Pruning keeps the newest keep_last checkpoints a resume would accept and deletes only accepted
// ones: misnamed copies (newer names holding older steps, an older name holding a newer step), a
// corrupted file and another run's checkpoint are left and reported, never counted.
TEST(RunnerCheckpoint, PruneNeverDeletesGenuineCheckpointsForMisnamedOrUnverifiableFiles) {
  TempDir dir;
  Training run(make_setup("sgd"), 42);
  auto save_at = [&](int64_t step, const std::string& hash = "hash-1") {
    const std::string path = dir.file(mt::runner::checkpoint_filename(step));
    CheckpointParts p = run.parts(trainer_state(step));
    p.config_hash = hash;
    mt::runner::save_checkpoint(path, p);
    return path;
  };
  const std::string s10 = save_at(10), s20 = save_at(20), s30 = save_at(30), s40 = save_at(40);
  const std::string s90 = dir.file(mt::runner::checkpoint_filename(90));
  const std::string s80 = dir.file(mt::runner::checkpoint_filename(80));
  const std::string s1 = dir.file(mt::runner::checkpoint_filename(1));
  fs::copy_file(s10, s90);
  fs::copy_file(s20, s80);
  fs::copy_file(s40, s1);
  const std::string s50 = save_at(50);
  flip_byte(s50, 1);
  const std::string s60 = save_at(60, "hash-2");

  std::vector<std::string> left;
  const auto deleted = mt::runner::prune_checkpoints(dir.path.string(), 2, "hash-1", &left);
  EXPECT_EQ(deleted, (std::vector<std::string>{s20, s10}));
  for (const auto& kept : {s90, s80, s60, s50, s40, s30, s1})
    EXPECT_TRUE(fs::exists(kept)) << kept << " was deleted";
  ASSERT_EQ(left.size(), 5u);
  const std::vector<std::pair<std::string, std::string>> reasons = {
      {s90, "its name says step 90 but its trainer state holds step 10"},
      {s80, "its name says step 80 but its trainer state holds step 20"},
      {s60, "written by another run (config hash hash-2; this run's is hash-1)"},
      {s50, "checksum mismatch"},
      {s1, "its name says step 1 but its trainer state holds step 40"}};
  for (size_t i = 0; i < reasons.size(); ++i) {
    EXPECT_NE(left[i].find(reasons[i].first), std::string::npos) << left[i];
    EXPECT_NE(left[i].find(reasons[i].second), std::string::npos) << left[i];
  }
  // Pruning did not change what a resume picks.
  const auto choice = mt::runner::latest_valid_checkpoint(dir.path.string(), "hash-1", nullptr);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->path, s40);
  // The overload without a hash counts another run's checkpoints as valid.
  const auto again = mt::runner::prune_checkpoints(dir.path.string(), 1);
  EXPECT_EQ(again, (std::vector<std::string>{s40, s30}));
  EXPECT_TRUE(fs::exists(s60));
}

// `mantissa resume` passes its run's config hash: a checkpoint written by another run is refused
// with a reason, like an invalid one, and the run's own newest checkpoint is used.
TEST(RunnerCheckpoint, AnotherRunsCheckpointIsSkippedWithAReason) {
  TempDir dir;
  Training run(make_setup("sgd"), 42);
  const std::string s4 = dir.file(mt::runner::checkpoint_filename(4));
  mt::runner::save_checkpoint(s4, run.parts(trainer_state(4)));
  const std::string s8 = dir.file(mt::runner::checkpoint_filename(8));
  CheckpointParts other = run.parts(trainer_state(8));
  other.config_hash = "hash-2";
  mt::runner::save_checkpoint(s8, other);

  std::vector<std::string> refused;
  const auto choice = mt::runner::latest_valid_checkpoint(dir.path.string(), "hash-1", &refused);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->path, s4);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused, choice->refused);
  EXPECT_NE(refused[0].find("checkpoint '" + s8 +
                            "': written by another run (config hash "
                            "hash-2; this run's is hash-1)"),
            std::string::npos)
      << refused[0];
  // Without a hash to compare (eval, export), any valid checkpoint will do.
  EXPECT_EQ(mt::runner::latest_valid_checkpoint(dir.path.string())->path, s8);
  // Only another run's checkpoints: none to resume from, each with its reason.
  EXPECT_FALSE(
      mt::runner::latest_valid_checkpoint(dir.path.string(), "hash-3", &refused).has_value());
  EXPECT_EQ(refused.size(), 2u);
}

// The checksum proves the bytes are the ones written, not that they make sense: a file rewritten
// with forged values and a recomputed checksum is refused, naming the field and its value, before
// anything is restored.
TEST(RunnerCheckpoint, ForgedValuesAreRefusedNamingTheField) {
  TempDir dir;
  Training run(make_setup("sgd"), 42);
  run.step(0);
  const std::string base = dir.file("base.ckpt");
  mt::runner::save_checkpoint(base, run.parts(trainer_state(5)));
  // The forging itself passes every check: an unchanged rewrite is accepted.
  const std::string same = dir.file("same.ckpt");
  forge(base, same, [](Json&) {});
  EXPECT_EQ(mt::runner::read_checkpoint(same).trainer_state->step, 5);

  auto refused = [&](const std::string& name, const std::function<void(Json&)>& edit,
                     std::vector<std::string> parts) {
    SCOPED_TRACE(name);
    const std::string path = dir.file(name);
    forge(base, path, edit);
    parts.push_back(path);
    expect_error([&] { (void)mt::runner::read_checkpoint(path); }, parts);
    Training target(make_setup("sgd"), 7);
    const Tensor before = target.model->net1->weight.clone();
    CheckpointParts p = target.parts();
    expect_error([&] { mt::runner::load_checkpoint(path, p); }, parts);
    EXPECT_TRUE(raw_bytes(before) == raw_bytes(target.model->net1->weight))
        << "a refused load changed the model";
  };
  auto state = [](Json& meta) -> Json& { return meta["trainer_state"]; };
  refused("step.ckpt", [&](Json& m) { state(m)["step"] = -5; },
          {"trainer_state.step is -5; expected an integer >= 0"});
  refused("epoch.ckpt", [&](Json& m) { state(m)["epoch"] = int64_t{1} << 62; },
          {"trainer_state.epoch is 4611686018427387904; expected an integer in [0, step + 1 = 6]"});
  refused("hash.ckpt", [](Json& m) { m["config_hash"] = ""; }, {"config_hash is empty"});
  refused("step-string.ckpt", [&](Json& m) { state(m)["step"] = "5"; },
          {"trainer_state.step is \"5\""});
  refused("index.ckpt", [&](Json& m) { state(m)["loader"]["index"] = -1; },
          {"trainer_state.loader.index is -1"});
  refused("loader-epoch.ckpt", [&](Json& m) { state(m)["loader"]["epoch"] = 1; },
          {"trainer_state.loader.epoch is 1 but trainer_state.epoch is 0"});
  refused("skipped.ckpt", [&](Json& m) { state(m)["steps_skipped"] = 6; },
          {"trainer_state.steps_skipped is 6; expected an integer in [0, step = 5]"});
  refused("count.ckpt", [&](Json& m) { state(m)["pending_loss_count"] = -1; },
          {"trainer_state.pending_loss_count is -1"});
  refused("wall.ckpt", [&](Json& m) { state(m)["wall_time_s"] = -1.0; },
          {"trainer_state.wall_time_s is -1"});
  refused("state.ckpt", [](Json& m) { m["trainer_state"] = 3; },
          {"trainer_state is 3; expected a JSON object"});
  refused("no-loader.ckpt",
          [&](Json& m) { state(m) = mt::runner::json::parse(R"({"step": 5, "epoch": 0})"); },
          {"trainer_state has no loader"});
  refused("no-step.ckpt", [&](Json& m) { state(m) = mt::runner::json::parse(R"({"loader": {}})"); },
          {"trainer_state has no step"});
  refused("seed-string.ckpt", [&](Json& m) { state(m)["loader"]["seed"] = "7"; },
          {"trainer_state.loader.seed is \"7\"; expected an integer"});
  refused("precision.ckpt", [&](Json& m) { state(m)["precision"] = 16; },
          {"trainer_state.precision is 16; expected a string"});
  refused("replicas.ckpt", [&](Json& m) { state(m)["loader"]["num_replicas"] = 0; },
          {"trainer_state.loader.num_replicas is 0; expected an integer >= 1"});
  const auto saturation = [&](Json& m) -> Json& {
    state(m)["float8_first_saturation"] =
        mt::runner::json::parse(R"({"step": 3, "layer": "fc1", "tensor": "input", "values": 2})");
    return state(m)["float8_first_saturation"];
  };
  refused(
      "saturation-step.ckpt", [&](Json& m) { saturation(m)["step"] = 6; },
      {"trainer_state.float8_first_saturation.step is 6; expected an integer in [1, step = 5]"});
  refused("saturation-tensor.ckpt", [&](Json& m) { saturation(m)["tensor"] = "bias"; },
          {"trainer_state.float8_first_saturation.tensor is 'bias'"});
  refused("saturation-values.ckpt", [&](Json& m) { saturation(m)["values"] = 0; },
          {"trainer_state.float8_first_saturation.values is 0"});
  refused("saturation-layer.ckpt", [&](Json& m) { saturation(m).erase("layer"); },
          {"trainer_state.float8_first_saturation has no layer"});
  refused("saturation-type.ckpt", [&](Json& m) { state(m)["float8_first_saturation"] = 1; },
          {"trainer_state.float8_first_saturation is 1; expected a JSON object"});

  // A writer without a config hash records the hash of its config text, so none is empty.
  CheckpointParts unhashed = run.parts(trainer_state(5));
  unhashed.config_hash.clear();
  const std::string path = dir.file("unhashed.ckpt");
  mt::runner::save_checkpoint(path, unhashed);
  EXPECT_EQ(mt::runner::read_checkpoint(path).config_hash,
            mt::runner::config_hash(unhashed.config_text));
}

// Every field of a trainer state comes back as saved: a seed above INT64_MAX, a sharded loader's
// replicas, losses that are NaN (written as JSON null) and the strings.
TEST(RunnerCheckpoint, TrainerStateRoundTripsEveryField) {
  TempDir dir;
  Training run(make_setup("sgd"), 42);
  TrainerState ts;
  ts.step = 12;
  ts.epoch = 2;
  ts.loader = {2, 3, std::numeric_limits<uint64_t>::max() - 5, 4};
  ts.steps_skipped = 3;
  ts.best_loss = 0.25;
  ts.last_loss = std::numeric_limits<double>::quiet_NaN();
  ts.pending_loss_sum = 1.0 / 3.0;
  ts.pending_loss_count = 2;
  ts.pending_samples = 64;
  ts.wall_time_s = 7.125;
  ts.precision = "bfloat16";
  ts.seed = std::numeric_limits<uint64_t>::max();
  ts.data_fingerprint = "0123456789abcdef";
  ts.float8_first_saturation = mt::runner::Float8Saturation{9, "blocks.1.fc", "grad_output", 17};
  const std::string path = dir.file(mt::runner::checkpoint_filename(12));
  mt::runner::save_checkpoint(path, run.parts(ts));
  const std::optional<TrainerState> got = mt::runner::read_checkpoint(path).trainer_state;
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->step, 12);
  EXPECT_EQ(got->epoch, 2);
  EXPECT_EQ(got->loader, ts.loader);
  EXPECT_EQ(got->steps_skipped, 3);
  EXPECT_EQ(got->best_loss, 0.25);
  EXPECT_TRUE(std::isnan(got->last_loss));
  EXPECT_EQ(got->pending_loss_sum, 1.0 / 3.0);
  EXPECT_EQ(got->pending_loss_count, 2);
  EXPECT_EQ(got->pending_samples, 64);
  EXPECT_EQ(got->wall_time_s, 7.125);
  EXPECT_EQ(got->precision, "bfloat16");
  EXPECT_EQ(got->seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(got->data_fingerprint, "0123456789abcdef");
  ASSERT_TRUE(got->float8_first_saturation.has_value());
  EXPECT_EQ(got->float8_first_saturation->step, 9);
  EXPECT_EQ(got->float8_first_saturation->layer, "blocks.1.fc");
  EXPECT_EQ(got->float8_first_saturation->tensor, "grad_output");
  EXPECT_EQ(got->float8_first_saturation->values, 17);
  // Saved without one, a checkpoint has none.
  const std::string plain = dir.file("weights.ckpt");
  mt::runner::save_checkpoint(plain, run.parts());
  EXPECT_FALSE(mt::runner::read_checkpoint(plain).trainer_state.has_value());
}

TEST(RunnerCheckpoint, RngStatesRoundTrip) {
  mt::manual_seed(5);
  (void)mt::randn({100});
  const auto states = mt::get_rng_states();
  ASSERT_GE(states.size(), 1u);
  EXPECT_TRUE(states[0].device.is_cpu());
  EXPECT_EQ(states[0].seed, 5u);
  EXPECT_GT(states[0].offset, 0u);
  const Tensor next = mt::randn({10});
  mt::manual_seed(77);
  mt::set_rng_states(states);
  EXPECT_TRUE(raw_bytes(mt::randn({10})) == raw_bytes(next));
  // A GPU's state in a checkpoint resumed where that GPU does not exist is skipped.
  mt::set_rng_states({{mt::Device::cuda(63), 1, 2}});
}

// Not run directly: the writer process of KilledWriterNeverLeavesAPartialCheckpoint, which saves
// ~25 MB checkpoints to one path until it is killed.
TEST(RunnerCheckpoint, DISABLED_WriterChild) {
  const char* path = std::getenv("MANTISSA_TEST_CKPT_WRITER");
  if (!path) GTEST_SKIP() << "only run by KilledWriterNeverLeavesAPartialCheckpoint";
  auto model = std::make_shared<ToyModel>(300000);
  optim::SGD opt(model->parameters(), 0.1, optim::SGDOptions{.momentum = 0.9});
  CheckpointParts parts;
  parts.model = model.get();
  parts.optimizer = &opt;
  for (int64_t i = 0;; ++i) {
    TrainerState ts;
    ts.step = 1;  // the step its name says
    ts.loader.index = 1;
    ts.pending_samples = i;  // which write this is
    parts.trainer_state = ts;
    mt::runner::save_checkpoint(path, parts);
  }
}

// SIGKILL while a checkpoint is being written leaves the previous complete checkpoint under the
// final name (and a temporary that prune_checkpoints removes), never a partial file.
TEST(RunnerCheckpoint, KilledWriterNeverLeavesAPartialCheckpoint) {
  TempDir dir;
  const std::string path = dir.file(mt::runner::checkpoint_filename(1));
  ::setenv("MANTISSA_TEST_CKPT_WRITER", path.c_str(), 1);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=RunnerCheckpoint.DISABLED_WriterChild";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ), 0);
  ::unsetenv("MANTISSA_TEST_CKPT_WRITER");
  // Wait (without asserting on time) for a finished checkpoint and then for the next write to be
  // under way — a temporary with data in it, or the final file changing size (which only an
  // in-place writer would show) — so the kill lands mid-write.
  std::error_code ec;
  for (int i = 0; i < 60000 && !fs::exists(path, ec); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto full_size = fs::file_size(path, ec);
  auto mid_write = [&] {
    for (const auto& e : fs::directory_iterator(dir.path, ec))
      if (mt::runner::is_atomic_temp_name(e.path().filename().string()) &&
          fs::file_size(e.path(), ec) > 0)
        return true;
    return fs::file_size(path, ec) != full_size;
  };
  for (int i = 0; i < 200000 && !mid_write(); ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer exited on its own";
  ASSERT_TRUE(fs::exists(path));
  const auto info = mt::runner::read_checkpoint(path);  // complete: checksum verified
  ASSERT_TRUE(info.trainer_state.has_value());
  EXPECT_GE(info.trainer_state->pending_samples, 0);
  const auto choice = mt::runner::latest_valid_checkpoint(dir.path.string());
  ASSERT_TRUE(choice.has_value());
  EXPECT_TRUE(choice->refused.empty());
  mt::runner::prune_checkpoints(dir.path.string(), 1);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++entries;
  EXPECT_EQ(entries, 1) << "the killed writer's temporary was not pruned";
}
