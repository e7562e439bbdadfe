// TensorBoard event files (runner/training/tensorboard.h): the framing's CRC-32C, a file written by
// the `tensorboard` package itself (scripts/fixtures/make_tensorboard_fixture.py) read back, torn
// and corrupted records, keeping the steps up to a resume point, and a Trainer's file read by the
// `tensorboard` package's own EventAccumulator where Python has it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/factory.h"
#include "engine/generator.h"
#include "json_doc.h"
#include "nn/loss.h"
#include "nn/optim/sgd.h"
#include "runner/data/data.h"
#include "runner/files/atomic_file.h"
#include "runner/training/tensorboard.h"
#include "runner/training/trainer.h"
#include "temp_dir.h"
#include "test_models.h"

namespace mt = mantissa;
namespace rn = mantissa::runner;
namespace fs = std::filesystem;
using Kind = rn::TensorBoardEvent::Kind;

namespace {

std::string fixture() {
  const char* root = std::getenv("MANTISSA_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/data/tensorboard/events.out.tfevents.fixture";
}

std::map<std::string, float> values(const rn::TensorBoardEvent& e) {
  std::map<std::string, float> m;
  for (const auto& s : e.scalars) m[s.tag] = s.value;
  return m;
}

// A ToyModel run of `steps` steps logging every step into dir (no checkpoints but the last).
void train(const fs::path& dir, int64_t steps, bool tensorboard = true) {
  mt::manual_seed(0);
  auto data = rn::make_teacher_dataset({.samples = 64, .seed = 1});
  auto loader = std::make_shared<rn::DataLoader>(data, rn::DataLoaderOptions{.batch_size = 8});
  auto model = std::make_shared<mt::testing::ToyModel>();
  auto opt = std::make_shared<mt::optim::SGD>(model->parameters(), 0.05);
  rn::Trainer trainer(model, mt::nn::MSELoss(), opt, loader,
                      {.max_steps = steps,
                       .log_every = 1,
                       .run_dir = dir.string(),
                       .tensorboard = tensorboard,
                       .progress = false});
  trainer.fit();
}

}  // namespace

TEST(TensorBoard, Crc32cIsCastagnolis) {
  EXPECT_EQ(rn::crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(rn::crc32c(""), 0u);
  EXPECT_EQ(rn::crc32c(std::string(32, '\0')), 0x8a9136aau);
}

TEST(TensorBoard, ReadsAFileTheTensorBoardPackageWrote) {
  const auto events = rn::read_tensorboard_events(fixture());
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].kind, Kind::FileVersion);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].kind, Kind::Scalars);
  EXPECT_EQ(events[1].step, 1);
  EXPECT_EQ(events[1].wall_time, 1000.5);
  EXPECT_EQ(values(events[1]),
            (std::map<std::string, float>{{"train/loss", 2.5f}, {"train/lr", 0.0f}}));
  EXPECT_EQ(values(events[2]).at("train/loss"), -1.25f);
  EXPECT_TRUE(std::isnan(values(events[2]).at("eval/loss")));
  EXPECT_EQ(events[3].kind, Kind::SessionStart);
  EXPECT_EQ(events[3].step, 3);
  EXPECT_TRUE(events[4].scalars.empty()) << "a histogram is no scalar";
  EXPECT_EQ(values(events[5]).at("train/loss"), 0.5f);
}

TEST(TensorBoard, StopsAtATornRecordAndSkipsACorruptOne) {
  const std::string bytes = rn::read_file_bytes(fixture());
  // Cut inside the last record: the others are read.
  EXPECT_EQ(rn::parse_tensorboard_events(bytes.substr(0, bytes.size() - 3)).size(), 5u);
  // A flipped byte in the second record's data fails its checksum: that record alone is skipped.
  std::string flipped = bytes;
  uint64_t first = 0;
  std::memcpy(&first, bytes.data(), 8);
  flipped[16 + first + 12 + 2] ^= 0x40;
  const auto events = rn::parse_tensorboard_events(flipped);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[1].step, 2);
  // A flipped length fails the length's checksum: nothing after it can be found.
  std::string bad_length = bytes;
  bad_length[16 + first] ^= 0x01;
  EXPECT_EQ(rn::parse_tensorboard_events(bad_length).size(), 1u);
  EXPECT_TRUE(rn::parse_tensorboard_events("").empty());
}

TEST(TensorBoard, KeepsTheStepsUpToAResumePoint) {
  mt::testing::TempDir dir;
  const fs::path tb = dir.path / "tb";
  fs::create_directories(tb);
  fs::copy_file(fixture(), tb / "events.out.tfevents.1.host");
  std::ofstream(tb / "notes.txt") << "not an event file";
  rn::keep_tensorboard_events_through_step(tb.string(), 2);
  const auto files = rn::tensorboard_event_files(tb.string());
  ASSERT_EQ(files.size(), 1u);
  const auto kept = rn::read_tensorboard_events(files[0]);
  ASSERT_EQ(kept.size(), 3u);  // the file version, steps 1 and 2
  EXPECT_EQ(kept[2].step, 2);
  rn::keep_tensorboard_events_through_step(tb.string(), 0);
  EXPECT_TRUE(rn::tensorboard_event_files(tb.string()).empty());
  EXPECT_TRUE(fs::exists(tb / "notes.txt"));
}

TEST(TensorBoard, TrainerWritesNoFilesWhenTurnedOff) {
  mt::testing::TempDir dir;
  train(dir.path, 2, /*tensorboard=*/false);
  EXPECT_TRUE(fs::exists(dir.path / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir.path / "tensorboard"));
}

// The `tensorboard` package's EventAccumulator (what TensorBoard's UI loads runs with) reads a
// Trainer's file: the same steps and values as metrics.jsonl. Python with `tensorboard` is
// MANTISSA_TENSORBOARD_PYTHON, else python3; without the package the test is skipped.
TEST(TensorBoard, TheTensorBoardPackageReadsATrainersFile) {
  const char* py_env = std::getenv("MANTISSA_TENSORBOARD_PYTHON");
  const std::string python = py_env ? py_env : "python3";
  if (std::system((python + " -c 'import tensorboard' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << python << " has no `tensorboard` package (pip install tensorboard; set "
                 << "MANTISSA_TENSORBOARD_PYTHON to a Python that has it)";
  mt::testing::TempDir dir;
  train(dir.path / "run", 6);
  const fs::path out = dir.path / "read.json";
  const std::string script =
      "import json, sys\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "acc = EventAccumulator(sys.argv[1], size_guidance={'scalars': 0})\n"
      "acc.Reload()\n"
      "out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in "
      "acc.Tags()['scalars']}\n"
      "json.dump(out, open(sys.argv[2], 'w'))\n";
  std::ofstream(dir.path / "read.py") << script;
  const std::string cmd = python + " " + (dir.path / "read.py").string() + " " +
                          (dir.path / "run" / "tensorboard").string() + " " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const JsonDoc read(rn::read_file_bytes(out.string()));
  std::vector<double> losses;
  std::ifstream metrics(dir.path / "run" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const JsonDoc r(line);
    if (r.contains("step")) losses.push_back(r.at("loss").as_double());
  }
  ASSERT_EQ(losses.size(), 6u);
  const rn::JsonView loss = read.at("train/loss");
  ASSERT_EQ(loss.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(loss[i][0].as_int(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(static_cast<float>(loss[i][1].as_double()), static_cast<float>(losses[i]));
  }
  for (const char* tag : {"train/lr", "train/loss_scale", "train/samples_per_s",
                          "train/step_time_ms", "train/skipped_steps"})
    EXPECT_TRUE(read.contains(tag)) << tag;
}
