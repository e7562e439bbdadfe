// The fixture of the CLI tests that train in a run directory and stop it (tests/test_cli_runs.cpp,
// tests/test_cli_float8_runs.cpp): a slow run started and waited for, and a run killed after a
// checkpoint that must resume to the weights of one that never stopped.
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "cli_test_util.h"

namespace {

// Every line of metrics.jsonl parses, and the step records count 1, 2, ... without a gap.
void expect_clean_metrics(const fs::path& file, int64_t last_step) {
  std::istringstream in(read_file(file));
  std::string line;
  int64_t expected = 1;
  while (std::getline(in, line)) {
    const JsonDoc j(line);  // throws on a torn or interleaved line
    if (const auto s = j.find("step")) {
      EXPECT_EQ(s->as_int(), expected++) << line;
    }
  }
  EXPECT_EQ(expected - 1, last_step) << read_file(file);
}

class CliRunTest : public CliTest {
 protected:
  // Starts a slow run and waits until `wait_for` exists in its directory.
  pid_t start_slow_run(const std::string& run_dir, const std::string& wait_for) {
    const pid_t pid = spawn({"train", "cfg.yaml", "--run-dir", run_dir, "-q"},
                            dir_ / (run_dir + ".txt"), {"MANTISSA_STEP_DELAY_MS=50"});
    const fs::path target = dir_ / run_dir / wait_for;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(target) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_TRUE(fs::exists(target)) << read_file(dir_ / (run_dir + ".txt"));
    return pid;
  }

  // cfg.yaml (40 steps, a checkpoint every 5) run again as "r", killed (SIGKILL) after its step-10
  // checkpoint and resumed, ends with the weights of the run "whole" (already trained), bit for
  // bit.
  void expect_killed_run_resumes_to_whole() {
    const pid_t pid = start_slow_run("r", "checkpoints/step-000000010.ckpt");
    ::kill(pid, SIGKILL);
    wait_exit(pid);
    ASSERT_FALSE(fs::exists(dir_ / "r" / "summary.json"));
    const Result resumed = run({"resume", "r", "-q"});
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resuming from"), std::string::npos) << resumed.output;
    expect_clean_metrics(dir_ / "r" / "metrics.jsonl", 40);
    ASSERT_EQ(run({"export", "r", "r.safetensors"}).code, 0);
    ASSERT_EQ(run({"export", "whole", "whole.safetensors"}).code, 0);
    EXPECT_EQ(read_file(dir_ / "r.safetensors"), read_file(dir_ / "whole.safetensors"));
  }
};

}  // namespace
