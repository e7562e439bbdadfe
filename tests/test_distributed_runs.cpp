// Data-parallel runs of the `mantissa` command, with real processes (2 Gloo ranks on the CPU):
// `--nproc 2` trains with only rank 0 writing and every rank ending with the same parameters;
// a launcher killed with all its ranks (SIGKILL) resumes to the weights of an uninterrupted run,
// bit for bit; a rank that dies stops the others with one line naming it; SIGINT stops every rank
// after the same step; two processes started with torchrun's variables form one run; Muon on 2
// ranks of 64 steps as one process of 128; ZeRO-2 with Muon killed and resumed; and a run
// resumed on another number of ranks.
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include "cli_test_util.h"
#include "runner/files/safetensors.h"
#include "runner/training/tensorboard.h"

namespace {

// 100 examples in batches of 20: each of 2 ranks has 50 per epoch (3 batches, the last of 10),
// so a run of 24 steps crosses 7 epoch boundaries.
// precision float16 adds a loss scaler whose scale changes within the run (growth_interval 3).
// `extra` goes into the distributed section (e.g. ", zero_stage: 2").
std::string run_config(int steps, int checkpoint_every, const std::string& precision = "float32",
                       const std::string& extra = "") {
  const std::string amp =
      precision == "float32"
          ? ""
          : "precision: " + precision + "\nscaler: {init_scale: 1024, growth_interval: 3}\n";
  return amp +
         "model:\n  layers:\n    - {type: linear, in: 10, out: 16}\n    - relu\n"
         "    - {type: linear, in: 16, out: 5}\n"
         "data: {type: teacher, samples: 100, batch_size: 20, noise: 0.1}\n"
         "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
         "device: cpu\n"
         "steps: " +
         std::to_string(steps) +
         "\nlog_every: 1\ncheckpoint_every: " + std::to_string(checkpoint_every) +
         "\ndistributed: {timeout_s: 20" + extra + "}\n";
}

// Every line of metrics.jsonl parses, and the step records count 1, 2, ... without a gap or a
// repeat (a second writer would repeat them).
void expect_one_writer(const fs::path& file, int64_t last_step) {
  std::istringstream in(read_file(file));
  std::string line;
  int64_t expected = 1;
  while (std::getline(in, line)) {
    const JsonDoc j(line);
    if (const auto s = j.find("step")) {
      EXPECT_EQ(s->as_int(), expected++) << line;
    }
  }
  EXPECT_EQ(expected - 1, last_step) << read_file(file);
}

// The processes whose parent is `parent`, by the RANK in their environment.
std::map<int, pid_t> ranks_of(pid_t parent) {
  std::map<int, pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream stat(read_file(entry.path() / "stat"));
    std::string pid, comm, state;
    pid_t ppid = 0;
    stat >> pid >> comm >> state >> ppid;
    if (ppid != parent) continue;
    const std::string env = read_file(entry.path() / "environ");
    const size_t at = env.find(std::string("\0RANK=", 6));
    if (at != std::string::npos) out[std::atoi(env.c_str() + at + 6)] = std::stoi(name);
  }
  return out;
}

// Whether `pid` is gone (or a zombie nobody reaped yet).
bool gone(pid_t pid) {
  std::istringstream stat(read_file("/proc/" + std::to_string(pid) + "/stat"));
  std::string p, comm, state;
  stat >> p >> comm >> state;
  return state.empty() || state == "Z";
}

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class DistributedRunTest : public CliTest {
 protected:
  std::vector<std::string> train_args(const std::string& run_dir) {
    return {"train", "cfg.yaml", "--nproc", "2", "--run-dir", run_dir, "-q"};
  }
  // Starts a slow `--nproc 2` run and waits until `wait_for` exists in its directory.
  pid_t start_slow_run(const std::string& run_dir, const std::string& wait_for) {
    const pid_t pid =
        spawn(train_args(run_dir), dir_ / (run_dir + ".txt"), {"MANTISSA_STEP_DELAY_MS=40"});
    const fs::path target = dir_ / run_dir / wait_for;
    EXPECT_TRUE(wait_until([&] { return fs::exists(target); }, std::chrono::seconds(30)))
        << read_file(dir_ / (run_dir + ".txt"));
    return pid;
  }
  // Starts the config again as run "killed", SIGKILLs the launcher and its ranks at once (as an
  // OOM killer or a node failure would) after its step-8 checkpoint, resumes it, and expects the
  // weights of the uninterrupted run `straight`.
  void expect_killed_run_resumes_to_the_same_weights(const std::string& straight) {
    const pid_t launcher = start_slow_run("killed", "checkpoints/step-000000008.ckpt");
    const auto ranks = ranks_of(launcher);
    ASSERT_EQ(ranks.size(), 2u);
    ::kill(-ranks.begin()->second, SIGKILL);
    ::kill(launcher, SIGKILL);
    bool signaled = false;
    wait_exit(launcher, &signaled);
    EXPECT_TRUE(signaled) << "the run finished before it was killed";
    for (const auto& [rank, pid] : ranks)
      EXPECT_TRUE(wait_until([pid] { return gone(pid); }, std::chrono::seconds(10))) << rank;

    const Result resumed = run({"resume", "killed", "-q"});
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_TRUE(contains(resumed.output, "resuming from")) << resumed.output;
    EXPECT_TRUE(contains(resumed.output, "on 2 ranks")) << resumed.output;
    EXPECT_TRUE(
        contains(resumed.output, "parameters, buffers and loss scaler identical on all 2 ranks"))
        << resumed.output;
    EXPECT_EQ(weights("killed"), weights(straight));
  }
  // The largest difference between two runs' final weights (the same names and shapes).
  double max_weight_difference(const std::string& run_a, const std::string& run_b) {
    const auto load = [&](const std::string& run_dir) {
      return mantissa::runner::parse_safetensors(weights(run_dir), run_dir);
    };
    const auto a = load(run_a), b = load(run_b);
    EXPECT_EQ(a.names(), b.names());
    double worst = 0;
    for (const auto& [name, t] : a.tensors) {
      const auto x = t.to_vector<float>(), y = b.at(name).to_vector<float>();
      EXPECT_EQ(x.size(), y.size()) << name;
      for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]));
    }
    return worst;
  }
  // The final weights of a run, as `mantissa export` writes them.
  std::string weights(const std::string& run_dir) {
    const std::string out = run_dir + ".safetensors";
    const Result r = run({"export", run_dir, out});
    EXPECT_EQ(r.code, 0) << r.output;
    return read_file(dir_ / out);
  }
};

TEST_F(DistributedRunTest, TwoRanksTrainOnlyRankZeroWritesAndParametersAgree) {
  write_file(dir_ / "cfg.yaml", run_config(24, 8));
  fs::create_directories(dir_ / "tmp");
  // TMPDIR: where the launcher makes the ranks' store directory, which it removes at the end.
  const Result r = run(train_args("run"), {"TMPDIR=" + (dir_ / "tmp").string()});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
  EXPECT_TRUE(contains(r.output, "on 2 ranks, run directory run")) << r.output;
  EXPECT_TRUE(contains(r.output, "parameters and buffers identical on all 2 ranks")) << r.output;
  // One rank reports: one start line and one summary.
  EXPECT_EQ(r.output.find("done: 24 steps"), r.output.rfind("done: 24 steps")) << r.output;
  EXPECT_EQ(r.output.find("training "), r.output.rfind("training ")) << r.output;
  expect_one_writer(dir_ / "run" / "metrics.jsonl", 24);
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_ / "run")) files.insert(e.path().filename());
  // .lock: rank 0's hold on the directory (runner/files/run_lock.h).
  EXPECT_EQ(files, (std::set<std::string>{".lock", "checkpoints", "metrics.jsonl", "resolved.yaml",
                                          "summary.json", "tensorboard", "train.log"}));
  // TensorBoard's scalars: rank 0's file alone, every logged step once.
  const auto event_files =
      mantissa::runner::tensorboard_event_files((dir_ / "run" / "tensorboard").string());
  ASSERT_EQ(event_files.size(), 1u);
  int64_t logged = 0;
  for (const auto& e : mantissa::runner::read_tensorboard_events(event_files[0]))
    for (const auto& s : e.scalars) logged += s.tag == "train/loss";
  EXPECT_EQ(logged, 24);
  std::set<std::string> checkpoints;
  for (const auto& e : fs::directory_iterator(dir_ / "run" / "checkpoints"))
    checkpoints.insert(e.path().filename());
  EXPECT_EQ(checkpoints, (std::set<std::string>{"step-000000008.ckpt", "step-000000016.ckpt",
                                                "step-000000024.ckpt"}));
  // The resolved config records the ranks, so `mantissa resume` starts as many.
  EXPECT_TRUE(contains(read_file(dir_ / "run" / "resolved.yaml"), "distributed:\n  nproc: 2\n"));
  // Each rank trained on its half: the run is not the single-process one.
  const Result single = run({"train", "cfg.yaml", "--run-dir", "single", "-q"});
  ASSERT_EQ(single.code, 0) << single.output;
  EXPECT_NE(weights("run"), weights("single"));
}

// The launcher checks what its ranks would, before it starts them: one message, nothing written.
// Gradient accumulation under DDP: the micro-batches before a step's last run under no_sync(), so
// each rank accumulates locally and the last backward reduces the sum; the ranks still end equal.
TEST_F(DistributedRunTest, GradientAccumulationOverMicroBatchesKeepsTheRanksEqual) {
  write_file(dir_ / "cfg.yaml", run_config(6, 3) + "grad_accum_steps: 2\n");
  const Result r = run(train_args("accum"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "parameters and buffers identical on all 2 ranks")) << r.output;
  expect_one_writer(dir_ / "accum" / "metrics.jsonl", 6);
}

TEST_F(DistributedRunTest, TheLauncherRefusesABadRunBeforeStartingRanks) {
  write_file(dir_ / "cfg.yaml", run_config(4, 0));
  const Result help = run({"train", "--help"});
  EXPECT_TRUE(contains(help.output, "--nproc")) << help.output;
  const Result nccl = run(
      {"train", "cfg.yaml", "--nproc", "2", "--run-dir", "a", "--set", "distributed.backend=nccl"});
  EXPECT_EQ(nccl.code, 2) << nccl.output;
  EXPECT_TRUE(contains(nccl.output, "distributed.backend")) << nccl.output;
  EXPECT_EQ(nccl.output.find("mantissa:"), nccl.output.rfind("mantissa:")) << nccl.output;
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  fs::create_directories(dir_ / "b");
  write_file(dir_ / "b" / "x", "");
  const Result used = run(train_args("b"));
  EXPECT_EQ(used.code, 2) << used.output;
  EXPECT_TRUE(contains(used.output, "already exists and is not empty")) << used.output;
  EXPECT_FALSE(contains(used.output, "rank")) << used.output;
  const Result zero = run({"train", "cfg.yaml", "--nproc", "0"});
  EXPECT_EQ(zero.code, 2) << zero.output;
}

// Under float16 autocast, so the loss scaler's state (scale, growth tracker) must also come back
// the same on every rank: the end-of-run check compares it across ranks.
TEST_F(DistributedRunTest, KilledWithAllItsRanksThenResumedEqualsAnUninterruptedRun) {
  write_file(dir_ / "cfg.yaml", run_config(24, 4, "float16"));
  const Result straight = run(train_args("straight"));
  ASSERT_EQ(straight.code, 0) << straight.output;

  expect_killed_run_resumes_to_the_same_weights("straight");
}

// ZeRO-2 with the loss scaler and clipping: rank 0 writes the gathered optimizer state while the
// other rank takes part, and a run killed with all its ranks resumes to the uninterrupted run's
// weights. Each rank keeps half the momentum and half the gradient: 4 + 2 + 2 bytes per
// parameter instead of DDP's 12.
TEST_F(DistributedRunTest, ZeroStage2KilledWithAllItsRanksThenResumedEqualsAnUninterruptedRun) {
  write_file(dir_ / "cfg.yaml",
             run_config(24, 4, "float16", ", zero_stage: 2") + "clip_grad_norm: 0.5\n");
  const Result straight = run(train_args("straight"));
  ASSERT_EQ(straight.code, 0) << straight.output;
  EXPECT_TRUE(contains(straight.output,
                       "at 8 bytes each (weights 4 + gradients 2 + optimizer "
                       "state 2)"))
      << straight.output;
  const std::string metrics = read_file(dir_ / "straight" / "metrics.jsonl");
  // 8 and a little: rank 0 holds 131 of the 261 elements (the bucket is padded to 262).
  EXPECT_TRUE(contains(metrics, "\"bytes_per_parameter\": 8.01")) << metrics;

  expect_killed_run_resumes_to_the_same_weights("straight");
}

// ZeRO-2 with Muon, the loss scaler and clipping: each rank steps whole matrices of its own
// (2.weight and 4.weight, 32 x 32 each, one per rank) and its slices of the rest with AdamW;
// rank 0 writes the gathered state, and a run killed with all its ranks resumes to the
// uninterrupted run's weights, bit for bit.
TEST_F(DistributedRunTest, ZeroStage2MuonKilledWithAllItsRanksThenResumedEqualsAnUninterruptedRun) {
  write_file(dir_ / "cfg.yaml",
             "precision: float16\nscaler: {init_scale: 1024, growth_interval: 3}\n"
             "model:\n  layers:\n    - {type: linear, in: 10, out: 32}\n    - relu\n"
             "    - {type: linear, in: 32, out: 32}\n    - relu\n"
             "    - {type: linear, in: 32, out: 32}\n    - relu\n"
             "    - {type: linear, in: 32, out: 5}\n"
             "data: {type: teacher, samples: 100, batch_size: 20, noise: 0.1}\n"
             "optimizer: {type: muon, lr: 0.02, adamw: {lr: 0.01}}\n"
             "device: cpu\nsteps: 24\nlog_every: 1\ncheckpoint_every: 4\n"
             "clip_grad_norm: 0.5\ndistributed: {timeout_s: 20, zero_stage: 2}\n");
  const Result straight = run(train_args("straight"));
  ASSERT_EQ(straight.code, 0) << straight.output;
  EXPECT_TRUE(contains(straight.output, "Muon 2 tensors (2048 parameters): 2.weight, 4.weight"))
      << straight.output;
  EXPECT_TRUE(
      contains(straight.output, "parameters, buffers and loss scaler identical on all 2 ranks"))
      << straight.output;

  expect_killed_run_resumes_to_the_same_weights("straight");
}

// A 2-rank run resumed from its step-4 checkpoint on 1 and on 4 ranks (`mantissa resume
// --nproc`): after 3 steps of the first epoch (50 examples per rank: 20, 20, 10), the ranks had
// taken 40 of the second epoch's 100 examples (a batch of 20 on each), and the new ranks continue
// at that position of the epoch's order; the run ends at its step 12 with one writer and the
// ranks in agreement. (The data positions themselves are
// checked example by example in tests/test_runner_data.cpp.)
TEST_F(DistributedRunTest, ARunResumesOnAnotherNumberOfRanksAtTheSameGlobalPosition) {
  write_file(dir_ / "cfg.yaml", run_config(12, 4));
  const Result two = run(train_args("two"));
  ASSERT_EQ(two.code, 0) << two.output;
  for (const int nproc : {1, 4}) {
    const std::string name = "on" + std::to_string(nproc);
    fs::copy(dir_ / "two", dir_ / name, fs::copy_options::recursive);
    for (const char* later : {"step-000000008.ckpt", "step-000000012.ckpt"})
      ASSERT_TRUE(fs::remove(dir_ / name / "checkpoints" / later)) << later;
    const Result resumed = run({"resume", name, "--nproc", std::to_string(nproc)});
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_TRUE(contains(resumed.output, "step-000000004.ckpt")) << resumed.output;
    EXPECT_TRUE(contains(resumed.output,
                         "continues at position 40 of epoch 1's order, sharded "
                         "over " +
                             std::to_string(nproc) + " rank"))
        << resumed.output;
    if (nproc > 1) {
      EXPECT_TRUE(contains(resumed.output, "identical on all 4 ranks")) << resumed.output;
    }
    expect_one_writer(dir_ / name / "metrics.jsonl", 12);
    const JsonDoc summary(read_file(dir_ / name / "summary.json"));
    EXPECT_EQ(summary.at("steps").as_int(), 12);
    EXPECT_EQ(summary.at("resumed_from_step").as_int(), 4);
    // Other global batches from step 5 on: not the 2-rank run's weights.
    EXPECT_GT(max_weight_difference(name, "two"), 0.0);
  }
  // The runs go on as themselves: a plain resume of a finished run has nothing to do.
  const Result again = run({"resume", "on4"});
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "is complete")) << again.output;
}

TEST_F(DistributedRunTest, ARankThatDiesStopsTheOthersWithOneLineNamingIt) {
  write_file(dir_ / "cfg.yaml", run_config(2000, 0));
  const pid_t launcher = start_slow_run("run", "metrics.jsonl");
  const auto ranks = ranks_of(launcher);
  ASSERT_EQ(ranks.size(), 2u);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(ranks.at(1), SIGKILL);
  const int code = wait_exit(launcher);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string output = read_file(dir_ / "run.txt");
  EXPECT_EQ(code, 1) << output;
  EXPECT_LT(seconds, 20.0) << "longer than distributed.timeout_s";
  EXPECT_TRUE(contains(output, "mantissa: rank 1 of 2 (pid " + std::to_string(ranks.at(1)) +
                                   ") was killed by signal 9"))
      << output;
  // The launcher's line is the last one.
  EXPECT_TRUE(contains(output.substr(output.rfind("mantissa:")), "the other ranks were stopped"))
      << output;
  EXPECT_TRUE(gone(ranks.at(0)));
}

TEST_F(DistributedRunTest, SigintStopsEveryRankAfterTheSameStepAndTheRunResumes) {
  write_file(dir_ / "cfg.yaml", run_config(60, 0));
  const pid_t launcher = start_slow_run("run", "metrics.jsonl");
  // Rank 0 creates the metrics file as its own training begins, which says nothing of rank 1:
  // each rank installs its handler when its training begins, and a rank still starting up when
  // the launcher forwards the signal dies of it (what Ctrl-C during start-up should do; seen in CI
  // under load). A first logged step means both ranks are training: its allreduce needed both.
  ASSERT_TRUE(wait_until(
      [&] { return read_file(dir_ / "run" / "metrics.jsonl").find('\n') != std::string::npos; },
      std::chrono::seconds(30)))
      << read_file(dir_ / "run.txt");
  ::kill(launcher, SIGINT);
  const int code = wait_exit(launcher);
  const std::string output = read_file(dir_ / "run.txt");
  EXPECT_EQ(code, 130) << output;
  EXPECT_TRUE(contains(output, "interrupted at step")) << output;
  // Both ranks stopped after the same step, so they still agree, and the final checkpoint holds it.
  EXPECT_TRUE(contains(output, "identical on all 2 ranks")) << output;
  const Result resumed = run({"resume", "run", "-q"});
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "done: 60 steps")) << resumed.output;
}

TEST_F(DistributedRunTest, TwoProcessesStartedWithTorchrunsVariablesFormOneRun) {
  write_file(dir_ / "cfg.yaml", run_config(12, 0));
  fs::create_directories(dir_ / "store");
  const std::string store = "MANTISSA_STORE_PATH=" + (dir_ / "store").string();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    // No --run-dir: rank 0 names the run directory and the other rank uses its name.
    pids.push_back(
        spawn({"train", "cfg.yaml", "-q"}, dir_ / ("rank" + std::to_string(r) + ".txt"),
              {"RANK=" + std::to_string(r), "WORLD_SIZE=2", "LOCAL_RANK=" + std::to_string(r),
               "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29577", store}));
  }
  EXPECT_EQ(wait_exit(pids[0]), 0) << read_file(dir_ / "rank0.txt");
  EXPECT_EQ(wait_exit(pids[1]), 0) << read_file(dir_ / "rank1.txt");
  const std::string out0 = read_file(dir_ / "rank0.txt");
  EXPECT_TRUE(contains(out0, "on 2 ranks")) << out0;
  EXPECT_TRUE(contains(out0, "identical on all 2 ranks")) << out0;
  EXPECT_EQ(read_file(dir_ / "rank1.txt"), "") << "only rank 0 reports";
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(dir_ / "runs")) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  expect_one_writer(runs[0] / "metrics.jsonl", 12);

  // A run directory rank 0 refuses stops both ranks at once (not at the rendezvous timeout).
  const std::string taken = fs::relative(runs[0], dir_).string();
  pids.clear();
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawn({"train", "cfg.yaml", "-q", "--run-dir", taken},
                         dir_ / ("again" + std::to_string(r) + ".txt"),
                         {"RANK=" + std::to_string(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                          "MASTER_PORT=29577", store}));
  }
  EXPECT_EQ(wait_exit(pids[0]), 2) << read_file(dir_ / "again0.txt");
  EXPECT_EQ(wait_exit(pids[1]), 2) << read_file(dir_ / "again1.txt");
  EXPECT_TRUE(contains(read_file(dir_ / "again0.txt"),
                       "mantissa: rank 0: --run-dir " + taken + " already exists"))
      << read_file(dir_ / "again0.txt");
  EXPECT_EQ(read_file(dir_ / "again1.txt"), "");
}

// Two hosts without a shared filesystem, played by two run directories: ranks started with
// torchrun's variables, rank 0 with --run-dir a/run and rank 1 with b/run, meeting in a store
// every host reaches. Training writes rank 0's directory only. Killed after a checkpoint, the run
// resumes with rank 1's host holding no run directory at all: rank 1 takes the config from rank 0
// through the store and the checkpoint through the process group, and the run ends with the
// weights of an uninterrupted run.
TEST_F(DistributedRunTest, TwoHostsWithoutASharedFilesystemTrainAndResume) {
  write_file(dir_ / "cfg.yaml", run_config(24, 4, "float16"));
  const Result straight = run(train_args("straight"));
  ASSERT_EQ(straight.code, 0) << straight.output;
  fs::create_directories(dir_ / "store");
  const auto env = [&](int r, bool slow) {
    std::vector<std::string> e = {"RANK=" + std::to_string(r),
                                  "WORLD_SIZE=2",
                                  "LOCAL_RANK=" + std::to_string(r),
                                  "LOCAL_WORLD_SIZE=2",
                                  "MASTER_ADDR=127.0.0.1",
                                  "MASTER_PORT=29579",
                                  "MANTISSA_STORE_PATH=" + (dir_ / "store").string()};
    if (slow) e.push_back("MANTISSA_STEP_DELAY_MS=40");
    return e;
  };
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const std::string run_dir = r == 0 ? "a/run" : "b/run";
    pids.push_back(spawn({"train", "cfg.yaml", "--run-dir", run_dir, "-q"},
                         dir_ / ("train" + std::to_string(r) + ".txt"), env(r, true)));
  }
  const fs::path first = dir_ / "a" / "run" / "checkpoints" / "step-000000008.ckpt";
  ASSERT_TRUE(wait_until([&] { return fs::exists(first); }, std::chrono::seconds(60)))
      << read_file(dir_ / "train0.txt");
  for (const pid_t pid : pids) ::kill(pid, SIGKILL);
  for (const pid_t pid : pids) wait_exit(pid);
  EXPECT_FALSE(fs::exists(dir_ / "b")) << "rank 1 wrote on its host";

  // Rank 1's host holds no run directory: it takes rank 0's config and checkpoint.
  pids.clear();
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawn({"resume", r == 0 ? "a/run" : "b/run", "-q"},
                         dir_ / ("resume" + std::to_string(r) + ".txt"), env(r, false)));
  }
  EXPECT_EQ(wait_exit(pids[0]), 0) << read_file(dir_ / "resume0.txt");
  EXPECT_EQ(wait_exit(pids[1]), 0) << read_file(dir_ / "resume1.txt");
  const std::string out = read_file(dir_ / "resume0.txt");
  EXPECT_TRUE(contains(out, "resuming from a/run/checkpoints/step-")) << out;
  EXPECT_TRUE(contains(out, ".ckpt to 1 rank without it")) << out;
  EXPECT_TRUE(contains(out, "parameters, buffers and loss scaler identical on all 2 ranks")) << out;
  EXPECT_EQ(read_file(dir_ / "resume1.txt"), "");
  // Rank 1's host got the one checkpoint it resumed from, and nothing else.
  std::vector<std::string> received;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "b"))
    if (e.is_regular_file()) received.push_back(fs::relative(e.path(), dir_).string());
  ASSERT_EQ(received.size(), 1u);
  ASSERT_EQ(received[0].rfind("b/run/checkpoints/step-", 0), 0u) << received[0];
  // The same tensors (the files' headers differ in the config hash: this run's config has no
  // distributed.nproc).
  const auto tensors = [](const std::string& file) {
    uint64_t header = 0;
    std::memcpy(&header, file.data(), 8);
    return file.substr(8 + header);
  };
  EXPECT_EQ(tensors(weights("a/run")), tensors(weights("straight")));
  expect_one_writer(dir_ / "a" / "run" / "metrics.jsonl", 24);
  EXPECT_TRUE(fs::is_empty(dir_ / "store")) << "the note was left in the store";

  // A copy that differs from rank 0's (another run's, a torn one) is replaced by rank 0's: here
  // of the newest checkpoint, step 24, which a resume of the finished run loads.
  const fs::path newest = fs::path("run") / "checkpoints" / "step-000000024.ckpt";
  write_file(dir_ / "b" / newest, "not this run's checkpoint");
  pids.clear();
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawn({"resume", r == 0 ? "a/run" : "b/run", "-q"},
                         dir_ / ("again" + std::to_string(r) + ".txt"), env(r, false)));
  }
  EXPECT_EQ(wait_exit(pids[0]), 0) << read_file(dir_ / "again0.txt");
  EXPECT_EQ(wait_exit(pids[1]), 0) << read_file(dir_ / "again1.txt");
  EXPECT_TRUE(contains(read_file(dir_ / "again0.txt"), "complete (step 24 of 24)"))
      << read_file(dir_ / "again0.txt");
  EXPECT_EQ(read_file(dir_ / "b" / newest), read_file(dir_ / "a" / newest));

  // Rank 0 refusing to resume stops a rank on a host without the run directory at once, saying
  // why, instead of at its timeout.
  pids.clear();
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawn({"resume", "nowhere", "-q"},
                         dir_ / ("nowhere" + std::to_string(r) + ".txt"), env(r, false)));
  }
  EXPECT_EQ(wait_exit(pids[0]), 2) << read_file(dir_ / "nowhere0.txt");
  EXPECT_EQ(wait_exit(pids[1]), 2) << read_file(dir_ / "nowhere1.txt");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  EXPECT_TRUE(contains(read_file(dir_ / "nowhere1.txt"),
                       "mantissa: rank 1: rank 0: nowhere is not a run directory"))
      << read_file(dir_ / "nowhere1.txt");
}

}  // namespace

// Activation checkpointing under DDP and gradient accumulation: a GPT with dropout trains to the
// same weights, bit for bit, with every block checkpointed as without (the recomputation runs
// inside each rank's backward, between DDP's gradient hooks).
TEST_F(DistributedRunTest, ActivationCheckpointingGivesTheSameWeightsUnderDdp) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += static_cast<char>('a' + (i * 7 + i / 13) % 26);
  write_file(dir_ / "corpus.txt", text);
  const std::string gpt =
      "model: {preset: gpt, n_layer: 2, n_head: 2, n_embd: 16, block_size: 16, vocab_size: 256, "
      "dropout: 0.1}\n"
      "data: {type: text, path: corpus.txt, block_size: 16, batch_size: 4}\n"
      "loss: {type: cross_entropy}\noptimizer: {type: adamw, lr: 0.01}\n"
      "device: cpu\nsteps: 4\nlog_every: 1\ngrad_accum_steps: 2\n"
      "distributed: {timeout_s: 20}\n";
  write_file(dir_ / "cfg.yaml", gpt);
  const Result plain = run(train_args("plain"));
  ASSERT_EQ(plain.code, 0) << plain.output;
  write_file(dir_ / "cfg.yaml",
             std::string(gpt).replace(gpt.find("dropout: 0.1}"), 13,
                                      "dropout: 0.1, activation_checkpointing: true}"));
  const Result checkpointed = run(train_args("checkpointed"));
  ASSERT_EQ(checkpointed.code, 0) << checkpointed.output;
  EXPECT_TRUE(contains(checkpointed.output, "parameters and buffers identical on all 2 ranks"))
      << checkpointed.output;
  EXPECT_TRUE(contains(read_file(dir_ / "checkpointed" / "resolved.yaml"),
                       "activation_checkpointing: true"));
  // The files differ only in the config hash their metadata records.
  const auto tensors = [this](const std::string& run_dir) {
    std::string w = weights(run_dir);
    const std::string key = "\"mantissa.config_hash\":\"";
    const size_t at = w.find(key);
    EXPECT_NE(at, std::string::npos);
    if (at != std::string::npos) w.replace(at + key.size(), 16, 16, '-');
    return w;
  };
  EXPECT_TRUE(tensors("checkpointed") == tensors("plain")) << "the weights differ";
}

// Delayed float8 scaling under DDP: each step's absolute maxima are combined over the ranks
// (a max all-reduce, TE's reduce_amax) before the scales are made, so both ranks keep the same
// scales (the end-of-run hash covers them) and 2 ranks of 64 examples step as 1 process of 128.
// The input's and weight's maxima are the whole batch's; the output gradient's is twice the
// single process's (each rank's loss averages half the batch), and so is its scale's inverse:
// the same float8 codes, a power of two apart — from the second step on: the first runs with
// TE's starting scales of 1 on both, where the ranks' doubled gradients keep bits that the single
// process's lose in e5m2's subnormal range. That and the order of the float32 sums (a value
// moved across a float8 rounding boundary) are what differ: on a Zen 4, 7.2e-6 after one step
// and 9.3e-5 after 12 (the same runs without float8: 3e-8). Without the reduction the ranks'
// scales differ and the end-of-run check fails the run.
TEST_F(DistributedRunTest, DelayedFloat8OnTwoRanksOf64StepsAsOneProcessOf128) {
  const auto config = [](int batch) {
    return "model:\n  layers:\n    - {type: linear, in: 16, out: 32}\n    - relu\n"
           "    - {type: linear, in: 32, out: 32}\n    - relu\n"
           "    - {type: linear, in: 32, out: 16}\n"
           "data: {type: teacher, samples: 256, batch_size: " +
           std::to_string(batch) +
           ", noise: 0.1, in_features: 16, out_features: 16}\n"
           "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
           "float8: {recipe: delayed, amax_history_len: 4}\n"
           "device: cpu\nsteps: 12\nlog_every: 1\ndistributed: {timeout_s: 20}\n";
  };
  write_file(dir_ / "cfg.yaml", config(64));
  const Result two = run(train_args("two"));
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_TRUE(
      contains(two.output, "parameters, buffers and float8 scales identical on all 2 ranks"))
      << two.output;
  write_file(dir_ / "cfg.yaml", config(128));
  const Result one = run({"train", "cfg.yaml", "--run-dir", "one", "-q"});
  ASSERT_EQ(one.code, 0) << one.output;
  const double worst = max_weight_difference("two", "one");
  std::cout << "DDP 2 x 64 against 1 x 128 after 12 delayed float8 steps: max |difference| "
            << worst << "\n";
  EXPECT_LT(worst, 5e-4);
}

// Muon under DDP: each rank orthogonalises the all-reduced gradient of every matrix, so 2 ranks of
// 64 examples step as 1 process of the same 128 (the ranks' shards of each epoch's order are the
// single process's batch), within 1e-6, and the ranks end equal. With the iteration in float32:
// in bfloat16 a gradient that differs in its last float32 bit (the all-reduce sums in another
// order) can round to another bfloat16, and the update moves by a bfloat16 step (about 1e-3 here).
TEST_F(DistributedRunTest, MuonOnTwoRanksOf64StepsAsOneProcessOf128) {
  const auto config = [](int batch) {
    return "model:\n  layers:\n    - {type: linear, in: 10, out: 32}\n    - relu\n"
           "    - {type: linear, in: 32, out: 32}\n    - relu\n"
           "    - {type: linear, in: 32, out: 5}\n"
           "data: {type: teacher, samples: 256, batch_size: " +
           std::to_string(batch) +
           ", noise: 0.1}\n"
           "optimizer: {type: muon, lr: 0.02, ns_float32: true, adamw: {lr: 0.01}}\n"
           "device: cpu\nsteps: 12\nlog_every: 1\ndistributed: {timeout_s: 20}\n";
  };
  write_file(dir_ / "cfg.yaml", config(64));
  const Result two = run(train_args("two"));
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_TRUE(contains(two.output, "parameters and buffers identical on all 2 ranks"))
      << two.output;
  EXPECT_TRUE(contains(two.output, "optimizer muon: Muon 1 tensor (1024 parameters): 2.weight"))
      << two.output;
  write_file(dir_ / "cfg.yaml", config(128));
  const Result one = run({"train", "cfg.yaml", "--run-dir", "one", "-q"});
  ASSERT_EQ(one.code, 0) << one.output;
  const double worst = max_weight_difference("two", "one");
  EXPECT_LT(worst, 1e-6);
  std::cout << "DDP 2 x 64 against 1 x 128 after 12 Muon steps: max |difference| " << worst << "\n";
}
