// The Trainer: learning on teacher data, metrics.jsonl / train.log / summary.json / checkpoints in
// the run directory, evaluation, and exact resume (N steps straight == k steps, checkpoint, fresh
// objects, resume) in float32, bfloat16 and float16 autocast, mid-epoch and at a skipped step.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "autograd/graph_memory.h"
#include "engine/factory.h"
#include "engine/generator.h"
#include "json_doc.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim/adam.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
#include "runner/data/data.h"
#include "runner/files/atomic_file.h"
#include "runner/files/run_lock.h"
#include "runner/training/checkpoint.h"
#include "runner/training/metrics.h"
#include "runner/training/metrics_json.h"
#include "runner/training/peak_flops.h"
#include "runner/training/progress.h"
#include "runner/training/tensorboard.h"
#include "runner/training/trainer.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
namespace fs = std::filesystem;
using mt::Tensor;
using mt::runner::Trainer;
using mt::runner::TrainerOptions;

namespace {

// The ToyModel, with optional dropout so resume also depends on the generator state.
struct ToyModel : mt::testing::ToyModel {
  explicit ToyModel(double p = 0.0) : mt::testing::ToyModel({.dropout = p, .name = "ToyModel"}) {}
};

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("mt_trainer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Records what the trainer reports.
struct Recorder : mt::runner::Callback {
  std::vector<mt::runner::StepMetrics> steps;
  std::vector<mt::runner::EvalMetrics> evals;
  std::vector<std::string> checkpoints;
  int64_t stop_at_checkpoint = -1;
  void on_step_end(Trainer&, const mt::runner::StepMetrics& m) override { steps.push_back(m); }
  void on_eval(Trainer&, const mt::runner::EvalMetrics& m) override { evals.push_back(m); }
  void on_checkpoint(Trainer& t, const std::string& path) override {
    checkpoints.push_back(path);
    // What a SIGKILL right after this checkpoint leaves: nothing after it.
    if (t.step() == stop_at_checkpoint) t.request_stop();
  }
};

std::vector<JsonDoc> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<JsonDoc> out;
  std::string line;
  while (std::getline(in, line)) out.emplace_back(line, path.string());
  return out;
}

// The TFRecord records of an event file's bytes whose event is past `step`, as they are.
std::string tensorboard_records_after(const std::string& bytes, int64_t step) {
  std::string out;
  for (size_t at = 0; at + 16 <= bytes.size();) {
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    const std::string record = bytes.substr(at, 16 + length);
    const auto events = mt::runner::parse_tensorboard_events(record);
    if (!events.empty() && events[0].step > step) out += record;
    at += 16 + length;
  }
  return out;
}

// The value of `tag` in a scalars event, or NaN.
double scalar(const mt::runner::TensorBoardEvent& e, const std::string& tag) {
  for (const auto& s : e.scalars)
    if (s.tag == tag) return s.value;
  return std::nan("");
}

std::vector<uint32_t> bits(const Tensor& t) {
  const auto v = t.to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

}  // namespace

TEST(RunnerTrainer, LossDecreasesOnTeacherData) {
  mt::manual_seed(0);
  auto data = mt::runner::make_teacher_dataset({.samples = 512, .seed = 1});
  auto split = mt::runner::random_split(data, 0.125, 2);
  auto train = std::make_shared<mt::runner::DataLoader>(
      split.train, mt::runner::DataLoaderOptions{.batch_size = 32, .seed = 3});
  auto val = std::make_shared<mt::runner::DataLoader>(
      split.val, mt::runner::DataLoaderOptions{.batch_size = 64, .shuffle = false});
  auto model = std::make_shared<ToyModel>();
  auto opt =
      std::make_shared<mt::optim::Adam>(model->parameters(), mt::optim::AdamOptions{.lr = 1e-2});
  Trainer trainer(model, mt::nn::MSELoss(), opt, train,
                  {.max_epochs = 15, .log_every = 14, .progress = false});
  trainer.set_val_loader(val);
  auto rec = std::make_shared<Recorder>();
  trainer.add_callback(rec);
  const double before = trainer.evaluate(*val).loss;
  const auto summary = trainer.fit();
  EXPECT_EQ(summary.steps, 15 * 14);
  EXPECT_EQ(summary.epochs, 15);
  ASSERT_EQ(rec->steps.size(), 15u);  // one record per 14 steps
  EXPECT_LT(rec->steps.back().loss, 0.3 * rec->steps.front().loss);
  ASSERT_EQ(rec->evals.size(), 1u);  // eval_every = 0: once at the end
  EXPECT_LT(rec->evals.back().loss, 0.3 * before);
  EXPECT_FALSE(rec->evals.back().accuracy.has_value());
  EXPECT_EQ(rec->evals.back().samples, 64);
  EXPECT_EQ(summary.final_loss, rec->steps.back().loss);
  EXPECT_LE(summary.best_loss, summary.final_loss);
  // At the end of the last epoch (the next next() would start epoch 15); evaluate() on the
  // validation loader left this position alone.
  EXPECT_EQ(train->epoch(), 14);
  EXPECT_EQ(train->index(), 14);
  EXPECT_TRUE(model->is_training());
}

TEST(RunnerTrainer, ClassificationAccuracyOnSpirals) {
  mt::manual_seed(0);
  auto data = mt::runner::make_spirals_dataset({.samples = 256, .noise = 0.02, .seed = 1});
  auto loader = std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = 32, .seed = 1});
  auto model = std::make_shared<mt::nn::SequentialImpl>(mt::nn::Linear(2, 32), mt::nn::Tanh(),
                                                        mt::nn::Linear(32, 32), mt::nn::Tanh(),
                                                        mt::nn::Linear(32, 2));
  auto opt =
      std::make_shared<mt::optim::Adam>(model->parameters(), mt::optim::AdamOptions{.lr = 2e-2});
  Trainer trainer(model, mt::nn::CrossEntropyLoss(), opt, loader,
                  {.max_steps = 400, .log_every = 0, .progress = false});
  mt::runner::DataLoader eval_loader(data, {.batch_size = 100, .shuffle = false});
  const auto before = trainer.evaluate(eval_loader);
  ASSERT_TRUE(before.accuracy.has_value());
  trainer.fit();
  const auto after = trainer.evaluate(eval_loader);
  EXPECT_EQ(after.samples, 256);
  EXPECT_LT(after.loss, before.loss);
  EXPECT_GT(*after.accuracy, 0.9);
  // float32 weights, gradients and Adam's two moments: 16 bytes per parameter.
  const auto memory = mt::runner::training_memory(*model, *opt);
  EXPECT_EQ(memory.optimizer_state_bytes, 2 * memory.weight_bytes);
  EXPECT_DOUBLE_EQ(memory.bytes_per_parameter(), 16.0);
}

TEST(RunnerTrainer, RunDirectoryRecords) {
  TempDir dir;
  mt::manual_seed(0);
  auto data = mt::runner::make_teacher_dataset({.samples = 96, .seed = 1});
  auto split = mt::runner::random_split(data, 0.25, 2);
  auto train = std::make_shared<mt::runner::DataLoader>(
      split.train, mt::runner::DataLoaderOptions{.batch_size = 8, .seed = 3});
  auto val = std::make_shared<mt::runner::DataLoader>(
      split.val, mt::runner::DataLoaderOptions{.batch_size = 8, .shuffle = false});
  auto model = std::make_shared<ToyModel>();
  auto opt = std::make_shared<mt::optim::SGD>(model->parameters(), 0.05);
  Trainer trainer(model, mt::nn::MSELoss(), opt, train,
                  {.max_steps = 25,
                   .clip_grad_norm = 1.0,
                   .log_every = 5,
                   .eval_every = 10,
                   .checkpoint_every = 10,
                   .keep_last = 2,
                   .run_dir = dir.path.string(),
                   .progress = false});
  trainer.set_scheduler(std::make_shared<mt::optim::StepLR>(*opt, 10, 0.5));
  trainer.set_val_loader(val);
  auto rec = std::make_shared<Recorder>();
  trainer.add_callback(rec);
  trainer.fit();

  const auto records = read_jsonl(dir.path / "metrics.jsonl");
  std::vector<int64_t> step_records, eval_records;
  for (const JsonDoc& r : records) {
    if (const auto e = r.find("eval")) {
      eval_records.push_back(e->at("step").as_int());
      EXPECT_TRUE(e->at("loss").is_number());
      continue;
    }
    step_records.push_back(r.at("step").as_int());
    for (const char* key : {"step", "epoch", "loss", "lr", "loss_scale", "skipped", "grad_norm",
                            "samples_per_s", "step_time_ms"})
      EXPECT_TRUE(r.contains(key)) << "metrics record lacks " << key << ": " << r.dump();
    EXPECT_TRUE(r.at("grad_norm").is_number()) << "clipping reports the norm";
    EXPECT_EQ(r.at("loss_scale").as_double(), 1.0) << "float32: scaler disabled";
    EXPECT_FALSE(r.at("skipped").as_bool());
  }
  EXPECT_EQ(step_records, (std::vector<int64_t>{5, 10, 15, 20, 25}));
  EXPECT_EQ(eval_records, (std::vector<int64_t>{10, 20, 25}));
  // lr is the one each logged step used: 0.05 for steps 1-10, 0.025 for 11-20, then 0.0125.
  EXPECT_DOUBLE_EQ(records[0].at("lr").as_double(), 0.05);
  EXPECT_DOUBLE_EQ(records.back().find("eval") ? records[records.size() - 2].at("lr").as_double()
                                               : records.back().at("lr").as_double(),
                   0.0125);

  const JsonDoc summary(std::string(
      std::istreambuf_iterator<char>(std::ifstream(dir.path / "summary.json").rdbuf()), {}));
  for (const char* key :
       {"final_loss", "best_loss", "steps", "steps_skipped", "wall_time_s", "peak_memory_bytes"})
    EXPECT_TRUE(summary.contains(key)) << "summary lacks " << key;
  EXPECT_EQ(summary.at("steps").as_int(), 25);
  EXPECT_EQ(summary.at("steps_skipped").as_int(), 0);
  EXPECT_GT(summary.at("peak_memory_bytes").at("cpu").as_int(), 0);
  // float32 weights and gradients, and plain SGD keeps no state: 8 bytes per parameter.
  const auto& memory = summary.at("training_memory");
  EXPECT_EQ(memory.at("parameters").as_int(), 10 * 10 + 10 + 10 * 5 + 5);
  EXPECT_EQ(memory.at("weight_bytes").as_int(), 4 * memory.at("parameters").as_int());
  EXPECT_EQ(memory.at("optimizer_state_bytes").as_int(), 0);
  EXPECT_DOUBLE_EQ(memory.at("bytes_per_parameter").as_double(), 8.0);
  {
    // The first micro-batch's activations: what its forward kept for backward, as
    // saved_tensor_bytes counts them for the same model on a batch of the same shape.
    const Tensor loss = mt::mse_loss(model->forward(mt::randn({8, 10})), mt::randn({8, 5}));
    const int64_t want = mt::autograd::saved_tensor_bytes(loss, model->parameters()).total;
    EXPECT_GE(want, 8 * 10 * 4 * 2);  // at least the input and the hidden layer, float32
    EXPECT_EQ(memory.at("activation_bytes").as_int(), want);
  }
  EXPECT_DOUBLE_EQ(summary.at("final_loss").as_double(), rec->steps.back().loss);
  EXPECT_TRUE(summary.at("final_eval").contains("loss"));

  // The same records as TensorBoard scalars, in one event file.
  const auto event_files = mt::runner::tensorboard_event_files((dir.path / "tensorboard").string());
  ASSERT_EQ(event_files.size(), 1u);
  const auto events = mt::runner::read_tensorboard_events(event_files[0]);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, mt::runner::TensorBoardEvent::Kind::FileVersion);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  std::vector<int64_t> tb_steps, tb_evals;
  for (const auto& e : events) {
    if (e.kind != mt::runner::TensorBoardEvent::Kind::Scalars) continue;
    if (!std::isnan(scalar(e, "train/loss"))) {
      const auto& m = rec->steps.at(tb_steps.size());
      tb_steps.push_back(e.step);
      EXPECT_EQ(e.step, m.step);
      EXPECT_EQ(scalar(e, "train/loss"), static_cast<float>(m.loss));
      EXPECT_EQ(scalar(e, "train/lr"), static_cast<float>(m.lr));
      EXPECT_EQ(scalar(e, "train/loss_scale"), 1.0f);
      EXPECT_EQ(scalar(e, "train/grad_norm"), static_cast<float>(m.grad_norm));
      EXPECT_FALSE(std::isnan(scalar(e, "train/samples_per_s")));
    } else {
      EXPECT_EQ(scalar(e, "eval/loss"), static_cast<float>(rec->evals.at(tb_evals.size()).loss));
      tb_evals.push_back(e.step);
    }
  }
  EXPECT_EQ(tb_steps, step_records);
  EXPECT_EQ(tb_evals, eval_records);

  std::ifstream log(dir.path / "train.log");
  const std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("step 25/25"), std::string::npos) << text;
  EXPECT_NE(text.find("eval at step 20"), std::string::npos) << text;
  // Checkpoints at 10, 20 and the end (25); keep_last = 2 keeps the newest two.
  EXPECT_EQ(rec->checkpoints.size(), 3u);
  const auto kept = mt::runner::list_checkpoints((dir.path / "checkpoints").string());
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_NE(kept[0].find(mt::runner::checkpoint_filename(25)), std::string::npos);
  EXPECT_NE(kept[1].find(mt::runner::checkpoint_filename(20)), std::string::npos);
}

TEST(RunnerTrainer, ProgressLinesWithoutATerminal) {
  mt::manual_seed(0);
  auto data = mt::runner::make_teacher_dataset({.samples = 64, .seed = 1});
  auto loader = std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = 8});
  auto model = std::make_shared<ToyModel>();
  auto opt = std::make_shared<mt::optim::SGD>(model->parameters(), 0.05);
  Trainer trainer(model, mt::nn::MSELoss(), opt, loader, {.max_steps = 30, .progress = false});
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  // Not a terminal, a line at most every 0 s: one per step, then the final one.
  trainer.add_callback(std::make_shared<mt::runner::ProgressBar>(false, 0.0, out));
  trainer.fit();
  std::rewind(out);
  std::string text;
  char buf[256];
  while (std::fgets(buf, sizeof buf, out)) text += buf;
  std::fclose(out);
  EXPECT_EQ(text.find('\r'), std::string::npos) << "no redraws in a log";
  EXPECT_NE(text.find("progress:  10%  step 3/30"), std::string::npos) << text;
  EXPECT_NE(text.find("progress: 100%  step 30/30  loss "), std::string::npos) << text;
  EXPECT_NE(text.find("elapsed"), std::string::npos) << text;
  EXPECT_NE(text.find("ETA"), std::string::npos) << text;
  EXPECT_EQ(mt::runner::format_duration(65), "1m05s");
  EXPECT_EQ(mt::runner::format_duration(7380), "2h03m");
}

namespace {

struct ResumeCase {
  mt::amp::Precision precision;
  bool adam_cosine_clip;  // else SGD with momentum + StepLR
  std::optional<mt::amp::GradScalerOptions> scaler{};
  int64_t total = 24;
  int64_t k = 10;  // 100 examples / 16 per batch = 7 batches per epoch: step 10 is mid-epoch
  int64_t grad_accum = 1;
};

struct RunResult {
  std::vector<std::vector<uint32_t>> params;
  std::vector<mt::runner::StepMetrics> steps;
  double scale;
  int64_t skipped;
};

// One training run; with resume_dir, a fresh run that resumes from the checkpoint at step k
// there. With stop_at, the run stops right after writing its checkpoint at that step.
RunResult run(const ResumeCase& c, const std::string& run_dir, int64_t stop_at, bool resume) {
  // Fresh objects; a resumed run starts from other weights, which the checkpoint overwrites.
  mt::manual_seed(resume ? 999 : 0);
  auto data = mt::runner::make_teacher_dataset({.samples = 100, .seed = 1});
  auto loader = std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = 16, .seed = 5});
  auto model = std::make_shared<ToyModel>(/*dropout=*/0.2);
  std::shared_ptr<mt::optim::Optimizer> opt;
  std::shared_ptr<mt::optim::LRScheduler> sched;
  if (c.adam_cosine_clip) {
    auto adam =
        std::make_shared<mt::optim::Adam>(model->parameters(), mt::optim::AdamOptions{.lr = 1e-2});
    sched = std::make_shared<mt::optim::CosineWarmupLR>(*adam, 3, c.total);
    opt = adam;
  } else {
    auto sgd = std::make_shared<mt::optim::SGD>(model->parameters(), 0.05,
                                                mt::optim::SGDOptions{.momentum = 0.9});
    sched = std::make_shared<mt::optim::StepLR>(*sgd, 7, 0.5);
    opt = sgd;
  }
  TrainerOptions o{.max_steps = c.total,
                   .precision = c.precision,
                   .scaler = c.scaler,
                   .clip_grad_norm = c.adam_cosine_clip ? 0.5 : 0.0,
                   .grad_accum_steps = c.grad_accum,
                   .log_every = 1,
                   .checkpoint_every = c.k,
                   .keep_last = 0,
                   .run_dir = run_dir,
                   .seed = 11,
                   .progress = false};
  Trainer trainer(model, mt::nn::MSELoss(), opt, loader, o);
  trainer.set_scheduler(sched);
  auto rec = std::make_shared<Recorder>();
  rec->stop_at_checkpoint = stop_at;
  trainer.add_callback(rec);
  if (resume)
    trainer.resume_from(
        (fs::path(run_dir) / "checkpoints" / mt::runner::checkpoint_filename(c.k)).string());
  trainer.fit();
  RunResult r;
  for (const auto& p : model->parameters()) r.params.push_back(bits(p));
  r.steps = rec->steps;
  r.scale = trainer.scaler().get_scale();
  r.skipped = trainer.steps_skipped();
  return r;
}

void expect_resume_exact(const ResumeCase& c) {
  TempDir straight_dir, killed_dir;
  const RunResult straight = run(c, straight_dir.path.string(), -1, false);
  const RunResult first = run(c, killed_dir.path.string(), c.k, false);
  ASSERT_EQ(first.steps.size(), static_cast<size_t>(c.k));
  {
    // What a run killed a little after checkpoint k leaves behind: a record past k and a torn
    // line. The resumed run must drop both.
    std::ofstream out(killed_dir.path / "metrics.jsonl", std::ios::app);
    out << "{\"step\": " << c.k + 1 << ", \"loss\": 1.0}\n{\"step\": " << c.k + 2 << ", \"lo";
    // And in its TensorBoard file: the events of the steps after k (the uninterrupted run's),
    // then a torn record.
    const auto straight_files =
        mt::runner::tensorboard_event_files((straight_dir.path / "tensorboard").string());
    const auto killed_files =
        mt::runner::tensorboard_event_files((killed_dir.path / "tensorboard").string());
    ASSERT_EQ(straight_files.size(), 1u);
    ASSERT_EQ(killed_files.size(), 1u);
    std::ofstream tb(killed_files[0], std::ios::app | std::ios::binary);
    tb << tensorboard_records_after(mt::runner::read_file_bytes(straight_files[0]), c.k)
       << std::string("\x40\x00\x00\x00\x00", 5);
  }
  const RunResult resumed = run(c, killed_dir.path.string(), -1, true);
  std::vector<int64_t> logged;
  for (const JsonDoc& r : read_jsonl(killed_dir.path / "metrics.jsonl"))
    logged.push_back(r.at("step").as_int());
  std::vector<int64_t> expected_steps(c.total);
  for (int64_t i = 0; i < c.total; ++i) expected_steps[i] = i + 1;
  EXPECT_EQ(logged, expected_steps) << "metrics.jsonl reads as one uninterrupted run";
  // So do the TensorBoard files, read in TensorBoard's order: every step once, the resumed
  // session's file starting with the restart marker at k + 1.
  const auto event_files =
      mt::runner::tensorboard_event_files((killed_dir.path / "tensorboard").string());
  ASSERT_EQ(event_files.size(), 2u);
  std::vector<int64_t> tb_steps;
  for (const auto& file : event_files) {
    for (const auto& e : mt::runner::read_tensorboard_events(file))
      if (!std::isnan(scalar(e, "train/loss"))) tb_steps.push_back(e.step);
  }
  EXPECT_EQ(tb_steps, expected_steps) << "the TensorBoard files read as one uninterrupted run";
  const auto resumed_events = mt::runner::read_tensorboard_events(event_files[1]);
  ASSERT_GE(resumed_events.size(), 2u);
  EXPECT_EQ(resumed_events[1].kind, mt::runner::TensorBoardEvent::Kind::SessionStart);
  EXPECT_EQ(resumed_events[1].step, c.k + 1);
  ASSERT_EQ(straight.params.size(), resumed.params.size());
  for (size_t i = 0; i < straight.params.size(); ++i)
    EXPECT_EQ(straight.params[i], resumed.params[i]) << "parameter " << i << " differs";
  EXPECT_EQ(straight.scale, resumed.scale);
  EXPECT_EQ(straight.skipped, resumed.skipped);
  // The records after the resume point are the same too (losses bitwise, lr, scale, skips).
  ASSERT_EQ(resumed.steps.size(), static_cast<size_t>(c.total - c.k));
  for (size_t i = 0; i < resumed.steps.size(); ++i) {
    const auto& a = straight.steps[c.k + i];
    const auto& b = resumed.steps[i];
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.loss, b.loss) << "step " << a.step;
    EXPECT_EQ(a.lr, b.lr) << "step " << a.step;
    EXPECT_EQ(a.loss_scale, b.loss_scale) << "step " << a.step;
    EXPECT_EQ(a.skipped, b.skipped) << "step " << a.step;
  }
  // And the straight run really learned something different from its start.
  EXPECT_LT(straight.steps.back().loss, straight.steps.front().loss);
}

}  // namespace

TEST(RunnerTrainerResume, Float32MidEpochEqualsUninterrupted) {
  expect_resume_exact({.precision = mt::amp::Precision::Float32, .adam_cosine_clip = false});
}

TEST(RunnerTrainerResume, Tf32MidEpochEqualsUninterrupted) {
  expect_resume_exact({.precision = mt::amp::kTF32, .adam_cosine_clip = true, .k = 12});
}

TEST(RunnerTrainerResume, BFloat16AutocastAdamClipEqualsUninterrupted) {
  expect_resume_exact({.precision = mt::amp::Precision::BFloat16, .adam_cosine_clip = true});
}

TEST(RunnerTrainerResume, Float16WithSkippedStepAtCheckpointEqualsUninterrupted) {
  // A huge initial scale makes the first float16 steps overflow: the step at k = 10 is skipped,
  // and the scale must come back from the checkpoint mid back-off.
  mt::amp::GradScalerOptions s;
  s.init_scale = std::ldexp(1.0, 40);
  s.growth_interval = 4;
  // About 25 steps overflow before the scale is small enough; 40 steps leave some to learn.
  const ResumeCase c{
      .precision = mt::amp::Precision::Float16, .adam_cosine_clip = true, .scaler = s, .total = 40};
  TempDir dir;
  const RunResult straight = run(c, dir.path.string(), -1, false);
  ASSERT_TRUE(straight.steps[c.k - 1].skipped) << "the test needs step k to be skipped";
  EXPECT_GT(straight.skipped, c.k - 1);
  EXPECT_LT(straight.skipped, c.total) << "some steps must be taken";
  expect_resume_exact(c);
}

TEST(RunnerTrainerResume, GradAccumAcrossEpochsEqualsUninterrupted) {
  // 3 micro-batches per step: the checkpoint at step 5 falls after micro-batch 15, in the third
  // epoch of 7 batches, and steps 2, 4 and 7 take micro-batches from two epochs.
  expect_resume_exact({.precision = mt::amp::Precision::Float32,
                       .adam_cosine_clip = true,
                       .total = 12,
                       .k = 5,
                       .grad_accum = 3});
}

namespace {

struct MicroBatchRecorder : mt::runner::Callback {
  std::vector<std::pair<int64_t, bool>> calls;
  void on_micro_batch(Trainer&, int64_t index, bool last) override {
    calls.emplace_back(index, last);
  }
};

// Parameters after `steps` SGD steps on 64 teacher examples in order, batch_size examples per
// loader batch and `accum` of them per step.
std::vector<std::vector<float>> sgd_params(int64_t batch_size, int64_t accum, int64_t steps,
                                           MicroBatchRecorder* rec = nullptr) {
  mt::manual_seed(0);
  auto data = mt::runner::make_teacher_dataset({.samples = 64, .seed = 1});
  auto loader = std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = batch_size, .shuffle = false});
  auto model = std::make_shared<ToyModel>();
  auto opt = std::make_shared<mt::optim::SGD>(model->parameters(), 0.1);
  Trainer trainer(model, mt::nn::MSELoss(), opt, loader,
                  {.max_steps = steps, .grad_accum_steps = accum, .progress = false});
  if (rec != nullptr)
    trainer.add_callback(std::shared_ptr<mt::runner::Callback>(rec, [](auto*) {}));
  trainer.fit();
  std::vector<std::vector<float>> out;
  for (const auto& p : model->parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace

TEST(RunnerTrainer, GradAccumEqualsOneBatchOfAllMicroBatches) {
  MicroBatchRecorder rec;
  const auto accumulated = sgd_params(8, 4, 3, &rec);
  const auto whole = sgd_params(32, 1, 3);
  const auto unaccumulated = sgd_params(8, 1, 3);
  ASSERT_EQ(accumulated.size(), whole.size());
  double diff_whole = 0, diff_small = 0;
  for (size_t i = 0; i < whole.size(); ++i)
    for (size_t j = 0; j < whole[i].size(); ++j) {
      diff_whole = std::max(diff_whole, double(std::fabs(accumulated[i][j] - whole[i][j])));
      diff_small = std::max(diff_small, double(std::fabs(unaccumulated[i][j] - whole[i][j])));
    }
  EXPECT_LT(diff_whole, 1e-5) << "4 micro-batches of 8 step as one batch of 32";
  EXPECT_GT(diff_small, 1e-3) << "the comparison can tell the batch sizes apart";
  const std::vector<std::pair<int64_t, bool>> step = {
      {0, false}, {1, false}, {2, false}, {3, true}};
  std::vector<std::pair<int64_t, bool>> expected;
  for (int i = 0; i < 3; ++i) expected.insert(expected.end(), step.begin(), step.end());
  EXPECT_EQ(rec.calls, expected);
}

TEST(RunnerTrainer, TokensPerSecondAndMfuForTokenInputs) {
  // A model fed int64 ids (cast to features here) reports tokens/s and, given its FLOPs per token
  // and a peak, mfu; float inputs report neither.
  auto run = [](bool tokens, double flops_per_token, const std::string& run_dir = "") {
    mt::manual_seed(0);
    std::vector<int64_t> ids(32 * 10);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i % 7);
    Tensor x = mt::from_vector(ids, mt::Shape{32, 10});
    if (!tokens) x = x.to(mt::DType::Float32);
    auto data = std::make_shared<mt::runner::TensorDataset>(x, mt::zeros({32, 5}));
    auto loader = std::make_shared<mt::runner::DataLoader>(
        data, mt::runner::DataLoaderOptions{.batch_size = 4, .shuffle = false});
    auto model = std::make_shared<ToyModel>();
    auto opt = std::make_shared<mt::optim::SGD>(model->parameters(), 0.01);
    Trainer trainer(
        model, [m = model.get()](const Tensor& in) { return m->forward(in.to(mt::kFloat32)); },
        [](const Tensor& out, const Tensor& target) {
          return mt::nn::functional::mse_loss(out, target);
        },
        opt, loader,
        {.max_steps = 4,
         .grad_accum_steps = 2,
         .flops_per_token = flops_per_token,
         .peak_flops = 1e9,
         .log_every = 2,
         .run_dir = run_dir,
         .progress = false});
    auto rec = std::make_shared<Recorder>();
    trainer.add_callback(rec);
    trainer.fit();
    return rec->steps;
  };
  TempDir dir;
  const auto with_mfu = run(true, 1000.0, dir.path.string());
  ASSERT_EQ(with_mfu.size(), 2u);
  // TensorBoard has them too.
  const auto files = mt::runner::tensorboard_event_files((dir.path / "tensorboard").string());
  ASSERT_EQ(files.size(), 1u);
  size_t logged = 0;
  for (const auto& e : mt::runner::read_tensorboard_events(files[0])) {
    if (std::isnan(scalar(e, "train/loss"))) continue;
    const auto& m = with_mfu.at(logged++);
    EXPECT_EQ(scalar(e, "train/tokens_per_s"), static_cast<float>(m.tokens_per_s));
    EXPECT_EQ(scalar(e, "train/mfu"), static_cast<float>(*m.mfu));
  }
  EXPECT_EQ(logged, 2u);
  for (const auto& m : with_mfu) {
    // 2 steps x 2 micro-batches x 4 x 10 tokens per record.
    EXPECT_NEAR(m.tokens_per_s * m.step_time_ms * 1e-3 * 2, 160.0, 1e-6 * 160.0);
    ASSERT_TRUE(m.mfu.has_value());
    EXPECT_NEAR(*m.mfu, 1000.0 * m.tokens_per_s / 1e9, 1e-12 * m.tokens_per_s);
    EXPECT_TRUE(mt::runner::step_metrics_json(m).contains("tokens_per_s"));
    EXPECT_TRUE(mt::runner::step_metrics_json(m).contains("mfu"));
    EXPECT_NE(mt::runner::format_step(m, 4).find("tokens/s"), std::string::npos);
  }
  const auto no_flops = run(true, 0.0);
  EXPECT_GT(no_flops[0].tokens_per_s, 0.0);
  EXPECT_FALSE(no_flops[0].mfu.has_value());
  const auto features = run(false, 1000.0);
  EXPECT_EQ(features[0].tokens_per_s, 0.0);
  EXPECT_FALSE(features[0].mfu.has_value());
  EXPECT_FALSE(mt::runner::step_metrics_json(features[0]).contains("tokens_per_s"));
  EXPECT_FALSE(mt::runner::step_metrics_json(features[0]).contains("mfu"));
}

TEST(RunnerTrainerResume, RefusesAnotherConfigHash) {
  TempDir dir;
  mt::manual_seed(0);
  auto data = mt::runner::make_teacher_dataset({.samples = 32, .seed = 1});
  auto loader = std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = 8});
  auto model = std::make_shared<ToyModel>();
  auto opt = std::make_shared<mt::optim::SGD>(model->parameters(), 0.05);
  Trainer trainer(
      model, mt::nn::MSELoss(), opt, loader,
      {.max_steps = 3, .run_dir = dir.path.string(), .progress = false, .config_hash = "aaa"});
  trainer.fit();
  const std::string ckpt = trainer.save_checkpoint((dir.path / "x.ckpt").string());
  Trainer other(model, mt::nn::MSELoss(), opt, loader,
                {.max_steps = 3, .progress = false, .config_hash = "bbb"});
  mantissa::testing::expect_error([&] { other.resume_from(ckpt); }, {"config hash aaa", "bbb"});
}

TEST(RunnerTrainerCuda, Float16OnTheGpuLearnsAndReportsDeviceMemory) {
  MT_REQUIRE_GPU();
  TempDir dir;
  mt::manual_seed(0);
  auto data = mt::runner::make_teacher_dataset({.samples = 256, .seed = 1});
  auto loader = std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = 32, .seed = 3});
  auto model = std::make_shared<ToyModel>();
  auto opt =
      std::make_shared<mt::optim::Adam>(model->parameters(), mt::optim::AdamOptions{.lr = 1e-2});
  Trainer trainer(model, mt::nn::MSELoss(), opt, loader,
                  {.max_steps = 80,
                   .device = mt::testing::kGpu,
                   .precision = mt::amp::Precision::Float16,
                   .clip_grad_norm = 1.0,
                   .log_every = 10,
                   .run_dir = dir.path.string(),
                   .progress = false});
  auto rec = std::make_shared<Recorder>();
  trainer.add_callback(rec);
  const auto summary = trainer.fit();
  EXPECT_TRUE(model->parameters()[0].is_cuda());
  EXPECT_TRUE(trainer.scaler().is_enabled());
  ASSERT_EQ(rec->steps.size(), 8u);
  EXPECT_LT(rec->steps.back().loss, 0.5 * rec->steps.front().loss);
  ASSERT_EQ(summary.peak_memory_bytes.size(), 2u);
  EXPECT_EQ(summary.peak_memory_bytes[1].first, "cuda:0");
  EXPECT_GT(summary.peak_memory_bytes[1].second, 0);
  mt::runner::DataLoader eval_loader(data, {.batch_size = 64, .shuffle = false});
  EXPECT_LT(trainer.evaluate(eval_loader).loss, rec->steps.front().loss);
}

// On resume, metrics.jsonl keeps the records up to the checkpoint's step. A process that dies or
// runs out of space while doing so (here: a file size limit far below the file's size, as
// `ulimit -f` or a full quota gives) must leave the whole old file, never a cut one.
TEST(RunnerMetrics, ResumeTrimSurvivesAWriteThatFails) {
  const fs::path dir = fs::temp_directory_path() / ("mt_metrics_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "metrics.jsonl").string();
  std::string original;
  for (int step = 1; step <= 400; ++step)
    original += "{\"step\": " + std::to_string(step) + ", \"loss\": 0.123456789}\n";
  original += "{\"step\": 401, \"lo";  // the torn last line of a killed run
  { std::ofstream(path, std::ios::binary) << original; }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // a failed write instead of a killed process
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      mt::runner::keep_metrics_through_step(path, 300);
    } catch (...) {
      _exit(3);  // refused with an error: expected
    }
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << "the trim should fail under the file size limit";
  std::ifstream in(path, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, original);

  // Without the limit: the records through step 300, the torn line gone.
  mt::runner::keep_metrics_through_step(path, 300);
  std::ifstream trimmed(path);
  int lines = 0;
  for (std::string line; std::getline(trimmed, line);) ++lines;
  EXPECT_EQ(lines, 300);
  fs::remove_all(dir);
}

TEST(RunnerRunDirLock, OneHolderAtATime) {
  const fs::path dir = fs::temp_directory_path() / ("mt_lock_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    mt::runner::RunDirLock first(dir.string());
    mt::testing::expect_error(
        [&] { mt::runner::RunDirLock second(dir.string()); },
        {dir.string(), "in use by another mantissa process", "pid " + std::to_string(::getpid())});
  }
  mt::runner::RunDirLock again(dir.string());  // released with the first
  fs::remove_all(dir);
}

TEST(RunnerMetrics, PeakFlopsTableByDeviceNameAndPrecision) {
  using mt::runner::gpu_peak_flops;
  EXPECT_EQ(gpu_peak_flops("NVIDIA H100 80GB HBM3", mt::amp::Precision::BFloat16), 989.4e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA H100 PCIe", mt::amp::Precision::Float16), 756.0e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA H200", mt::amp::kTF32), 494.7e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA A100-SXM4-80GB", mt::amp::Precision::Float32), 19.5e12);
  EXPECT_EQ(gpu_peak_flops("NVIDIA A10G", mt::amp::Precision::BFloat16), 125.0e12);
  EXPECT_FALSE(gpu_peak_flops("NVIDIA GeForce GTX 1080", mt::amp::Precision::Float32));
  EXPECT_FALSE(mt::runner::device_peak_flops(mt::Device::cpu(), mt::amp::Precision::Float32));
}
