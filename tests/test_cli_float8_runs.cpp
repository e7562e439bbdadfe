// Float8 runs of the `mantissa` command: the Linear layers a float8 section converts, a killed
// run resuming bitwise (with delayed scaling's state in the checkpoint), float8 health in the
// metrics and the layer that saturated first, and the config keys that cannot be met.
#include <string>

#include "cli_run_fixture.h"
#include "runner/files/safetensors.h"

namespace {

// A 16-32-32-5 MLP in bfloat16 autocast for 40 AdamW steps with a checkpoint every 5, and the
// given float8 section: its first two Linear layers can take float8, the last cannot.
std::string float8_run_config(const std::string& float8_section) {
  return "model:\n  layers:\n    - {type: linear, in: 16, out: 32}\n    - relu\n"
         "    - {type: linear, in: 32, out: 32}\n    - relu\n"
         "    - {type: linear, in: 32, out: 5}\n"
         "data: {type: teacher, samples: 100, batch_size: 20, noise: 0.1, in_features: 16}\n"
         "optimizer: {type: adamw, lr: 0.01}\nprecision: bfloat16\n" +
         float8_section + "steps: 40\nlog_every: 1\ncheckpoint_every: 5\n";
}

TEST_F(CliRunTest, AFloat8RunTrainsItsLinearLayersInFloat8AndResumesBitwise) {
  write_file(dir_ / "cfg.yaml", float8_run_config("float8: {recipe: tensorwise}\n"));
  const Result whole = run({"train", "cfg.yaml", "--run-dir", "whole", "-q"});
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_NE(whole.output.find("float8 tensorwise: 2 of 3 Linear layers; features not multiples "
                              "of 16, left in high precision: 4\n"),
            std::string::npos)
      << whole.output;
  EXPECT_NE(read_file(dir_ / "whole" / "resolved.yaml").find("float8:\n  recipe: tensorwise"),
            std::string::npos);
  const JsonDoc summary(read_file(dir_ / "whole" / "summary.json"));
  const auto layers = summary.find("float8_layers");
  ASSERT_TRUE(layers.has_value());
  ASSERT_EQ(layers->size(), 2u);
  EXPECT_EQ((*layers)[0].as_string(), "0");
  EXPECT_EQ((*layers)[1].as_string(), "2");
  expect_killed_run_resumes_to_whole();
  // The same run without float8 ends elsewhere: the layers did run in float8.
  write_file(dir_ / "plain.yaml", float8_run_config(""));
  ASSERT_EQ(run({"train", "plain.yaml", "--run-dir", "plain", "-q"}).code, 0);
  ASSERT_EQ(run({"export", "plain", "plain.safetensors"}).code, 0);
  EXPECT_NE(read_file(dir_ / "plain.safetensors"), read_file(dir_ / "whole.safetensors"));
}

// Delayed scaling keeps each layer's amax history and scales in the checkpoint: the killed run
// resumes to the whole run's weights bit for bit (from fresh scales it would not).
TEST_F(CliRunTest, ADelayedFloat8RunKeepsItsScalesInTheCheckpointAndResumesBitwise) {
  write_file(dir_ / "cfg.yaml",
             float8_run_config("float8: {recipe: delayed, amax_history_len: 16}\n"));
  const Result whole = run({"train", "cfg.yaml", "--run-dir", "whole", "-q"});
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_NE(whole.output.find("float8 delayed (amax history 16, max, margin 0): 2 of 3 Linear "
                              "layers"),
            std::string::npos)
      << whole.output;
  EXPECT_NE(read_file(dir_ / "whole" / "resolved.yaml")
                .find("float8:\n  recipe: delayed\n  amax_history_len: 16\n"),
            std::string::npos);
  const auto ckpt = mantissa::runner::parse_safetensors(
      read_file(dir_ / "whole" / "checkpoints" / "step-000000040.ckpt"), "checkpoint");
  for (const char* name : {"float8.0.amax_history", "float8.0.scale", "float8.2.scale"})
    EXPECT_NE(ckpt.find(name), nullptr) << name;
  ASSERT_NE(ckpt.find("float8.2.amax_history"), nullptr);
  EXPECT_EQ(ckpt.find("float8.2.amax_history")->shape(), mantissa::Shape({16, 3}));
  // The scales moved from their start (1) to the data's.
  EXPECT_NE(ckpt.find("float8.0.scale")->to_vector<float>()[0], 1.0f);
  expect_killed_run_resumes_to_whole();
}

// float8.stats: each logged step records every float8 layer's saturated and flushed values and
// its maxima (and delayed scales) in metrics.jsonl; a run whose loss goes non-finite says which
// layer saturated first, and summary.json keeps it. A learning rate of 50 makes the activations
// outgrow the scales made a step earlier.
TEST_F(CliRunTest, Float8StatsShowSaturationAndNameTheLayerThatSaturatedFirst) {
  write_file(dir_ / "cfg.yaml",
             "model:\n  layers:\n    - {type: linear, in: 16, out: 32}\n    - relu\n"
             "    - {type: linear, in: 32, out: 32}\n    - relu\n"
             "    - {type: linear, in: 32, out: 16}\n"
             "data: {type: teacher, samples: 100, batch_size: 20, noise: 0.1, in_features: 16, "
             "out_features: 16}\n"
             "optimizer: {type: sgd, lr: 50}\n"
             "float8: {recipe: delayed, amax_history_len: 1, stats: true}\nsteps: 12\n"
             "log_every: 1\ncheckpoint_every: 6\n");
  const Result r = run({"train", "cfg.yaml", "--run-dir", "run", "-q"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("3 of 3 Linear layers; stats on"), std::string::npos) << r.output;
  std::istringstream lines(read_file(dir_ / "run" / "metrics.jsonl"));
  std::string line;
  int64_t records = 0, saturated = 0;
  while (std::getline(lines, line)) {
    const JsonDoc j(line);
    const auto f = j.find("float8");
    if (!j.find("step")) continue;
    ASSERT_TRUE(f.has_value()) << line;
    ++records;
    for (const char* layer : {"0", "2", "4"}) {
      for (const char* tensor : {"input", "weight", "grad_output"}) {
        const auto t = f->at(layer).at(tensor);
        EXPECT_TRUE(t.find("scale").has_value()) << line;
        saturated += t.at("saturated").as_int();
        EXPECT_TRUE(t.find("flushed").has_value()) << line;
      }
    }
  }
  EXPECT_EQ(records, 12);
  EXPECT_GT(saturated, 0);
  const std::string log = read_file(dir_ / "run" / "train.log");
  EXPECT_NE(log.find("float8 saturated"), std::string::npos) << log;
  EXPECT_NE(log.find("saturated first"), std::string::npos) << log;
  const JsonDoc summary(read_file(dir_ / "run" / "summary.json"));
  const auto first = summary.find("float8_first_saturation");
  ASSERT_TRUE(first.has_value());
  EXPECT_GT(first->at("values").as_int(), 0);
  ASSERT_LE(first->at("step").as_int(), 6);  // before the checkpoint the resume below starts from
  // A run killed after that checkpoint and resumed names the same first saturation.
  const pid_t pid = start_slow_run("r", "checkpoints/step-000000006.ckpt");
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  ASSERT_EQ(run({"resume", "r", "-q"}).code, 0);
  EXPECT_EQ(JsonDoc(read_file(dir_ / "r" / "summary.json")).at("float8_first_saturation").dump(),
            first->dump());
}

TEST_F(CliRunTest, Float8KeysThatCannotBeMetAreOneConfigErrorLine) {
  const std::string model =
      "model:\n  layers:\n    - {type: linear, in: 10, out: 32}\n    - relu\n"
      "    - {type: linear, in: 32, out: 5}\n"
      "data: {type: teacher, samples: 100, batch_size: 20, noise: 0.1}\nsteps: 2\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"float8: {recipe: delayed_typo}", "float8.recipe"},
      {"float8: {recipe: rowwise, layers: [nope]}", "float8.layers"},
      {"float8: {recipe: rowwise, layers: ['0']}", "float8.layers"},
      {"float8: {recipe: rowwise, skip: ['9']}", "float8.skip"},
      {"float8: {layers: ['2']}", "float8.layers"},
      {"float8: {recipe: tensorwise, skip: ['2']}", "float8.recipe"},  // none left to convert
      {"float8: {recipe: delayed, amax_history_len: 0}", "float8.amax_history_len"},
      {"float8: {recipe: delayed, amax_compute_algo: mean}", "float8.amax_compute_algo"},
      {"float8: {recipe: delayed, margin: -1}", "float8.margin"},
      {"float8: {recipe: delayed, margin: 200}", "float8.margin"},
      {"float8: {recipe: tensorwise, margin: 1}", "float8.margin"},
      {"float8: {recipe: rowwise, amax_history_len: 8}", "float8.amax_history_len"},
      {"float8: {stats: true}", "float8.stats"},
  };
  for (const auto& [section, key] : bad) {
    write_file(dir_ / "bad.yaml", model + section + "\n");
    const Result r = run({"train", "bad.yaml", "--run-dir", "bad", "-q"});
    EXPECT_EQ(r.code, 2) << section << "\n" << r.output;
    EXPECT_NE(r.output.find("config error: " + key), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "bad")) << section;
  }
}

}  // namespace
