// The `mantissa` command end to end: the built binary is run as a child process (fork/exec), as a
// user would run it. Covers --help everywhere, the no-argument default run, every bundled config,
// plot/eval/export/import, bad configs (one line, exit code 2, no run directory), exact resume
// after SIGKILL in float32, float16 (with skipped steps) and bfloat16, and the files export and
// plot refuse to replace, the FIFOs and devices no command reads, and plots of long runs.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "cli_test_util.h"
#include "engine/cpu_matmul_paths.h"
#include "hostile_yaml.h"

namespace {

// MNIST IDX files with `n` random 28x28 images and labels 0..9.
void write_tiny_mnist(const fs::path& images, const fs::path& labels, int n) {
  auto be32 = [](std::string& s, uint32_t v) {
    for (int i = 3; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  std::string img, lab;
  be32(img, 2051), be32(img, n), be32(img, 28), be32(img, 28);
  be32(lab, 2049), be32(lab, n);
  uint32_t state = 12345;
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < 28 * 28; ++p) {
      state = state * 1664525u + 1013904223u;
      img.push_back(static_cast<char>(state >> 24));
    }
    lab.push_back(static_cast<char>(i % 10));
  }
  write_file(images, img);
  write_file(labels, lab);
}

}  // namespace

TEST_F(CliTest, HelpWorksForEveryCommand) {
  const Result top = run({"--help"});
  EXPECT_EQ(top.code, 0) << top.output;
  for (const char* cmd :
       {"train", "resume", "eval", "export", "import", "devices", "plot", "generate"}) {
    EXPECT_NE(top.output.find(cmd), std::string::npos) << cmd;
    const Result r = run({cmd, "--help"});
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << cmd << ": " << r.output;
  }
  const Result none = run({});
  EXPECT_EQ(none.code, 2) << none.output;
  const Result unknown = run({"trian"});
  EXPECT_EQ(unknown.code, 2) << unknown.output;
}

TEST_F(CliTest, TrainWithoutArgumentsTrainsTheToyModel) {
  const Result r = run({"train"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("training toy on"), std::string::npos) << r.output;
  // The header (stdout) comes before the progress lines (stderr) in one captured stream: stdout
  // is flushed before training starts.
  ASSERT_NE(r.output.find("progress:"), std::string::npos) << r.output;
  EXPECT_LT(r.output.find("training toy on"), r.output.find("progress:")) << r.output;
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(dir_ / "runs")) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].filename().string().rfind("toy-", 0), 0u) << runs[0];
  for (const char* f : {"resolved.yaml", "metrics.jsonl", "train.log", "summary.json"}) {
    EXPECT_TRUE(fs::exists(runs[0] / f)) << f;
  }
  const JsonDoc summary(read_file(runs[0] / "summary.json"));
  EXPECT_EQ(summary.at("steps").as_int(), 300);
  EXPECT_LT(summary.at("final_loss").as_double(), 0.1);
  EXPECT_FALSE(fs::is_empty(runs[0] / "checkpoints"));
  // The compiled-in default is configs/toy.yaml.
  const Result dry_default = run({"train", "--dry-run"});
  const Result dry_file = run({"train", config("toy.yaml"), "--dry-run"});
  ASSERT_EQ(dry_default.code, 0) << dry_default.output;
  EXPECT_EQ(dry_default.output, dry_file.output);
}

TEST_F(CliTest, EveryBundledConfigRuns) {
  write_tiny_mnist(dir_ / "images.idx", dir_ / "labels.idx", 40);
  int n = 0;
  for (const auto& e : fs::directory_iterator(source_dir() + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    const std::string name = e.path().stem().string();
    std::vector<std::string> args = {
        "train", e.path().string(), "--set",    "steps=3", "--run-dir", name,
        "--set", "log_every=1",     "--device", "cpu",     "-q"};
    if (name == "mlp_sine" || name.starts_with("gpt_tiny") ||
        name == "gpt2_124m") {  // their warmups must fit in the run
      args.insert(args.end(), {"--set", "schedule.warmup_steps=1"});
    }
    if (name == "mnist_cnn") {
      args.insert(args.end(),
                  {"--set", "data.images=images.idx", "--set", "data.labels=labels.idx"});
    }
    if (name.starts_with("gpt_tiny")) {  // data paths are relative to the working directory
      args.insert(args.end(),
                  {"--set", "data.path=" + source_dir() + "/data/shakespeare/input.txt"});
    }
    if (name == "gpt2_124m") {  // GPT-2's recipe on a CPU-sized model and nanoGPT-style .bin files
      std::string bin;
      for (int i = 0; i < 4000; ++i) {
        const int id = (i * 7919) % 50257;
        bin += static_cast<char>(id & 0xff);
        bin += static_cast<char>(id >> 8);
      }
      std::ofstream(dir_ / "train.bin", std::ios::binary) << bin;
      std::ofstream(dir_ / "val.bin", std::ios::binary) << bin.substr(0, 400);
      args.insert(args.end(), {"--set", "data.path=train.bin", "--set", "data.val_path=val.bin",
                               "--set", "model.n_layer=1",     "--set", "model.n_embd=32",
                               "--set", "model.n_head=2",      "--set", "model.block_size=16",
                               "--set", "data.block_size=16",  "--set", "data.batch_size=2",
                               "--set", "grad_accum_steps=2",  "--set", "eval_every=0"});
    }
    const Result r = run(args);
    EXPECT_EQ(r.code, 0) << name << ": " << r.output;
    if (!fs::exists(dir_ / name / "summary.json")) {
      ADD_FAILURE() << name << ": no summary.json";
      continue;
    }
    const JsonDoc summary(read_file(dir_ / name / "summary.json"));
    EXPECT_EQ(summary.at("steps").as_int(), 3) << name;
    ++n;
  }
  EXPECT_GE(n, 5);
  // Without its files, the MNIST example stops with a config error before doing anything.
  const Result missing = run({"train", config("mnist_cnn.yaml"), "--run-dir", "m2"});
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("data.images = data/mnist/train-images-idx3-ubyte (line"),
            std::string::npos)
      << missing.output;
  EXPECT_FALSE(fs::exists(dir_ / "m2"));
}

TEST_F(CliTest, BadConfigsFailWithOneLineAndExitCode2BeforeWritingAnything) {
  write_file(dir_ / "typo.yaml", "steps: 10\nseed: 1\noptimiser:\n  lr: 0.1\n");
  write_file(dir_ / "type.yaml", "optimizer:\n  lr: fast\n");
  write_file(dir_ / "range.yaml", "data:\n  batch_size: 0\n");
  write_file(dir_ / "file.yaml", "data:\n  type: csv\n  path: nowhere.csv\n");
  write_file(dir_ / "shape.yaml",
             "model:\n  layers:\n    - {type: linear, in: 12, out: 5}\ndata: {type: teacher}\n");
  write_file(dir_ / "out.yaml",
             "model:\n  layers:\n    - {type: linear, in: 10, out: 4}\ndata: {type: teacher}\n");
  // Hostile YAML: an alias inside its own anchor (it crashed), aliases of aliases under unknown
  // keys (the unknown-key check expanded them and hung), a layer too large to allocate.
  write_file(dir_ / "cycle.yaml", mantissa::testing::kYamlAliasCycle);
  write_file(dir_ / "bomb.yaml", mantissa::testing::yaml_alias_bomb());
  write_file(dir_ / "huge.yaml",
             "model:\n  layers:\n    - {type: linear, in: 10, out: 100000000000}\n"
             "    - {type: linear, in: 100000000000, out: 5}\ndata: {type: teacher}\n");
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"typo.yaml"}, "unknown key 'optimiser' at line 3 — did you mean 'optimizer'?"},
      {{"type.yaml"}, "optimizer.lr = fast (line 2): expected a number"},
      {{"range.yaml"}, "data.batch_size = 0 (line 2): must be >= 1"},
      {{"file.yaml"}, "data.path = nowhere.csv (line 3): file not found"},
      {{"shape.yaml"}, "model.layers.0.in = 12 (line 3): does not match the input"},
      {{"out.yaml"}, "model.layers.0.out = 4 (line 3): the model outputs [4]"},
      {{"--set", "optimizer.lr=-2"}, "optimizer.lr = -2 (--set): must be > 0"},
      {{"--set", "optimiser.lr=1"}, "did you mean 'optimizer'?"},
      {{"--device", "gpu"}, "device = gpu (--set): expected auto, cpu, cuda or cuda:N"},
      {{"missing.yaml"}, "cannot read config file 'missing.yaml'"},
      {{"cycle.yaml"}, "cycle.yaml: key 'a.0': an alias refers to a node that contains it"},
      {{"bomb.yaml"}, "bomb.yaml: key 'a"},
      {{"huge.yaml"}, "model.layers.0.out: cannot build model.layers.0 (linear, in 10, out "},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"train"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--run-dir", "never"});
    const Result r = run(args);
    // Under AddressSanitizer (allocator_may_return_null=1) a refused huge allocation also prints
    // "==PID==WARNING: AddressSanitizer failed to allocate ...": the sanitizer's line, not ours.
    std::string out;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("==", 0) != 0 || line.find("AddressSanitizer") == std::string::npos)
        out += line + "\n";
    EXPECT_EQ(r.code, 2) << c.expected << "\n" << r.output;
    EXPECT_NE(out.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "never")) << c.expected;
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
  // An existing run is never overwritten by train.
  fs::create_directories(dir_ / "old");
  write_file(dir_ / "old" / "keep.txt", "x");
  const Result exists = run({"train", "--run-dir", "old"});
  EXPECT_EQ(exists.code, 2) << exists.output;
  EXPECT_NE(exists.output.find("already exists"), std::string::npos) << exists.output;
  EXPECT_EQ(read_file(dir_ / "old" / "keep.txt"), "x");
}

TEST_F(CliTest, PlotEvalExportImport) {
  ASSERT_EQ(run({"train", "--run-dir", "r", "-q", "--set", "steps=60", "--set", "log_every=5",
                 "--set", "eval_every=20", "--set", "checkpoint_every=20"})
                .code,
            0);
  const Result p = run({"plot", "r"});
  ASSERT_EQ(p.code, 0) << p.output;
  const std::string svg = read_file(dir_ / "r" / "plot.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    ++polylines;
    const size_t pts = svg.find("points=\"", at);
    ASSERT_NE(pts, std::string::npos);
    EXPECT_NE(svg[pts + 8], '"') << "empty polyline";  // has points
  }
  EXPECT_EQ(polylines, 3u);
  for (const char* label : {">loss", ">learning rate", ">loss scale", ">step<"}) {
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  }

  const Result e = run({"eval", "r", "--json"});
  ASSERT_EQ(e.code, 0) << e.output;
  const JsonDoc ej(e.output);
  EXPECT_EQ(ej.at("data").as_string(), "val");
  EXPECT_EQ(ej.at("samples").as_int(), 128);
  EXPECT_GT(ej.at("loss").as_double(), 0.0);
  const JsonDoc summary(read_file(dir_ / "r" / "summary.json"));
  EXPECT_NEAR(ej.at("loss").as_double(), summary.at("final_eval").at("loss").as_double(), 1e-6);

  const Result x = run({"export", "r", "w.safetensors"});
  ASSERT_EQ(x.code, 0) << x.output;
  const Result i = run({"import", "w.safetensors", "--config", config("toy.yaml")});
  ASSERT_EQ(i.code, 0) << i.output;
  EXPECT_NE(i.output.find("net1.weight"), std::string::npos) << i.output;
  EXPECT_NE(i.output.find("[10, 10]"), std::string::npos) << i.output;
  EXPECT_NE(i.output.find("loads into the model"), std::string::npos) << i.output;
  // The weights start another run (init_from), whose eval at step 0 equals the exported model's.
  const Result again = run({"train", "--run-dir", "r2", "-q", "--set",
                            "model.init_from=w.safetensors", "--set", "steps=1"});
  EXPECT_EQ(again.code, 0) << again.output;
  // A file that is not safetensors is refused clearly.
  write_file(dir_ / "bad.safetensors", "not a safetensors file");
  const Result bad = run({"import", "bad.safetensors"});
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("bad.safetensors"), std::string::npos) << bad.output;
  const Result dev = run({"devices"});
  EXPECT_EQ(dev.code, 0) << dev.output;
  EXPECT_NE(dev.output.find("cpu: "), std::string::npos) << dev.output;
  // The paths each precision's products take on this CPU, as the engine chose them.
  const std::string bf16 = "bfloat16 products: " + mantissa::cpu::bf16_matmul_isa_name(
                                                       mantissa::cpu::cpu_bf16_matmul_isa());
  EXPECT_NE(dev.output.find(bf16), std::string::npos) << dev.output;
  EXPECT_NE(dev.output.find("float32 products: " + mantissa::cpu::cpu_float32_gemm_description()),
            std::string::npos)
      << dev.output;
  EXPECT_NE(dev.output.find("float16 products: emulated"), std::string::npos) << dev.output;
  EXPECT_NE(dev.output.find(
                "float8 products (e4m3fn, e5m2): on the bfloat16 path (" +
                mantissa::cpu::bf16_matmul_isa_name(mantissa::cpu::cpu_bf16_matmul_isa()) + ")"),
            std::string::npos)
      << dev.output;
}

namespace {

// A run of 40 steps over 100 examples in batches of 24 (5 per epoch, the last one short), with
// checkpoints every 7 steps: every checkpoint but step 35 falls mid-epoch.
std::string resume_config(const std::string& precision, const std::string& extra = "") {
  return "model:\n  layers:\n    - {type: linear, in: 10, out: 32}\n    - relu\n"
         "    - {type: dropout, p: 0.1}\n    - {type: linear, in: 32, out: 5}\n"
         "data: {type: teacher, samples: 100, batch_size: 24, val_split: 0.1, noise: 0.1}\n"
         "optimizer: {type: adam, lr: 0.01}\n"
         "schedule: {type: cosine, warmup_steps: 5}\n"
         "precision: " +
         precision + "\nsteps: 40\nlog_every: 3\neval_every: 10\ncheckpoint_every: 7\n" + extra;
}

}  // namespace

class CliResumeTest : public CliTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(CliResumeTest, KilledAndResumedRunEqualsUninterruptedRun) {
  // bfloat16_sr: pure bfloat16 training (bfloat16 parameters and Adam state, no float32 copy)
  // with stochastic rounding, whose random bits must come back the same after the resume.
  const bool pure_bf16 = GetParam() == "bfloat16_sr";
  const std::string precision = pure_bf16 ? "bfloat16" : GetParam();
  // float16: a scale far too large that grows back fast after each backoff makes the float16
  // gradients overflow every few steps, so skipped steps are sprinkled through the run, around
  // the checkpoints too.
  const std::string extra =
      precision == "float16"
          ? "scaler: {init_scale: 1.0e+12, backoff_factor: 0.001, growth_factor: 1000, "
            "growth_interval: 3}\n"
      : pure_bf16               ? "param_dtype: bfloat16\n"
      : precision == "bfloat16" ? "master_weights: true\n"  // bfloat16 model, float32 masters
                                : "";
  std::string config = resume_config(precision, extra);
  if (pure_bf16) {
    const std::string adam = "optimizer: {type: adam, lr: 0.01}";
    config.replace(config.find(adam), adam.size(),
                   "optimizer: {type: adam, lr: 0.01, stochastic_rounding: true}");
  }
  write_file(dir_ / "cfg.yaml", config);
  const std::vector<std::string> common = {"--device", "cpu", "-q"};

  std::vector<std::string> args = {"train", "cfg.yaml", "--run-dir", "full"};
  args.insert(args.end(), common.begin(), common.end());
  const Result full = run(args);
  ASSERT_EQ(full.code, 0) << full.output;

  // The same run, killed with SIGKILL once checkpoint 14 exists (a delay per step keeps it
  // running long enough to be caught mid-way).
  args = {"train", "cfg.yaml", "--run-dir", "killed"};
  args.insert(args.end(), common.begin(), common.end());
  const pid_t pid = spawn(args, dir_ / "killed.txt", {"MANTISSA_STEP_DELAY_MS=60"});
  const fs::path ckpt = dir_ / "killed" / "checkpoints" / "step-000000014.ckpt";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(ckpt) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(fs::exists(ckpt)) << read_file(dir_ / "killed.txt");
  ::kill(pid, SIGKILL);
  bool signaled = false;
  wait_exit(pid, &signaled);
  ASSERT_TRUE(signaled) << "the run ended before it could be killed";
  ASSERT_FALSE(fs::exists(dir_ / "killed" / "summary.json"));

  const Result resumed = run({"resume", "killed", "-q"});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from killed/checkpoints/step-0000000"), std::string::npos)
      << resumed.output;

  // Final weights bitwise equal, and the same losses.
  ASSERT_EQ(run({"export", "full", "full.safetensors"}).code, 0);
  ASSERT_EQ(run({"export", "killed", "killed.safetensors"}).code, 0);
  EXPECT_EQ(read_file(dir_ / "full.safetensors"), read_file(dir_ / "killed.safetensors"));
  const JsonDoc a(read_file(dir_ / "full" / "summary.json"));
  const JsonDoc b(read_file(dir_ / "killed" / "summary.json"));
  EXPECT_EQ(a.at("final_loss").as_double(), b.at("final_loss").as_double());
  EXPECT_EQ(a.at("steps_skipped").as_int(), b.at("steps_skipped").as_int());
  EXPECT_EQ(a.at("final_eval").at("loss").as_double(), b.at("final_eval").at("loss").as_double());
  if (precision == "float16") {
    EXPECT_GT(a.at("steps_skipped").as_int(), 0);
  }
  EXPECT_GT(b.at("resumed_from_step").as_int(), 0);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CliResumeTest,
                         ::testing::Values("float32", "float16", "bfloat16", "bfloat16_sr"));

// Bytes per parameter (weights + gradients + optimizer state) in the start-up line, every metrics
// record and summary.json, for Adam's memory modes: float32 (4 + 4 + 8), bfloat16 moments
// (4 + 4 + 4), bfloat16 model with float32 masters (2 + 2 + 4 + 8) and pure bfloat16 (2 + 2 + 4).
TEST_F(CliTest, BytesPerParameterForEachOptimizerStateLayout) {
  const std::string base = resume_config("float32");
  struct Mode {
    const char* name;
    std::vector<std::string> sets;
    double bytes;
  };
  const std::vector<Mode> modes = {
      {"float32", {}, 16},
      {"bf16_state", {"optimizer.state_dtype=bfloat16", "optimizer.stochastic_rounding=true"}, 12},
      {"master", {"precision=bfloat16", "master_weights=true"}, 16},
      {"pure_bf16",
       {"precision=bfloat16", "param_dtype=bfloat16", "optimizer.stochastic_rounding=true"},
       8},
  };
  write_file(dir_ / "cfg.yaml", base);
  for (const Mode& m : modes) {
    std::vector<std::string> args = {"train", "cfg.yaml", "--run-dir", m.name, "--set", "steps=6"};
    for (const std::string& s : m.sets) args.insert(args.end(), {"--set", s});
    const Result r = run(args);
    ASSERT_EQ(r.code, 0) << m.name << ": " << r.output;
    char want[64];
    std::snprintf(want, sizeof want, "parameters at %.3g bytes each", m.bytes);
    EXPECT_NE(r.output.find(want), std::string::npos) << m.name << ": " << r.output;
    const JsonDoc summary(read_file(dir_ / m.name / "summary.json"));
    EXPECT_DOUBLE_EQ(summary.at("training_memory").at("bytes_per_parameter").as_double(), m.bytes)
        << m.name;
    std::istringstream metrics(read_file(dir_ / m.name / "metrics.jsonl"));
    std::string line;
    std::getline(metrics, line);
    EXPECT_DOUBLE_EQ(JsonDoc(line).at("bytes_per_parameter").as_double(), m.bytes)
        << m.name << ": " << line;
  }
  // Pure bfloat16 needs the bfloat16 precision and no masters; state_dtype is Adam's.
  const Result bad = run({"train", "cfg.yaml", "--set", "param_dtype=bfloat16"});
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("param_dtype"), std::string::npos) << bad.output;
  const Result sgd = run({"train", "cfg.yaml", "--set", "optimizer.type=sgd", "--set",
                          "optimizer.state_dtype=bfloat16"});
  EXPECT_EQ(sgd.code, 2) << sgd.output;
  EXPECT_NE(sgd.output.find("optimizer.state_dtype"), std::string::npos) << sgd.output;
}

TEST_F(CliTest, ResumeFallsBackFromACorruptedCheckpointAndSaysSo) {
  write_file(dir_ / "cfg.yaml", resume_config("float32", "keep_last: 0\n"));
  ASSERT_EQ(run({"train", "cfg.yaml", "--run-dir", "r", "-q", "--set", "steps=21"}).code, 0);
  ASSERT_EQ(run({"export", "r", "before.safetensors"}).code, 0);
  // Corrupt the newest checkpoint (step 21): flip a byte in its tensor data.
  const fs::path newest = dir_ / "r" / "checkpoints" / "step-000000021.ckpt";
  std::string bytes = read_file(newest);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() - 20] ^= 0x5a;
  write_file(newest, bytes);

  const Result r = run({"resume", "r", "-q"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("refused newer checkpoint '"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("checkpoint checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step-000000021.ckpt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resuming from r/checkpoints/step-000000014.ckpt"), std::string::npos)
      << r.output;
  // Steps 15..21 are redone exactly.
  ASSERT_EQ(run({"export", "r", "after.safetensors"}).code, 0);
  EXPECT_EQ(read_file(dir_ / "before.safetensors"), read_file(dir_ / "after.safetensors"));

  // With every checkpoint corrupted there is nothing to resume from: a clear error.
  for (const auto& e : fs::directory_iterator(dir_ / "r" / "checkpoints")) {
    std::string b = read_file(e.path());
    b.resize(b.size() / 2);
    write_file(e.path(), b);
  }
  const Result none = run({"resume", "r", "-q"});
  EXPECT_EQ(none.code, 1) << none.output;
  EXPECT_NE(none.output.find("no valid checkpoint"), std::string::npos) << none.output;
}

TEST_F(CliTest, CtrlCStopsCleanlyAndTheRunResumesExactly) {
  write_file(dir_ / "cfg.yaml", resume_config("float32"));
  ASSERT_EQ(run({"train", "cfg.yaml", "--run-dir", "full", "-q"}).code, 0);
  const pid_t pid = spawn({"train", "cfg.yaml", "--run-dir", "stopped", "-q"}, dir_ / "stopped.txt",
                          {"MANTISSA_STEP_DELAY_MS=60"});
  const fs::path ckpt = dir_ / "stopped" / "checkpoints" / "step-000000007.ckpt";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(ckpt) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(fs::exists(ckpt)) << read_file(dir_ / "stopped.txt");
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 128 + SIGINT) << read_file(dir_ / "stopped.txt");
  EXPECT_NE(read_file(dir_ / "stopped.txt").find("interrupted at step"), std::string::npos);
  // It stopped early, with a final checkpoint and summary at the step where it stopped.
  const JsonDoc partial(read_file(dir_ / "stopped" / "summary.json"));
  const int64_t stopped_at = partial.at("steps").as_int();
  EXPECT_GE(stopped_at, 7);
  EXPECT_LT(stopped_at, 40);
  const std::string last = "step-" + std::string(9 - std::to_string(stopped_at).size(), '0') +
                           std::to_string(stopped_at) + ".ckpt";
  EXPECT_TRUE(fs::exists(dir_ / "stopped" / "checkpoints" / last)) << last;

  const Result resumed = run({"resume", "stopped", "-q"});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  ASSERT_EQ(run({"export", "full", "full.safetensors"}).code, 0);
  ASSERT_EQ(run({"export", "stopped", "stopped.safetensors"}).code, 0);
  EXPECT_EQ(read_file(dir_ / "full.safetensors"), read_file(dir_ / "stopped.safetensors"));
}

// One clear error, exit != 0, nothing overwritten, nothing lost. `export` and `plot -o`
// never replace a run's own files (without --force), a symbolic link (without --force), or
// anything that is not a regular file; nothing reads a FIFO or a device.
class CliFileSafetyTest : public CliTest {
 protected:
  // run(), but a command still running after `limit_s` is killed and reported: a regression that
  // blocks on a FIFO or reads a device forever fails here instead of hanging the suite.
  Result run_within(const std::vector<std::string>& args, int limit_s = 30) {
    const fs::path log = dir_ / ("out_" + std::to_string(counter_++) + ".txt");
    const pid_t pid = spawn(args, log);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s);
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ADD_FAILURE() << "still running after " << limit_s << " s: mantissa " << args[0] << " "
                      << (args.size() > 1 ? args[1] : "");
        return {-1, read_file(log)};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), read_file(log)};
  }
  // Refused: exit 2, one line naming `path` and containing `why`.
  void expect_refused(const Result& r, const std::string& path, const std::string& why) {
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("refusing to write '" + path + "'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  // A small run "r" with checkpoints at steps 10 and 20.
  void train_run() {
    const Result t = run({"train", "--run-dir", "r", "-q", "--set", "steps=20", "--set",
                          "checkpoint_every=10", "--set", "log_every=2", "--set", "keep_last=0"});
    ASSERT_EQ(t.code, 0) << t.output;
  }
};

TEST_F(CliFileSafetyTest, ExportAndPlotRefuseTheRunsOwnFilesUnlessForced) {
  train_run();
  const fs::path newest = dir_ / "r" / "checkpoints" / "step-000000020.ckpt";
  ASSERT_TRUE(fs::exists(newest));
  std::vector<std::pair<fs::path, std::string>> before;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "r")) {
    if (e.is_regular_file()) before.emplace_back(e.path(), read_file(e.path()));
  }
  const std::string ckpt = "r/checkpoints/step-000000020.ckpt";
  const std::string older = "r/checkpoints/step-000000010.ckpt";
  expect_refused(run({"export", "r", ckpt}), ckpt, "the file this command reads");
  expect_refused(run({"export", ckpt, ckpt}), ckpt, "the file this command reads");
  expect_refused(run({"export", "r", older}), older, "in the checkpoints directory of the run");
  expect_refused(run({"export", "r", "r/checkpoints/new.safetensors"}),
                 "r/checkpoints/new.safetensors", "checkpoints directory");
  for (const char* f : {"resolved.yaml", "metrics.jsonl", "train.log", "summary.json"}) {
    const std::string target = std::string("r/") + f;
    expect_refused(run({"export", "r", target}), target, std::string("it is the ") + f);
    expect_refused(run({"plot", "r", "-o", target}), target,
                   f == std::string("metrics.jsonl") ? "the file this command reads"
                                                     : std::string("it is the ") + f);
  }
  // Another spelling of the run directory is the same run.
  fs::create_directory_symlink(dir_ / "r", dir_ / "r-link");
  expect_refused(run({"export", "r", "r-link/resolved.yaml"}), "r-link/resolved.yaml",
                 "resolved.yaml");
  // Not one byte changed, nothing added.
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "r")) files += e.is_regular_file();
  EXPECT_EQ(files, before.size());
  for (const auto& [path, bytes] : before) EXPECT_TRUE(read_file(path) == bytes) << path;

  // Allowed: a new file beside the run's files, the run's own plot, and with --force.
  EXPECT_EQ(run({"export", "r", "r/weights.safetensors"}).code, 0);
  EXPECT_EQ(run({"plot", "r"}).code, 0);
  EXPECT_EQ(run({"plot", "r"}).code, 0) << "re-plotting replaces RUN_DIR/plot.svg";
  const Result forced = run({"export", "r", "r/checkpoints/weights.safetensors", "--force"});
  EXPECT_EQ(forced.code, 0) << forced.output;
  EXPECT_TRUE(fs::exists(dir_ / "r" / "checkpoints" / "weights.safetensors"));
  // A checkpoint replaced by its own weights with --force: read whole before it is replaced.
  fs::copy_file(newest, dir_ / "copy.ckpt");
  fs::create_hard_link(dir_ / "copy.ckpt", dir_ / "hard.ckpt");
  expect_refused(run({"export", "copy.ckpt", "hard.ckpt"}), "hard.ckpt",
                 "'copy.ckpt', the file this command reads");
  const Result self = run({"export", "copy.ckpt", "copy.ckpt", "--force"});
  ASSERT_EQ(self.code, 0) << self.output;
  EXPECT_EQ(read_file(dir_ / "copy.ckpt"), read_file(dir_ / "r" / "weights.safetensors"));
}

TEST_F(CliFileSafetyTest, ExportAndPlotRefuseSymlinksFifosDirectoriesAndDevices) {
  train_run();
  // A symbolic link: refused; with --force the link itself is replaced, never its target.
  write_file(dir_ / "target.txt", "keep");
  fs::create_symlink("target.txt", dir_ / "link");
  expect_refused(run({"export", "r", "link"}), "link", "it is a symbolic link (to 'target.txt')");
  expect_refused(run({"plot", "r", "-o", "link"}), "link", "it is a symbolic link");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(read_file(dir_ / "target.txt"), "keep");
  const Result forced = run({"plot", "r", "-o", "link", "--force"});
  EXPECT_EQ(forced.code, 0) << forced.output;
  EXPECT_FALSE(fs::is_symlink(dir_ / "link"));
  EXPECT_EQ(read_file(dir_ / "link").rfind("<svg", 0), 0u);
  EXPECT_EQ(read_file(dir_ / "target.txt"), "keep");

  // A FIFO and a directory: refused with or without --force, and left as they were.
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0644), 0);
  fs::create_directories(dir_ / "d");
  for (const char* force : {"", "--force"}) {
    std::vector<std::string> x = {"export", "r", "fifo"}, p = {"plot", "r", "-o", "fifo"};
    if (*force) x.push_back(force), p.push_back(force);
    expect_refused(run_within(x), "fifo", "it is a FIFO (named pipe), not a regular file");
    expect_refused(run_within(p), "fifo", "it is a FIFO (named pipe), not a regular file");
    x[2] = "d";
    expect_refused(run_within(x), "d", "it is a directory, not a regular file");
  }
  EXPECT_TRUE(fs::is_fifo(dir_ / "fifo"));
  EXPECT_TRUE(fs::is_directory(dir_ / "d"));
  EXPECT_TRUE(fs::is_empty(dir_ / "d"));

  // A device node: our own copy of /dev/null (major 1, minor 3) where mknod is allowed (root),
  // so a regression replaces the copy, never the system's device.
  if (::mknod((dir_ / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    expect_refused(run({"export", "r", "null", "--force"}), "null", "it is a character device");
    expect_refused(run({"plot", "r", "-o", "null", "--force"}), "null", "it is a character device");
    EXPECT_TRUE(fs::is_character_file(dir_ / "null"));
  }
  // Nothing was left behind: no temporaries beside the targets.
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

TEST_F(CliFileSafetyTest, FifosAndDevicesAreNeverRead) {
  ASSERT_EQ(::mkfifo((dir_ / "pipe.csv").c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo((dir_ / "pipe.safetensors").c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo((dir_ / "pipe.yaml").c_str(), 0644), 0);
  write_file(dir_ / "csv.yaml",
             "model:\n  layers:\n    - {type: linear, in: 2, out: 1}\n"
             "data: {type: csv, path: pipe.csv}\n");
  const std::string fifo = "is a FIFO (named pipe), not a regular file";
  const std::string device = "is a character device, not a regular file";
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"train", "csv.yaml", "--run-dir", "never"}, "data.path = pipe.csv (line 4): " + fifo},
      {{"train", "csv.yaml", "--set", "data.path=/dev/zero", "--run-dir", "never"},
       "data.path = /dev/zero (--set): " + device},
      {{"train", "--set", "model.init_from=pipe.safetensors", "--run-dir", "never"},
       "model.init_from = pipe.safetensors (--set): " + fifo},
      {{"train", "--set", "model.init_from=/dev/zero", "--run-dir", "never"},
       "model.init_from = /dev/zero (--set): " + device},
      {{"train", "pipe.yaml", "--run-dir", "never"},
       "cannot read config file 'pipe.yaml': " + fifo},
  };
  for (const Case& c : cases) {
    const Result r = run_within(c.args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.expected << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "never"));
  const Result imp = run_within({"import", "pipe.safetensors"});
  EXPECT_EQ(imp.code, 1) << imp.output;
  EXPECT_NE(imp.output.find("cannot read 'pipe.safetensors': it " + fifo), std::string::npos)
      << imp.output;
  const Result zero = run_within({"import", "/dev/zero"});
  EXPECT_EQ(zero.code, 1) << zero.output;
  EXPECT_NE(zero.output.find(device), std::string::npos) << zero.output;

  // A run whose files were replaced by FIFOs: eval, export, plot and resume refuse them.
  const Result t =
      run({"train", "--run-dir", "r", "-q", "--set", "steps=4", "--set", "checkpoint_every=4"});
  ASSERT_EQ(t.code, 0) << t.output;
  const Result eval = run_within({"eval", "r", "--data", "pipe.csv"});
  EXPECT_NE(eval.code, 0) << eval.output;
  EXPECT_NE(eval.output.find(fifo), std::string::npos) << eval.output;
  ASSERT_EQ(::mkfifo((dir_ / "ckpt").c_str(), 0644), 0);
  const Result exp = run_within({"export", "ckpt", "w.safetensors"});
  EXPECT_NE(exp.code, 0) << exp.output;
  EXPECT_NE(exp.output.find(fifo), std::string::npos) << exp.output;
  EXPECT_FALSE(fs::exists(dir_ / "w.safetensors"));
  for (const char* f : {"metrics.jsonl", "resolved.yaml"}) {
    fs::remove(dir_ / "r" / f);
    ASSERT_EQ(::mkfifo((dir_ / "r" / f).c_str(), 0644), 0);
  }
  const Result plot = run_within({"plot", "r", "-o", "p.svg"});
  EXPECT_EQ(plot.code, 2) << plot.output;
  EXPECT_NE(plot.output.find("r/metrics.jsonl': it " + fifo), std::string::npos) << plot.output;
  EXPECT_FALSE(fs::exists(dir_ / "p.svg"));
  const Result resume = run_within({"resume", "r", "-q"});
  EXPECT_NE(resume.code, 0) << resume.output;
  EXPECT_NE(resume.output.find(fifo), std::string::npos) << resume.output;
}

namespace {

// A plot's size does not grow with the run: a million-step run plots to the pixel width, and the
// one spike in it is still drawn (at the top of the loss panel).
TEST_F(CliTest, PlotOfAMillionStepsIsDecimatedToThePixelWidth) {
  fs::create_directories(dir_ / "r");
  std::string metrics;
  metrics.reserve(64u << 20);
  for (int step = 1; step <= 1000000; ++step) {
    const double loss =
        step == 654321 ? 100.0 : 1.0 + 0.5 * ((int64_t{step} * 7919) % 1000) / 1000.0;
    metrics += "{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(loss) +
               ",\"lr\":0.01,\"loss_scale\":1}\n";
  }
  write_file(dir_ / "r" / "metrics.jsonl", metrics);
  const Result p = run({"plot", "r", "-o", "big.svg"});
  ASSERT_EQ(p.code, 0) << p.output;
  const std::string svg = read_file(dir_ / "big.svg");
  EXPECT_LT(svg.size(), 400u * 1024) << "the SVG grows with the number of records";
  EXPECT_NE(svg.find(",40 "), std::string::npos) << "the spike at the top of the loss panel";
}

}  // namespace

TEST_F(CliTest, GenerateRefusesBadArgumentsAndNonGptRunsWithOneLine) {
  const Result trained = run({"train", "--set", "steps=2", "--run-dir", "toy", "-q"});
  ASSERT_EQ(trained.code, 0) << trained.output;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"generate", "toy", "--tokens", "-1"}, "--tokens must be >= 0"},
      {{"generate", "toy", "--temperature", "0"}, "--temperature must be a positive number"},
      {{"generate", "toy", "--top-k", "0"}, "--top-k must be >= 1"},
      {{"generate", "no-such-run"}, "no-such-run"},
      {{"generate", "toy"}, "data.type is teacher"},
  };
  for (const auto& [args, expected] : cases) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 2) << args[1] << " " << (args.size() > 2 ? args[2] : "") << ": " << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  }
  const Result not_a_number = run({"generate", "toy", "--tokens", "many"});
  EXPECT_EQ(not_a_number.code, 2) << not_a_number.output;
}

// `import --layout`: a Hugging Face GPT-2 state dict becomes nanoGPT's names and layout, which
// PyTorch's nanoGPT and nn::GPT load (tests/test_gpt_interop.cpp checks the values).
TEST_F(CliTest, ImportConvertsGptWeights) {
  const std::string hf = source_dir() + "/tests/data/gpt_hf.safetensors";
  const Result r = run({"import", hf, "--layout", "auto", "--out", "gpt.safetensors"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("hf layout: n_layer=2 n_embd=16 vocab_size=32 block_size=8 bias=true"),
            std::string::npos)
      << r.output;
  const Result listed = run({"import", "gpt.safetensors"});
  ASSERT_EQ(listed.code, 0) << listed.output;
  EXPECT_NE(listed.output.find("transformer.h.1.attn.c_attn.weight float32   [48, 16]"),
            std::string::npos)
      << listed.output;
  EXPECT_NE(listed.output.find("lm_head.weight"), std::string::npos) << listed.output;
  EXPECT_EQ(listed.output.find(".attn.bias "), std::string::npos) << listed.output;
  // A config with the gpt preset takes either file (model.init_from converts the same way).
  write_file(dir_ / "gpt.yaml",
             "model:\n  preset: gpt\n  n_layer: 2\n  n_head: 2\n  n_embd: 16\n  block_size: 8\n"
             "  vocab_size: 32\n");
  for (const std::string& w : {hf, std::string("gpt.safetensors")}) {
    const Result c = run({"import", w, "--config", "gpt.yaml"});
    EXPECT_EQ(c.code, 0) << c.output;
    EXPECT_NE(c.output.find("loads into the model of gpt.yaml"), std::string::npos) << c.output;
  }
  // --out without --layout is a usage error; a file that is not a GPT is refused by name.
  EXPECT_EQ(run({"import", hf, "--out", "x.safetensors"}).code, 2);
  const std::string toy = source_dir() + "/tests/data/torch_toy.safetensors";
  const Result not_gpt = run({"import", toy, "--layout", "nanogpt"});
  EXPECT_EQ(not_gpt.code, 1) << not_gpt.output;
  EXPECT_NE(not_gpt.output.find("not a GPT state dict"), std::string::npos) << not_gpt.output;
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
}
