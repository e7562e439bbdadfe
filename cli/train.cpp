// `mantissa train` and `mantissa resume`.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/cli.h"
#include "runner/atomic_file.h"
#include "runner/build_from_config.h"
#include "runner/checkpoint.h"
#include "runner/generate.h"
#include "runner/metrics.h"
#include "runner/progress.h"
#include "runner/run_lock.h"
#include "runner/trainer.h"

namespace mantissa::cli {
namespace {

namespace fs = std::filesystem;

// The signal that asked the run to stop (0: none).
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signo) { g_stop_signal = signo; }
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Ctrl-C, and the SIGTERM / SIGHUP that Slurm, Kubernetes, `docker stop` and a closed terminal
// send, stop the run after the current step; the trainer then writes its final checkpoint and
// summary, so `mantissa resume` continues from there. A second signal ends the process as usual.
class StopOnSignal : public runner::Callback {
 public:
  void on_train_begin(runner::Trainer&) override {
    g_stop_signal = 0;
    for (int s : kStopSignals) std::signal(s, on_stop_signal);
  }
  void on_step_end(runner::Trainer& t, const runner::StepMetrics&) override { check(t); }
  void on_batch_end(runner::Trainer& t) override { check(t); }
  void on_train_end(runner::Trainer&, const runner::TrainSummary&) override { restore(); }

 private:
  static void restore() {
    for (int s : kStopSignals) std::signal(s, SIG_DFL);
  }
  void check(runner::Trainer& t) {
    if (g_stop_signal != 0 && !stopping_) {
      stopping_ = true;
      restore();
      std::cerr << "\nmantissa: " << strsignal(g_stop_signal)
                << " received; stopping after this step\n";
      t.request_stop();
    }
  }
  bool stopping_ = false;
};

// MANTISSA_STEP_DELAY_MS=<ms> sleeps after every step: lets tests (and demos) stop or kill a run
// at a chosen point of a toy-sized run that would otherwise finish in milliseconds.
class StepDelay : public runner::Callback {
 public:
  explicit StepDelay(int ms) : ms_(ms) {}
  void on_batch_end(runner::Trainer&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }

 private:
  int ms_;
};

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// True for an empty directory, or one holding only the temporary of a resolved.yaml write that a
// `train` killed at its start left behind: nothing of a run is there, so it may start again.
bool holds_only_temporaries(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!runner::is_atomic_temp_name(entry.path().filename().string())) return false;
  }
  return true;
}

// runs/<name>-<stamp>, with -2, -3, ... if two runs start within one second.
std::string default_run_dir(const std::string& name) {
  const std::string base = "runs/" + name + "-" + timestamp();
  std::string dir = base;
  for (int i = 2; fs::exists(dir); ++i) dir = base + "-" + std::to_string(i);
  return dir;
}

// Exit status of a run: 0 when it completed, 128 + the signal when one stopped it (as a shell
// reports a process killed by it), so scripts and schedulers do not take it for a finished run.
int print_summary(const runner::TrainSummary& s, const std::string& run_dir) {
  if (s.completed()) {
    std::cout << "done: " << s.steps << " steps (" << s.steps_skipped << " skipped) in "
              << runner::format_duration(s.wall_time_s) << "; final loss " << s.final_loss
              << ", best " << s.best_loss;
    if (s.final_eval) std::cout << "; " << runner::format_eval(*s.final_eval);
    std::cout << "\nrun directory: " << run_dir << "\n";
    return kExitOk;
  }
  std::cout << "interrupted at step " << s.steps << " of " << s.total_steps
            << " (checkpoint written); continue with `mantissa resume " << run_dir << "`\n";
  return 128 + (g_stop_signal != 0 ? static_cast<int>(g_stop_signal) : SIGINT);
}

int fit(runner::RunObjects& run, const std::string& run_dir, const std::string& checkpoint,
        bool quiet) {
  runner::TrainerOptions opts = run.trainer_options;
  opts.run_dir = run_dir;
  opts.progress = !quiet;
  runner::Trainer trainer(run.model, run.loss, run.optimizer, run.train_loader, opts);
  if (run.scheduler) trainer.set_scheduler(run.scheduler);
  if (run.val_loader) trainer.set_val_loader(run.val_loader);
  trainer.add_callback(std::make_shared<StopOnSignal>());
  if (const char* delay = std::getenv("MANTISSA_STEP_DELAY_MS"); delay && std::atoi(delay) > 0) {
    trainer.add_callback(std::make_shared<StepDelay>(std::atoi(delay)));
  }
  if (!checkpoint.empty()) {
    trainer.resume_from(checkpoint);
    if (trainer.step() >= trainer.total_steps()) {
      // A finished run stays as it is: no second final evaluation, no new summary.
      std::cout << "the run in " << run_dir << " is complete (step " << trainer.step() << " of "
                << trainer.total_steps() << "); nothing to do\n";
      return kExitOk;
    }
  }
  const runner::TrainSummary summary = trainer.fit();
  const int code = print_summary(summary, run_dir);
  const runner::Config& c = run.config;
  auto* gpt = dynamic_cast<nn::GPTImpl*>(run.model.get());
  if (summary.completed() && c.sample_tokens > 0 && gpt != nullptr && c.data.type == "text") {
    runner::GenerateOptions g{.prompt = c.sample_prompt, .tokens = c.sample_tokens, .seed = c.seed};
    if (c.sample_top_k > 0) g.top_k = c.sample_top_k;
    std::cout << "sample (" << c.sample_tokens << " bytes, seed " << c.seed << "):\n"
              << runner::generate_text(*gpt, g) << "\n";
  }
  return code;
}

}  // namespace

int train(const TrainArgs& args) {
  runner::RunObjects run;
  std::string run_dir = args.run_dir;
  try {
    std::vector<std::string> sets = args.sets;
    if (!args.device.empty()) sets.push_back("device=" + args.device);
    runner::Config config =
        args.config.empty()
            ? runner::parse_config(default_config_yaml(), "<default config>", sets, "toy")
            : runner::parse_config_file(args.config, sets);
    // Everything is checked (files, shapes, device) before the run directory exists.
    run = runner::build_run(config);
    if (args.dry_run) {
      std::cout << run.config_text;
      return kExitOk;
    }
    if (run_dir.empty()) {
      run_dir = default_run_dir(config.name);
    } else if (fs::exists(run_dir) && !holds_only_temporaries(run_dir)) {
      throw runner::ConfigError("--run-dir " + run_dir +
                                " already exists and is not empty (continue it with `mantissa "
                                "resume " +
                                run_dir + "`)");
    }
  } catch (const runner::ConfigError& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const Error& e) {
    print_error(e.what());
    return kExitUsage;
  }
  try {
    fs::create_directories(run_dir);
    runner::write_file_atomically((fs::path(run_dir) / "resolved.yaml").string(), run.config_text);
    std::cout << "training " << run.config.name << " on " << run.device << " ("
              << run.config.precision << "), run directory " << run_dir << "\n"
              << std::flush;  // before the progress lines on (unbuffered) stderr
    return fit(run, run_dir, "", args.quiet);
  } catch (const runner::RunDirInUse& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailed;
  }
}

int resume(const ResumeArgs& args) {
  runner::RunObjects run;
  std::string checkpoint;
  try {
    const std::string resolved = (fs::path(args.run_dir) / "resolved.yaml").string();
    if (!fs::exists(resolved)) {
      throw runner::ConfigError(args.run_dir + " is not a run directory (no resolved.yaml)");
    }
    const std::string text = runner::read_file_bytes(resolved);
    std::vector<std::string> sets;
    if (!args.device.empty()) sets.push_back("device=" + args.device);
    runner::Config config = runner::parse_config(text, resolved, sets);
    run = runner::build_run(config, text);  // the stored text, so the config hash matches
  } catch (const Error& e) {
    print_error(e.what());
    return kExitUsage;
  }
  try {
    const std::string dir = (fs::path(args.run_dir) / "checkpoints").string();
    if (runner::list_checkpoints(dir).empty()) {
      // Stopped before its first checkpoint (killed, or no checkpoint_every): nothing of the
      // run's state survives, so it starts again from step 0.
      std::cout << "no checkpoint in " << dir << " yet: starting the run from step 0 on "
                << run.device << "\n"
                << std::flush;
      return fit(run, args.run_dir, "", args.quiet);
    }
    std::vector<std::string> refused;
    auto choice = runner::latest_valid_checkpoint(dir, run.config_hash, &refused);
    // Each refusal reads "checkpoint '<path>': <why>".
    for (const auto& r : refused) std::cout << "refused newer " << r << "\n";
    if (!choice) {
      print_error("no valid checkpoint to resume from in " + dir +
                  (refused.empty() ? "" : " (" + std::to_string(refused.size()) + " refused)"));
      return kExitFailed;
    }
    std::cout << "resuming from " << choice->path
              << (refused.empty() ? " (the newest checkpoint)" : " (the newest valid checkpoint)")
              << " on " << run.device << "\n"
              << std::flush;
    return fit(run, args.run_dir, choice->path, args.quiet);
  } catch (const runner::RunDirInUse& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailed;
  }
}

}  // namespace mantissa::cli
