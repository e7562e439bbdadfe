// A run directory's safety against what schedulers and users do to a running `mantissa`, with
// real processes: a second process refused while one runs (naming its pid), SIGTERM and SIGHUP
// handled like Ctrl-C (final checkpoint, exit 128 + signal, "interrupted"), the resume of a
// finished run changing nothing, the resume of a run killed before its first checkpoint starting
// it from step 0, the resume of a run whose checkpoints were deleted refused, and the resume over
// changed data refused.
#include <array>
#include <cmath>
#include <iostream>
#include <string>

#include "autograd/functions.h"
#include "cli_run_fixture.h"
#include "runner/files/safetensors.h"

namespace {

std::string run_config(int steps, int checkpoint_every) {
  return "model:\n  layers:\n    - {type: linear, in: 10, out: 16}\n    - relu\n"
         "    - {type: linear, in: 16, out: 5}\n"
         "data: {type: teacher, samples: 100, batch_size: 20, noise: 0.1}\n"
         "optimizer: {type: sgd, lr: 0.05}\n"
         "steps: " +
         std::to_string(steps) +
         "\nlog_every: 1\ncheckpoint_every: " + std::to_string(checkpoint_every) + "\n";
}

TEST_F(CliRunTest, ASecondProcessInARunDirectoryIsRefusedNamingTheHolder) {
  write_file(dir_ / "cfg.yaml", run_config(60, 5));
  const pid_t pid = start_slow_run("r", "checkpoints/step-000000005.ckpt");
  const std::string metrics_before = read_file(dir_ / "r" / "metrics.jsonl");
  const Result second = run({"resume", "r", "-q"});
  EXPECT_EQ(second.code, 2) << second.output;
  EXPECT_NE(second.output.find("in use by another mantissa process (pid " + std::to_string(pid)),
            std::string::npos)
      << second.output;
  ::kill(pid, SIGKILL);
  bool signaled = false;
  wait_exit(pid, &signaled);
  ASSERT_TRUE(signaled) << "the first run ended before the second one was tried";
  // The lock went with the killed process: now the resume runs, and the metrics read as one run.
  const Result resumed = run({"resume", "r", "-q"});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  expect_clean_metrics(dir_ / "r" / "metrics.jsonl", 60);
  EXPECT_FALSE(metrics_before.empty());
}

TEST_F(CliRunTest, SigtermAndSighupStopLikeCtrlCAndExitNonZero) {
  write_file(dir_ / "cfg.yaml", run_config(60, 0));  // checkpoint only at the end
  const std::pair<int, std::string> signals[] = {{SIGTERM, "term"}, {SIGHUP, "hup"}};
  for (const auto& [signo, name] : signals) {
    const pid_t pid = start_slow_run(name, "metrics.jsonl");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(pid, signo);
    const int code = wait_exit(pid);
    const std::string out = read_file(dir_ / (name + ".txt"));
    EXPECT_EQ(code, 128 + signo) << out;
    EXPECT_NE(out.find("interrupted at step "), std::string::npos) << out;
    EXPECT_EQ(out.find("done:"), std::string::npos) << out;
    // Nothing since the start is lost: a checkpoint at the step where it stopped.
    const JsonDoc summary(read_file(dir_ / name / "summary.json"));
    EXPECT_FALSE(summary.at("completed").as_bool());
    const int64_t stopped_at = summary.at("steps").as_int();
    EXPECT_GT(stopped_at, 0);
    EXPECT_LT(stopped_at, 60);
    const std::string ckpt = std::to_string(stopped_at);
    EXPECT_TRUE(fs::exists(dir_ / name / "checkpoints" /
                           ("step-" + std::string(9 - ckpt.size(), '0') + ckpt + ".ckpt")));
    EXPECT_NE(read_file(dir_ / name / "train.log").find("interrupted at step"), std::string::npos);
    const Result resumed = run({"resume", name, "-q"});
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    expect_clean_metrics(dir_ / name / "metrics.jsonl", 60);
  }
}

TEST_F(CliRunTest, ResumingAFinishedRunChangesNothing) {
  write_file(dir_ / "cfg.yaml", run_config(12, 5));
  ASSERT_EQ(run({"train", "cfg.yaml", "--run-dir", "r", "-q"}).code, 0);
  std::vector<std::pair<fs::path, std::string>> before;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "r"))
    if (e.is_regular_file() && e.path().filename() != ".lock")
      before.emplace_back(e.path(), read_file(e.path()));
  const Result again = run({"resume", "r", "-q"});
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("is complete (step 12 of 12); nothing to do"), std::string::npos)
      << again.output;
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "r"))
    files += e.is_regular_file() && e.path().filename() != ".lock";
  EXPECT_EQ(files, before.size());
  for (const auto& [path, bytes] : before) EXPECT_EQ(read_file(path), bytes) << path;
}

// A run whose checkpoints are gone (checkpoints/ emptied or removed) after it wrote them cannot be
// resumed: starting it again from step 0 would throw its progress away. Refused with one line and
// exit 2, finished or not, and its directory is left as it was.
TEST_F(CliRunTest, ResumeOfARunWhoseCheckpointsAreGoneIsRefusedAndTouchesNothing) {
  write_file(dir_ / "cfg.yaml", run_config(12, 5));
  ASSERT_EQ(run({"train", "cfg.yaml", "--run-dir", "r", "-q"}).code, 0);
  // Emptied first, then removed: both are refused.
  for (const auto& e : fs::directory_iterator(dir_ / "r" / "checkpoints")) fs::remove(e.path());
  for (const bool finished : {true, false}) {
    if (!finished) {
      fs::remove(dir_ / "r" / "summary.json");
      fs::remove_all(dir_ / "r" / "checkpoints");
    }
    std::vector<std::pair<fs::path, std::string>> before;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "r"))
      if (e.is_regular_file()) before.emplace_back(e.path(), read_file(e.path()));
    const Result r = run({"resume", "r", "-q"});
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find(finished ? "its checkpoints are gone (checkpoints/ is empty)"
                                     : "its checkpoints are gone (no checkpoints/ folder)"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(finished ? "the run finished" : "the run reached step 12"),
              std::string::npos)
        << r.output;
    size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "r")) files += e.is_regular_file();
    EXPECT_EQ(files, before.size());
    for (const auto& [path, bytes] : before) EXPECT_EQ(read_file(path), bytes) << path;
  }
}

TEST_F(CliRunTest, ARunKilledBeforeItsFirstCheckpointResumesFromStepZero) {
  write_file(dir_ / "cfg.yaml", run_config(30, 0));
  const pid_t pid = start_slow_run("r", "metrics.jsonl");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  ASSERT_FALSE(fs::exists(dir_ / "r" / "summary.json"));
  const Result resumed = run({"resume", "r", "-q"});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("starting the run from step 0"), std::string::npos)
      << resumed.output;
  expect_clean_metrics(dir_ / "r" / "metrics.jsonl", 30);
  // The same weights as a run never killed.
  ASSERT_EQ(run({"train", "cfg.yaml", "--run-dir", "whole", "-q"}).code, 0);
  ASSERT_EQ(run({"export", "r", "r.safetensors"}).code, 0);
  ASSERT_EQ(run({"export", "whole", "whole.safetensors"}).code, 0);
  EXPECT_EQ(read_file(dir_ / "r.safetensors"), read_file(dir_ / "whole.safetensors"));
}

}  // namespace

namespace {

TEST_F(CliRunTest, ResumeOverChangedDataIsRefusedNamingTheData) {
  std::string csv = "a,b,t\n";
  for (int i = 0; i < 40; ++i)
    csv += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(i % 3) + "\n";
  write_file(dir_ / "data.csv", csv);
  write_file(dir_ / "cfg.yaml",
             "model:\n  layers:\n    - {type: linear, in: 2, out: 4}\n    - relu\n"
             "    - {type: linear, in: 4, out: 1}\n"
             "data: {type: csv, path: data.csv, batch_size: 8}\n"
             "steps: 20\ncheckpoint_every: 5\n");
  const pid_t pid = start_slow_run("r", "checkpoints/step-000000005.ckpt");
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  const std::string metrics = read_file(dir_ / "r" / "metrics.jsonl");

  std::string changed = csv;
  changed[changed.size() - 2] = '9';  // the last target: same size, other content
  write_file(dir_ / "data.csv", changed);
  const Result refused = run({"resume", "r", "-q"});
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("the training data (CSV data.csv"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("a data file changed since"), std::string::npos) << refused.output;
  EXPECT_EQ(read_file(dir_ / "r" / "metrics.jsonl"), metrics);

  write_file(dir_ / "data.csv", csv);  // the data back: the run continues
  const Result resumed = run({"resume", "r", "-q"});
  EXPECT_EQ(resumed.code, 0) << resumed.output;
}

}  // namespace

namespace {

// `mantissa eval` and the trainer's own evaluation are one function: the final checkpoint's
// evaluation on the validation split gives the summary's numbers exactly (mixed precision and
// classification included).
TEST_F(CliRunTest, EvalReportsWhatTheTrainerReported) {
  write_file(dir_ / "cfg.yaml",
             "model:\n  layers:\n    - {type: linear, in: 2, out: 16}\n    - relu\n"
             "    - {type: linear, in: 16, out: 2}\n"
             "data: {type: spirals, samples: 200, val_split: 0.2, batch_size: 16}\n"
             "loss: {type: cross_entropy}\nprecision: bfloat16\nsteps: 30\n");
  ASSERT_EQ(run({"train", "cfg.yaml", "--run-dir", "r", "-q"}).code, 0);
  const JsonDoc summary(read_file(dir_ / "r" / "summary.json"));
  const Result e = run({"eval", "r", "--json"});
  ASSERT_EQ(e.code, 0) << e.output;
  const JsonDoc j(e.output.substr(e.output.find('{')));
  EXPECT_EQ(j.at("loss").as_double(), summary.at("final_eval").at("loss").as_double());
  EXPECT_EQ(j.at("accuracy").as_double(), summary.at("final_eval").at("accuracy").as_double());
  EXPECT_EQ(j.at("samples").as_int(), summary.at("final_eval").at("samples").as_int());
}

}  // namespace

namespace {

// The soak: a bfloat16 run killed (SIGKILL) 30 times at varying points, each time resumed, ends
// with the weights, bit for bit, and the metrics, record for record, of the run never killed.
TEST_F(CliRunTest, ThirtyKillsInBfloat16LoseNothing) {
  write_file(dir_ / "cfg.yaml",
             "model:\n  layers:\n    - {type: linear, in: 10, out: 32}\n    - relu\n"
             "    - {type: dropout, p: 0.1}\n    - {type: linear, in: 32, out: 5}\n"
             "data: {type: teacher, samples: 200, batch_size: 16, val_split: 0.1, noise: 0.1}\n"
             "optimizer: {type: adam, lr: 0.01}\nprecision: bfloat16\nmaster_weights: true\n"
             "steps: 600\nlog_every: 1\neval_every: 50\ncheckpoint_every: 4\n");
  ASSERT_EQ(run({"train", "cfg.yaml", "--run-dir", "whole", "-q"}).code, 0);

  uint32_t rng = 2026;
  int kills = 0;
  bool finished = false;
  for (int attempt = 0; attempt < 60 && kills < 30 && !finished; ++attempt) {
    // As a user would: `train` again while the first one died before writing resolved.yaml.
    const std::vector<std::string> args =
        fs::exists(dir_ / "soak" / "resolved.yaml")
            ? std::vector<std::string>{"resume", "soak", "-q"}
            : std::vector<std::string>{"train", "cfg.yaml", "--run-dir", "soak", "-q"};
    const fs::path log = dir_ / ("soak-" + std::to_string(attempt) + ".txt");
    const pid_t pid = spawn(args, log, {"MANTISSA_STEP_DELAY_MS=4"});
    rng = rng * 1664525u + 1013904223u;
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + (rng >> 24) % 100));
    ::kill(pid, SIGKILL);
    bool signaled = false;
    const int code = wait_exit(pid, &signaled);
    if (signaled) {
      ++kills;
    } else {
      ASSERT_EQ(code, 0) << read_file(log);
      finished = true;
    }
  }
  EXPECT_GE(kills, 30) << "the run finished before it was killed 30 times";
  if (!finished) {
    const Result last = fs::exists(dir_ / "soak" / "resolved.yaml")
                            ? run({"resume", "soak", "-q"})
                            : run({"train", "cfg.yaml", "--run-dir", "soak", "-q"});
    ASSERT_EQ(last.code, 0) << last.output;
  }
  expect_clean_metrics(dir_ / "soak" / "metrics.jsonl", 600);
  // The same loss at every step, and the same evaluations, as the run never killed.
  auto losses = [&](const char* run_dir) {
    std::vector<double> out;
    std::istringstream in(read_file(dir_ / run_dir / "metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      const JsonDoc j(line);
      out.push_back(j.find("eval") ? j.at("eval").at("loss").as_double()
                                   : j.at("loss").as_double());
    }
    return out;
  };
  EXPECT_EQ(losses("soak"), losses("whole"));
  ASSERT_EQ(run({"export", "whole", "whole.safetensors"}).code, 0);
  ASSERT_EQ(run({"export", "soak", "soak.safetensors"}).code, 0);
  EXPECT_EQ(read_file(dir_ / "whole.safetensors"), read_file(dir_ / "soak.safetensors"));
  const JsonDoc a(read_file(dir_ / "whole" / "summary.json"));
  const JsonDoc b(read_file(dir_ / "soak" / "summary.json"));
  EXPECT_EQ(a.at("final_loss").as_double(), b.at("final_loss").as_double());
  EXPECT_EQ(a.at("final_eval").at("loss").as_double(), b.at("final_eval").at("loss").as_double());
}

}  // namespace

namespace {

// A `train` killed before it wrote resolved.yaml leaves at most that write's temporary: the
// directory holds no run, and `train` may start there again (any other file keeps it refused).
TEST_F(CliRunTest, TrainStartsAgainInADirectoryLeftWithOnlyATemporary) {
  write_file(dir_ / "cfg.yaml", run_config(5, 0));
  fs::create_directories(dir_ / "r");
  write_file(dir_ / "r" / ".resolved.yaml.tmp-12345", "partial");
  const Result again = run({"train", "cfg.yaml", "--run-dir", "r", "-q"});
  EXPECT_EQ(again.code, 0) << again.output;
  fs::create_directories(dir_ / "s");
  write_file(dir_ / "s" / "notes.txt", "mine");
  const Result refused = run({"train", "cfg.yaml", "--run-dir", "s", "-q"});
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("already exists and is not empty"), std::string::npos);
}

}  // namespace

namespace {

// The entropy of the text's bytes in nats: the loss of the best model that ignores context.
double unigram_entropy(const std::string& bytes) {
  std::array<double, 256> count{};
  for (unsigned char c : bytes) count[c] += 1;
  double h = 0;
  for (double n : count)
    if (n > 0) h -= n / bytes.size() * std::log(n / bytes.size());
  return h;
}

}  // namespace

// model.fused_head_loss trains configs/gpt_tiny.yaml (shortened) as the unfused head does: the
// same logged losses and final evaluation within float32 rounding of the chunked sums.
TEST_F(CliRunTest, GptFusedHeadLossTrainsAsTheUnfusedHead) {
  const std::string text = source_dir() + "/data/shakespeare/input.txt";
  const auto train = [&](const std::string& dir, bool fused) {
    const Result r =
        run({"train",     config("gpt_tiny.yaml"),
             "--set",     "data.path=" + text,
             "--set",     "steps=20",
             "--set",     "log_every=10",
             "--set",     "eval_every=20",
             "--set",     "checkpoint_every=0",
             "--set",     "data.val_blocks=8",
             "--set",     "schedule.warmup_steps=5",
             "--set",     "sample_tokens=0",
             "--set",     std::string("model.fused_head_loss=") + (fused ? "true" : "false"),
             "--run-dir", dir,
             "-q"});
    EXPECT_EQ(r.code, 0) << r.output;
    return JsonDoc(read_file(dir_ / dir / "summary.json")).at("final_eval").at("loss").as_double();
  };
  const double unfused = train("unfused", false), fused = train("fused", true);
  std::cout << "validation loss after 20 steps: unfused " << unfused << ", fused " << fused << "\n";
  EXPECT_NEAR(fused, unfused, 1e-4);
  EXPECT_NE(read_file(dir_ / "fused" / "resolved.yaml").find("fused_head_loss: true"),
            std::string::npos);
}

// configs/gpt_tiny.yaml, shortened: the byte-level GPT learns more than byte frequencies within
// a few dozen steps, reports tokens/s, prints its sample, and `mantissa generate` then prints the
// same text for the same seed.
TEST_F(CliRunTest, GptTinyLearnsBeyondByteFrequenciesAndGeneratesDeterministically) {
  const std::string text = source_dir() + "/data/shakespeare/input.txt";
  const double entropy = unigram_entropy(read_file(text));
  std::cout << "byte (unigram) entropy of data/shakespeare/input.txt: " << entropy << " nats\n";
  EXPECT_NEAR(entropy, 3.3208, 1e-3);
  const Result r =
      run({"train", config("gpt_tiny.yaml"), "--set", "data.path=" + text, "--set", "steps=60",
           "--set", "eval_every=60", "--set", "checkpoint_every=0", "--set",
           "schedule.warmup_steps=10", "--set", "sample_tokens=40", "--run-dir", "gpt", "-q"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sample (40 tokens, seed 1337):\nROMEO:"), std::string::npos) << r.output;
  const JsonDoc summary(read_file(dir_ / "gpt" / "summary.json"));
  const double val = summary.at("final_eval").at("loss").as_double();
  std::cout << "validation loss after 60 steps: " << val << " nats\n";
  EXPECT_LT(val, entropy - 0.4) << "the model uses the context";
  std::istringstream metrics(read_file(dir_ / "gpt" / "metrics.jsonl"));
  std::string line;
  std::getline(metrics, line);
  EXPECT_GT(JsonDoc(line).at("tokens_per_s").as_double(), 0.0) << line;

  const std::vector<std::string> gen = {"generate", "gpt",     "--prompt", "KING:",  "--tokens",
                                        "60",       "--top-k", "10",       "--seed", "3"};
  const Result a = run(gen);
  const Result b = run(gen);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(a.output.rfind("KING:", 0), 0u) << a.output;
  EXPECT_EQ(a.output.size(), 5u + 60u + 1u) << a.output;  // the prompt, 60 bytes, a newline
  auto other_seed = gen;
  other_seed.back() = "4";
  EXPECT_NE(run(other_seed).output, a.output);
}

// A relative data path that names no file from the working directory is looked for beside the
// config file, and resolved.yaml records where it was found (so `resume` reads the same file); a
// path found in neither place is one error naming both.
TEST_F(CliRunTest, ARelativeDataPathIsAlsoLookedForBesideTheConfigFile) {
  std::string csv = "a,b,t\n";
  for (int i = 0; i < 24; ++i)
    csv += std::to_string(i % 7) + "," + std::to_string(i % 5) + "," + std::to_string(i % 3) + "\n";
  fs::create_directories(dir_ / "cfgs");
  write_file(dir_ / "cfgs" / "data.csv", csv);
  const std::string model =
      "model:\n  layers:\n    - {type: linear, in: 2, out: 1}\nsteps: 3\ndevice: cpu\n";
  write_file(dir_ / "cfgs" / "cfg.yaml",
             model + "data: {type: csv, path: data.csv, batch_size: 8}\n");
  const Result found = run({"train", "cfgs/cfg.yaml", "--run-dir", "r", "-q"});
  ASSERT_EQ(found.code, 0) << found.output;
  EXPECT_NE(read_file(dir_ / "r" / "resolved.yaml").find("path: \"cfgs/data.csv\""),
            std::string::npos)
      << read_file(dir_ / "r" / "resolved.yaml");
  const Result resumed = run({"resume", "r", "-q"});
  EXPECT_EQ(resumed.code, 0) << resumed.output;

  write_file(dir_ / "cfgs" / "gone.yaml", model + "data: {type: csv, path: gone.csv}\n");
  const Result missing = run({"train", "cfgs/gone.yaml", "--run-dir", "g", "-q"});
  EXPECT_EQ(missing.code, 2) << missing.output;
  const std::string here = fs::weakly_canonical(dir_).string();
  EXPECT_NE(missing.output.find("data.path = gone.csv (line 6): file not found (looked for " +
                                here + "/gone.csv, " + here + "/cfgs/gone.csv)"),
            std::string::npos)
      << missing.output;
  EXPECT_FALSE(fs::exists(dir_ / "g"));
}

// A run initialised from Hugging Face GPT-2 weights with their config.json beside them
// (tests/data/hf_gpt2, written by transformers): the run's model must compute what config.json
// says (a model.activation that differs is exit 2 naming both), and `export --layout hf` writes
// the weights back as save_pretrained did, bit for bit (one SGD step at lr 1e-30 rounds back to
// every weight), with
// a config.json transformers reads.
TEST_F(CliRunTest, HfGpt2InitFromAndExportBackToHuggingFace) {
  std::string ids;
  for (int i = 0; i < 400; ++i) {
    const uint16_t id = static_cast<uint16_t>((i * 7) % 32);
    ids.push_back(static_cast<char>(id & 0xff));
    ids.push_back(static_cast<char>(id >> 8));
  }
  write_file(dir_ / "train.bin", ids);
  const std::string weights = source_dir() + "/tests/data/hf_gpt2/model.safetensors";
  const auto cfg = [&](const std::string& numerics) {
    return "model: {preset: gpt, n_layer: 2, n_head: 2, n_embd: 16, block_size: 8, vocab_size: "
           "32, " +
           numerics + "init_from: " + weights +
           "}\n"
           "data: {type: tokens_bin, path: train.bin, block_size: 8, batch_size: 2}\n"
           "optimizer: {type: sgd, lr: 1.0e-30}\n"
           "loss: {type: cross_entropy}\nsteps: 1\ndevice: cpu\nsample_tokens: 0\n";
  };
  write_file(dir_ / "wrong.yaml", cfg(""));
  const Result wrong = run({"train", "wrong.yaml", "--run-dir", "w", "-q"});
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  // The key is unset: the line says so (not `= ""`), names the default the model would use
  // and the line to add.
  for (const char* part :
       {"config error: model.activation (not set): the model would use gelu, its default, but ",
        "config.json (beside model.init_from) says gelu_tanh (activation_function gelu_new); add "
        "the line model.activation: gelu_tanh"})
    EXPECT_NE(wrong.output.find(part), std::string::npos) << wrong.output << "\nlacks: " << part;
  EXPECT_EQ(wrong.output.find("= \"\""), std::string::npos) << wrong.output;
  // Set to something else, it is named with where it was set.
  write_file(dir_ / "set.yaml", cfg("activation: gelu, "));
  const Result set = run({"train", "set.yaml", "--run-dir", "s", "-q"});
  EXPECT_EQ(set.code, 2) << set.output;
  EXPECT_NE(set.output.find("model.activation = gelu (line 1): is gelu, but "), std::string::npos)
      << set.output;
  EXPECT_NE(set.output.find("; set model.activation: gelu_tanh"), std::string::npos) << set.output;
  EXPECT_FALSE(fs::exists(dir_ / "w"));

  write_file(dir_ / "hf.yaml", cfg("activation: gelu_tanh, layer_norm_eps: 0.001, "));
  const Result trained = run({"train", "hf.yaml", "--run-dir", "r", "-q"});
  ASSERT_EQ(trained.code, 0) << trained.output;
  const Result exported = run({"export", "r", "out", "--layout", "hf"});
  ASSERT_EQ(exported.code, 0) << exported.output;
  const auto original = mantissa::runner::load_safetensors(weights);
  const auto written =
      mantissa::runner::load_safetensors((dir_ / "out" / "model.safetensors").string());
  std::vector<std::string> got = written.names(), want = original.names();
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  for (const auto& [name, t] : original.tensors) {
    const mantissa::Tensor* w = written.find(name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_TRUE(mantissa::equal(*w, t)) << name;
  }
  const std::string config = read_file(dir_ / "out" / "config.json");
  EXPECT_NE(config.find("\"activation_function\": \"gelu_new\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"layer_norm_epsilon\": 0.001"), std::string::npos) << config;
  // A file where the directory should be is refused; a toy run has no HF layout.
  write_file(dir_ / "a_file", "x");
  const Result onto_file = run({"export", "r", "a_file", "--layout", "hf"});
  EXPECT_EQ(onto_file.code, 2) << onto_file.output;
  EXPECT_NE(onto_file.output.find("writes a directory"), std::string::npos) << onto_file.output;
  write_file(dir_ / "toy.yaml", run_config(2, 0));
  ASSERT_EQ(run({"train", "toy.yaml", "--run-dir", "toy", "-q"}).code, 0);
  const Result toy = run({"export", "toy", "toy_hf", "--layout", "hf"});
  EXPECT_NE(toy.code, 0);
  EXPECT_NE(toy.output.find("not a GPT run"), std::string::npos) << toy.output;
}

// GPT-2 BPE end to end: `mantissa prepare` writes nanoGPT's train.bin / val.bin with the ids
// Hugging Face tokenizers gives (tests/data/bpe/expected.json), a GPT trains on them with
// data.tokenizer, prints its sample in text, and `mantissa generate` encodes the prompt and
// decodes with the run's tokenizer, deterministically.
TEST_F(CliRunTest, PrepareWithABpeTokenizerThenTrainAndGenerate) {
  const std::string text = source_dir() + "/data/shakespeare/input.txt";
  const std::string tok = source_dir() + "/tests/data/bpe/tokenizer.json";
  fs::create_directories(dir_ / "data");
  const Result p = run({"prepare", text, "--tokenizer", tok, "--out", "data"});
  ASSERT_EQ(p.code, 0) << p.output;
  EXPECT_NE(p.output.find("train.bin: 106530 tokens"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("val.bin: 11760 tokens"), std::string::npos) << p.output;
  const JsonDoc expected(read_file(source_dir() + "/tests/data/bpe/expected.json"));
  for (const char* part : {"train", "val"}) {
    const std::string bin = read_file(dir_ / "data" / (std::string(part) + ".bin"));
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i + 1 < bin.size(); i += 2) {
      const uint32_t id = static_cast<unsigned char>(bin[i]) |
                          (static_cast<uint32_t>(static_cast<unsigned char>(bin[i + 1])) << 8);
      for (int k = 0; k < 4; ++k) {
        h ^= (id >> (8 * k)) & 0xff;
        h *= 0x100000001b3ull;
      }
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    EXPECT_EQ(std::string(hex), expected.at("bundled").at(part).at("fnv1a64").as_string()) << part;
  }

  const std::vector<std::string> ids_only = {"train", config("gpt_tiny.yaml"),
                                             "--set", "data.type=tokens_bin",
                                             "--set", "data.path=data/train.bin",
                                             "--set", "data.val_path=data/val.bin",
                                             "--set", "data.val_split=0",
                                             "--set", "model.vocab_size=1024",
                                             "--set", "steps=12",
                                             "--set", "eval_every=12",
                                             "--set", "checkpoint_every=0",
                                             "--set", "schedule.warmup_steps=2"};
  auto gpt = ids_only;
  gpt.insert(gpt.end(), {"--set", "data.tokenizer=" + tok, "--set", "sample_tokens=20"});
  auto small_vocab = gpt;
  small_vocab.insert(small_vocab.end(),
                     {"--set", "model.vocab_size=512", "--run-dir", "small", "-q"});
  const Result refused = run(small_vocab);
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("model.vocab_size"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("smaller than data.tokenizer's vocabulary (1024 tokens)"),
            std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(dir_ / "small"));

  auto ok = gpt;
  ok.insert(ok.end(), {"--run-dir", "gpt", "-q"});
  const Result t = run(ok);
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("sample (20 tokens, seed 1337):\nROMEO:"), std::string::npos) << t.output;
  const std::vector<std::string> gen = {"generate", "gpt",     "--prompt", "KING:",  "--tokens",
                                        "30",       "--top-k", "10",       "--seed", "3"};
  const Result a = run(gen), b = run(gen);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(a.output.rfind("KING:", 0), 0u) << a.output;
  // 30 BPE tokens are more than 30 bytes of text: most of them are longer than a byte.
  EXPECT_GT(a.output.size(), 5u + 30u + 1u) << a.output;

  // A tokens_bin run without data.tokenizer has nothing to decode with.
  auto no_tok = ids_only;
  no_tok.insert(no_tok.end(),
                {"--set", "sample_tokens=0", "--set", "steps=2", "--run-dir", "ids", "-q"});
  ASSERT_EQ(run(no_tok).code, 0);
  const Result g = run({"generate", "ids"});
  EXPECT_EQ(g.code, 2) << g.output;
  EXPECT_NE(g.output.find("data.tokenizer is not set"), std::string::npos) << g.output;
}

TEST_F(CliRunTest, PrepareRefusesBadInputAndWritesNothing) {
  const std::string text = source_dir() + "/data/shakespeare/input.txt";
  const std::string tok = source_dir() + "/tests/data/bpe/tokenizer.json";
  write_file(dir_ / "bad.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  const std::vector<std::vector<std::string>> bad = {
      {"prepare", text, "--tokenizer", "missing.json", "--out", "o"},
      {"prepare", "missing.txt", "--tokenizer", tok, "--out", "o"},
      {"prepare", text, "--tokenizer", tok, "--out", "o", "--val-fraction", "1"},
      {"prepare", text, "--tokenizer", "bad.json", "--out", "o"},
      {"prepare", text, "--out", "o"}};
  const std::vector<std::string> says = {"missing.json", "missing.txt", "--val-fraction",
                                         "bad.json.pre_tokenizer", "--tokenizer"};
  for (size_t i = 0; i < bad.size(); ++i) {
    const Result r = run(bad[i]);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(says[i]), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "o"));
  }
}

// Every run also writes TensorBoard scalars (tensorboard: false turns them off); the key stays out
// of resolved.yaml while it is on, so configs written before it keep their hash.
TEST_F(CliRunTest, RunsWriteTensorBoardScalarsUnlessTurnedOff) {
  ASSERT_EQ(
      run({"train", "--run-dir", "on", "-q", "--set", "steps=4", "--set", "log_every=2"}).code, 0);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "on" / "tensorboard"))
    files += e.path().filename().string().find("events.out.tfevents.") == 0;
  EXPECT_EQ(files, 1u);
  EXPECT_EQ(read_file(dir_ / "on" / "resolved.yaml").find("tensorboard"), std::string::npos);
  ASSERT_EQ(
      run({"train", "--run-dir", "off", "-q", "--set", "steps=2", "--set", "tensorboard=false"})
          .code,
      0);
  EXPECT_FALSE(fs::exists(dir_ / "off" / "tensorboard"));
  EXPECT_NE(read_file(dir_ / "off" / "resolved.yaml").find("tensorboard: false"),
            std::string::npos);
}

namespace {

// Muon in a bfloat16 run: the start-up lines say which parameters went to Muon and which to
// AdamW, and a run killed (SIGKILL) after a checkpoint resumes to the weights, bit for bit, of
// the run never killed (the momentum buffers and the AdamW moments in the checkpoint).
TEST_F(CliRunTest, AMuonRunKilledAfterACheckpointResumesBitwise) {
  write_file(dir_ / "cfg.yaml",
             "model:\n  layers:\n    - {type: linear, in: 10, out: 32}\n    - relu\n"
             "    - {type: linear, in: 32, out: 32}\n    - relu\n"
             "    - {type: linear, in: 32, out: 5}\n"
             "data: {type: teacher, samples: 100, batch_size: 20, noise: 0.1}\n"
             "optimizer: {type: muon, lr: 0.02, adamw: {lr: 0.01, betas: [0.9, 0.95]}}\n"
             "schedule: {type: cosine, warmup_steps: 5}\nclip_grad_norm: 1.0\n"
             "precision: bfloat16\nsteps: 40\nlog_every: 1\ncheckpoint_every: 5\n");
  const Result whole = run({"train", "cfg.yaml", "--run-dir", "whole", "-q"});
  ASSERT_EQ(whole.code, 0) << whole.output;
  EXPECT_NE(whole.output.find("optimizer muon: Muon 1 tensor (1024 parameters): 2.weight\n"
                              "optimizer muon: AdamW 5 tensors (549 parameters): 0.weight, "
                              "0.bias, 2.bias, 4.weight, 4.bias\n"),
            std::string::npos)
      << whole.output;
  expect_killed_run_resumes_to_whole();
}

}  // namespace
