// `mantissa train` and `mantissa resume`.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/cli.h"
#include "distributed/ddp.h"
#include "distributed/init.h"
#include "distributed/zero.h"
#include "nn/float8.h"
#include "runner/files/atomic_file.h"
#include "runner/files/run_lock.h"
#include "runner/files/text.h"
#include "runner/text/bpe_tokenizer.h"
#include "runner/text/generate.h"
#include "runner/training/build_from_config.h"
#include "runner/training/checkpoint.h"
#include "runner/training/distributed_run.h"
#include "runner/training/metrics.h"
#include "runner/training/progress.h"
#include "runner/training/trainer.h"

namespace mantissa::cli {
namespace {

namespace fs = std::filesystem;

// bytes / parameters, for the start-up line.
double per(int64_t bytes, int64_t parameters) {
  return parameters > 0 ? static_cast<double>(bytes) / static_cast<double>(parameters) : 0.0;
}

// The signal that asked the run to stop (0: none).
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signo) { g_stop_signal = signo; }
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Ctrl-C, and the SIGTERM / SIGHUP that Slurm, Kubernetes, `docker stop` and a closed terminal
// send, stop the run after the current step; the trainer then writes its final checkpoint and
// summary, so `mantissa resume` continues from there. A second signal ends the process as usual.
// In a distributed run the ranks agree after every step (an allreduce of the flag) so that all of
// them stop after the same step, even when the signal reached them at different times.
class StopOnSignal : public runner::Callback {
 public:
  explicit StopOnSignal(distributed::ProcessGroup* group) : group_(group) {}
  void on_train_begin(runner::Trainer&) override {
    g_stop_signal = 0;
    for (int s : kStopSignals) std::signal(s, on_stop_signal);
  }
  void on_step_end(runner::Trainer& t, const runner::StepMetrics&) override {
    if (group_ == nullptr) check(t, g_stop_signal != 0);
  }
  void on_batch_end(runner::Trainer& t) override {
    bool stop = g_stop_signal != 0;
    if (group_ != nullptr) {
      Tensor flag = from_vector(std::vector<float>{stop ? 1.0f : 0.0f}).to(group_->device());
      group_->allreduce(flag, distributed::ReduceOp::Max)->wait();
      stop = flag.cpu().item<float>() > 0;
    }
    check(t, stop);
  }
  void on_train_end(runner::Trainer&, const runner::TrainSummary&) override { restore(); }

 private:
  static void restore() {
    for (int s : kStopSignals) std::signal(s, SIG_DFL);
  }
  void check(runner::Trainer& t, bool stop) {
    if (stop && !stopping_) {
      stopping_ = true;
      restore();
      if (g_stop_signal != 0 && (group_ == nullptr || group_->rank() == 0))
        std::cerr << "\nmantissa: " << strsignal(g_stop_signal)
                  << " received; stopping after this step\n";
      t.request_stop();
    }
  }
  distributed::ProcessGroup* group_;
  bool stopping_ = false;
};

// This process's part in a run: rank 0 of 1, or a rank of a data-parallel job. Only rank 0
// writes files and prints progress; the others print nothing but their errors.
struct Ranks {
  runner::RankPlacement placement;
  std::shared_ptr<distributed::ProcessGroup> group;  // null: a single process
  bool leader() const { return placement.rank == 0; }
  std::ostream& out() const {
    static std::ostream null_stream(nullptr);
    return leader() ? std::cout : null_stream;
  }
  void error(const std::string& message) const {
    print_error(placement.distributed() ? "rank " + std::to_string(placement.rank) + ": " + message
                                        : message);
  }
  // Connects the ranks (nothing for a single process).
  void connect(const runner::RunObjects& run) {
    if (!placement.distributed()) return;
    group = distributed::init_process_group(
        runner::init_options(run.config.distributed, run.device, placement));
  }
  // Rank 0's value on every rank.
  std::string agree(const std::string& value) const {
    return group ? runner::broadcast_string(*group, value) : value;
  }
  ~Ranks() {
    if (group) distributed::destroy_process_group();
  }
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
int print_summary(const runner::TrainSummary& s, const std::string& run_dir, std::ostream& out) {
  if (s.completed()) {
    out << "done: " << s.steps << " steps (" << s.steps_skipped << " skipped) in "
        << runner::format_duration(s.wall_time_s) << "; final loss " << s.final_loss << ", best "
        << s.best_loss;
    if (s.final_eval) out << "; " << runner::format_eval(*s.final_eval);
    out << "\nrun directory: " << run_dir << "\n";
    return kExitOk;
  }
  out << "interrupted at step " << s.steps << " of " << s.total_steps
      << " (checkpoint written); continue with `mantissa resume " << run_dir << "`\n";
  return 128 + (g_stop_signal != 0 ? static_cast<int>(g_stop_signal) : SIGINT);
}

// With grad_accum_steps > 1 only the step's last micro-batch reduces gradients over the ranks; the
// others accumulate locally under no_sync(), as a PyTorch DDP loop with accumulation does.
class SyncLastMicroBatch final : public runner::Callback {
 public:
  explicit SyncLastMicroBatch(nn::DistributedDataParallel& ddp) : ddp_(ddp) {}
  void on_micro_batch(runner::Trainer&, int64_t, bool last) override {
    no_sync_.reset();
    if (!last) no_sync_.emplace(ddp_);
  }

 private:
  nn::DistributedDataParallel& ddp_;
  std::optional<nn::DistributedDataParallel::NoSyncGuard> no_sync_;
};

// Every rank trains the same model on its shard: the forward goes through DistributedDataParallel
// (which averages the gradients over the ranks), the checkpoints hold the model itself (the names
// of a single-process run), and only rank 0 has a run directory to write.
int fit(runner::RunObjects& run, const std::string& run_dir, const std::string& checkpoint,
        bool quiet, const Ranks& ranks) {
  for (const auto& line : run.startup_lines) ranks.out() << line << "\n";
  ranks.out() << std::flush;  // before the progress lines on (unbuffered) stderr
  runner::TrainerOptions opts = run.trainer_options;
  opts.run_dir = ranks.leader() ? run_dir : "";
  opts.progress = !quiet && ranks.leader();
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  runner::ForwardFn forward = run.forward;
  std::shared_ptr<distributed::ZeroRedundancyOptimizer> zero;
  std::shared_ptr<optim::Optimizer> optimizer = run.optimizer;
  std::shared_ptr<optim::LRScheduler> scheduler = run.scheduler;
  if (ranks.group) {
    ddp = std::make_unique<nn::DistributedDataParallel>(
        run.model, ranks.group, runner::ddp_options(run.config.distributed), run.forward);
    forward = ddp->forward_fn();
    if (const int64_t stage = run.config.distributed.zero_stage; stage > 0) {
      // The configured optimizer and schedule, over this rank's shards.
      zero = std::make_shared<distributed::ZeroRedundancyOptimizer>(
          *ddp, run.optimizer->param_groups(), run.make_optimizer, static_cast<int>(stage));
      optimizer = zero->optimizer_ptr();
      scheduler = run.make_scheduler(*optimizer);
    }
  }
  runner::Trainer trainer(run.model, forward, run.loss, optimizer, run.train_loader, opts);
  if (scheduler) trainer.set_scheduler(scheduler);
  if (zero) trainer.set_zero(zero, /*checkpoints=*/true);  // rank 0 always has a run directory
  if (ranks.group) {
    // Delayed float8 scales from every rank's maxima (TE's reduce_amax), the same on each rank.
    trainer.set_float8_amax_reduce([group = ranks.group](Tensor& amaxes) {
      group->allreduce(amaxes, distributed::ReduceOp::Max)->wait();
    });
  }
  if (run.val_loader) trainer.set_val_loader(run.val_loader);
  trainer.add_callback(std::make_shared<StopOnSignal>(ranks.group.get()));
  if (ddp && run.config.grad_accum_steps > 1)
    trainer.add_callback(std::make_shared<SyncLastMicroBatch>(*ddp));
  if (const char* delay = std::getenv("MANTISSA_STEP_DELAY_MS"); delay && std::atoi(delay) > 0) {
    trainer.add_callback(std::make_shared<StepDelay>(std::atoi(delay)));
  }
  if (!checkpoint.empty()) {
    trainer.resume_from(checkpoint);
    // A run resumed on another number of ranks shards the rest of its epoch anew.
    if (const runner::LoaderPosition at = run.train_loader->state(); at.offset > 0)
      ranks.out() << "the training data continues at position " << at.offset << " of epoch "
                  << at.epoch << "'s order, sharded over " << at.num_replicas << " rank"
                  << (at.num_replicas == 1 ? "" : "s") << "\n"
                  << std::flush;
    if (trainer.step() >= trainer.total_steps()) {
      // A finished run stays as it is: no second final evaluation, no new summary.
      ranks.out() << "the run in " << run_dir << " is complete (step " << trainer.step() << " of "
                  << trainer.total_steps() << "); nothing to do\n";
      return kExitOk;
    }
  }
  const runner::TrainSummary summary = trainer.fit();
  if (ranks.group) {
    const std::string hash =
        runner::check_ranks_agree_on_state(*ranks.group, *run.model, &trainer.scaler());
    std::vector<std::string> what = {"parameters", "buffers"};
    if (!nn::float8_delayed_layers(*run.model).empty()) what.push_back("float8 scales");
    if (trainer.scaler().is_enabled()) what.push_back("loss scaler");
    std::string said = what[0];
    for (size_t i = 1; i < what.size(); ++i)
      said += (i + 1 == what.size() ? " and " : ", ") + what[i];
    ranks.out() << said << " identical on all " << ranks.group->size() << " ranks (hash " << hash
                << ")\n";
  }
  const int code = print_summary(summary, run_dir, ranks.out());
  const runner::Config& c = run.config;
  auto* gpt = dynamic_cast<nn::GPTImpl*>(run.model.get());
  const bool has_tokenizer =
      c.data.type == "text" || (c.data.type == "tokens_bin" && !c.data.tokenizer().empty());
  if (ranks.leader() && summary.completed() && c.sample_tokens > 0 && gpt != nullptr &&
      has_tokenizer) {
    runner::GenerateOptions g{.prompt = c.sample_prompt, .tokens = c.sample_tokens, .seed = c.seed};
    if (c.sample_top_k > 0) g.top_k = c.sample_top_k;
    // The run is done: a sample that cannot be made (a token the tokenizer lacks) is reported,
    // and the exit status stays the run's.
    try {
      g.tokenizer = run_tokenizer(c, "sample_tokens");
      const std::string text = runner::generate_text(*gpt, g);
      std::cout << "sample (" << c.sample_tokens << " tokens, seed " << c.seed << "):\n"
                << text << "\n";
    } catch (const std::exception& e) {
      print_error("sample_tokens: " + std::string(e.what()));
    }
  }
  return code;
}

// The placement of this process, and the build options that follow from it.
runner::RunPlacement run_placement(const runner::RankPlacement& p) {
  return {p.rank, p.world_size, p.local_rank};
}

// The run directory of a new run: `requested`, which must not hold a run, or a new default one.
std::string choose_run_dir(const std::string& requested, const std::string& name) {
  if (requested.empty()) return default_run_dir(name);
  if (fs::exists(requested) && !holds_only_temporaries(requested)) {
    throw runner::ConfigError("--run-dir " + requested +
                              " already exists and is not empty (continue it with `mantissa "
                              "resume " +
                              requested + "`)");
  }
  return requested;
}

}  // namespace

int train(const TrainArgs& args) {
  Ranks ranks;
  runner::RunObjects run;
  std::string run_dir = args.run_dir;
  std::vector<std::string> sets = args.sets;
  if (!args.device.empty()) sets.push_back("device=" + args.device);
  if (args.nproc > 0) sets.push_back("distributed.nproc=" + std::to_string(args.nproc));
  int launch_ranks = 0;  // > 0: this process is the launcher of that many local ranks
  try {
    ranks.placement = runner::rank_placement();
    runner::Config config =
        args.config.empty()
            ? runner::parse_config(default_config_yaml(), "<default config>", sets, "toy")
            : runner::parse_config_file(args.config, sets);
    if (!ranks.placement.distributed() && config.distributed.nproc > 1 && !args.dry_run)
      launch_ranks = static_cast<int>(config.distributed.nproc);
    // Everything is checked (files, shapes, device) before the run directory exists; the
    // launcher checks it as its rank 0 will see it.
    run = runner::build_run(config, "",
                            launch_ranks > 0 ? runner::RunPlacement{0, launch_ranks, 0}
                                             : run_placement(ranks.placement));
    if (args.dry_run) {
      ranks.out() << run.config_text;
      return kExitOk;
    }
    // A rank started by torchrun, mpirun or srun learns rank 0's decision once connected.
    if (!ranks.placement.distributed()) run_dir = choose_run_dir(run_dir, config.name);
  } catch (const Error& e) {
    // Every rank reads the same config, so every rank fails here alike, before connecting.
    ranks.error(e.what());
    return kExitUsage;
  }
  if (launch_ranks > 0) {
    std::vector<std::string> child = {"train"};
    if (!args.config.empty()) child.push_back(args.config);
    for (const auto& set : sets) child.insert(child.end(), {"--set", set});
    child.insert(child.end(), {"--run-dir", run_dir});
    if (args.quiet) child.push_back("-q");
    return launch_local_ranks(launch_ranks, child, run.config.distributed.store_path.empty());
  }
  return reporting_errors(
      [&]() -> int {
        ranks.connect(run);
        if (ranks.placement.distributed()) {
          // Rank 0 names the run directory (each rank would stamp its own default name) or refuses
          // it, and sends the name, or "" for a refusal, to the others.
          std::string refusal;
          if (ranks.leader()) {
            try {
              run_dir = choose_run_dir(run_dir, run.config.name);
            } catch (const runner::ConfigError& e) {
              refusal = e.what();
              run_dir.clear();
            }
          }
          run_dir = ranks.agree(run_dir);
          if (run_dir.empty()) {
            if (ranks.leader()) ranks.error(refusal);
            return kExitUsage;
          }
        }
        if (ranks.leader()) {
          fs::create_directories(run_dir);
          runner::write_file_atomically((fs::path(run_dir) / "resolved.yaml").string(),
                                        run.config_text);
        }
        ranks.out() << "training " << run.config.name << " on " << run.device << " ("
                    << run.config.precision << ")";
        if (ranks.group) ranks.out() << " on " << ranks.group->size() << " ranks";
        ranks.out() << ", run directory " << run_dir;
        {
          runner::TrainingMemory mem = runner::planned_training_memory(*run.model, *run.optimizer);
          if (const int64_t stage = run.config.distributed.zero_stage; stage > 0 && ranks.group) {
            // Each rank's share (the buckets' padding aside): ZeRO-1 the optimizer state, ZeRO-2
            // also the gradients.
            const int64_t n = ranks.group->size();
            mem.optimizer_state_bytes = (mem.optimizer_state_bytes + n - 1) / n;
            if (stage == 2) mem.gradient_bytes = (mem.gradient_bytes + n - 1) / n;
          }
          char line[160];
          std::snprintf(line, sizeof line,
                        "; %lld parameters at %.3g bytes each (weights %.3g + gradients %.3g + "
                        "optimizer state %.3g)",
                        static_cast<long long>(mem.parameters), mem.bytes_per_parameter(),
                        per(mem.weight_bytes, mem.parameters),
                        per(mem.gradient_bytes, mem.parameters),
                        per(mem.optimizer_state_bytes, mem.parameters));
          ranks.out() << line;
        }
        ranks.out() << "\n" << std::flush;  // before the progress lines on (unbuffered) stderr
        return fit(run, run_dir, "", args.quiet, ranks);
      },
      [&](const std::string& message) { ranks.error(message); });
}

namespace {

// A run with no checkpoint (no checkpoints/ folder, or an empty one) is one killed before its
// first checkpoint, and starts again from step 0. But a run that finished (summary.json) or
// logged a step past its first checkpoint had one: its checkpoints were deleted or moved, and
// starting it again would silently throw its progress away and rewrite its files. That is
// refused, before anything is written.
void refuse_lost_checkpoints(const std::string& run_dir, const runner::Config& config) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!runner::list_checkpoints(dir.string()).empty()) return;
  const bool finished = fs::exists(fs::path(run_dir) / "summary.json", ec);
  const int64_t reached = runner::last_metrics_step((fs::path(run_dir) / "metrics.jsonl").string());
  // Past the first checkpoint step: the step's log record is written just before its checkpoint,
  // so a run killed between the two shows that step and no checkpoints/ legitimately.
  const bool checkpointed = config.checkpoint_every > 0 && reached > config.checkpoint_every;
  if (!finished && !checkpointed) return;
  throw runner::ConfigError(
      "cannot resume " + run_dir + ": its checkpoints are gone (" +
      (fs::exists(dir, ec) ? "checkpoints/ is empty" : "no checkpoints/ folder") +
      "), but the run " +
      (finished ? std::string("finished") : "reached step " + std::to_string(reached)) +
      " and wrote checkpoints there; put them back, or start a new run with `mantissa train`");
}

}  // namespace

int resume(const ResumeArgs& args) {
  Ranks ranks;
  runner::RunObjects run;
  int launch_ranks = 0;
  // Rank 0 of a job leaves the run's config in the rendezvous store for ranks on hosts without
  // the run directory (no shared filesystem), and a refusal when it cannot resume, so that they
  // stop at once instead of at their timeout. It leaves it in the store of the run's config and in
  // the one of the environment, which is where such a rank looks (it has no config to read
  // distributed.store_path from).
  const std::string note_key = runner::run_config_note_key();
  std::vector<distributed::InitOptions> note_stores;
  const auto add_note_store = [&](const distributed::InitOptions& o) {
    try {
      const std::string store = distributed::rendezvous_store(o);
      if (store.empty()) return;
      for (const auto& known : note_stores)
        if (distributed::rendezvous_store(known) == store) return;
      note_stores.push_back(o);
    } catch (const std::exception&) {
      // No store to leave it in: connecting would fail the same way, and says so.
    }
  };
  const auto post_note = [&](const std::string& note) {
    for (const auto& o : note_stores) {
      try {
        distributed::post_rendezvous_note(o, note_key, note);
      } catch (const std::exception&) {
        // As above.
      }
    }
  };
  const auto remove_notes = [&] {
    for (const auto& o : note_stores) distributed::remove_rendezvous_note(o, note_key);
  };
  // The config note goes once the ranks have met, or when this rank stops before that; a refusal
  // note stays for the others to read (the next launch's rank 0 removes it when it starts).
  bool config_posted = false;
  struct ConfigNoteGuard {
    const bool& posted;
    std::function<void()> remove;
    ~ConfigNoteGuard() {
      if (posted) remove();
    }
  } config_note_guard{config_posted, remove_notes};
  try {
    ranks.placement = runner::rank_placement();
    const bool leads_a_job = ranks.placement.distributed() && ranks.leader();
    if (leads_a_job) {
      add_note_store(distributed::InitOptions{});
      remove_notes();  // one an earlier launch left
    }
    const std::string resolved = (fs::path(args.run_dir) / "resolved.yaml").string();
    std::string text, source = resolved;
    std::error_code ec;
    if (fs::exists(resolved, ec)) {
      text = runner::read_file_bytes(resolved);
    } else if (ranks.placement.distributed() && !ranks.leader()) {
      // A host without the run directory: rank 0's config, through the store of the environment.
      const runner::Config defaults;
      try {
        text = distributed::read_rendezvous_note(
            runner::init_options(defaults.distributed, Device::cpu(), ranks.placement), note_key);
      } catch (const Error& e) {
        throw runner::ConfigError(
            args.run_dir +
            " is not a run directory here (no resolved.yaml), and rank 0's config did not come "
            "through the rendezvous store (on a host without the run directory, set "
            "MANTISSA_STORE_PATH to the store the ranks meet in): " +
            e.what());
      }
      if (!text.empty() && text[0] == '\x01') throw runner::ConfigError(text.substr(1));
      source = resolved + " (rank 0's)";
    } else {
      throw runner::ConfigError(args.run_dir + " is not a run directory (no resolved.yaml)");
    }
    std::vector<std::string> sets;
    if (!args.device.empty()) sets.push_back("device=" + args.device);
    if (args.nproc > 0) sets.push_back("distributed.nproc=" + std::to_string(args.nproc));
    runner::Config config = runner::parse_config(text, source, sets);
    if (leads_a_job)
      add_note_store(runner::init_options(config.distributed, Device::cpu(), ranks.placement));
    refuse_lost_checkpoints(args.run_dir, config);
    // A distributed run resumes on as many ranks as it had, or --nproc (the hash is the stored
    // text's, which overrides do not change; the loader keeps the global position).
    if (!ranks.placement.distributed() && config.distributed.nproc > 1)
      launch_ranks = static_cast<int>(config.distributed.nproc);
    run = runner::build_run(config, text,  // the stored text, so the config hash matches
                            launch_ranks > 0 ? runner::RunPlacement{0, launch_ranks, 0}
                                             : run_placement(ranks.placement));
    post_note(text);
    config_posted = !note_stores.empty();
  } catch (const std::exception& e) {
    config_posted = false;
    post_note(std::string(1, '\x01') + "rank 0: " + runner::first_line(e.what()));
    ranks.error(e.what());
    return kExitUsage;
  }
  if (launch_ranks > 0) {
    std::vector<std::string> child = {"resume", args.run_dir};
    if (!args.device.empty()) child.insert(child.end(), {"--device", args.device});
    if (args.nproc > 0) child.insert(child.end(), {"--nproc", std::to_string(args.nproc)});
    if (args.quiet) child.push_back("-q");
    return launch_local_ranks(launch_ranks, child, run.config.distributed.store_path.empty());
  }
  return reporting_errors(
      [&]() -> int {
        ranks.connect(run);
        // Every rank has read the note once the group has met.
        if (config_posted) remove_notes();
        config_posted = false;
        // Rank 0 chooses the checkpoint and every rank loads that one, from its own run directory:
        // "" starts from step 0, and kRefused means rank 0 found none it could resume from (and
        // said why).
        static const std::string kRefused(1, '\x01');
        std::string choice;
        const std::string dir = (fs::path(args.run_dir) / "checkpoints").string();
        if (ranks.leader()) {
          if (runner::list_checkpoints(dir).empty()) {
            // Stopped before its first checkpoint (killed, or no checkpoint_every): nothing of the
            // run's state survives, so it starts again from step 0.
            std::cout << "no checkpoint in " << dir << " yet: starting the run from step 0 on "
                      << run.device << "\n"
                      << std::flush;
          } else {
            std::vector<std::string> refused;
            auto found = runner::latest_valid_checkpoint(dir, run.config_hash, &refused);
            // Each refusal reads "checkpoint '<path>': <why>".
            for (const auto& r : refused) std::cout << "refused newer " << r << "\n";
            if (!found) {
              print_error(
                  "no valid checkpoint to resume from in " + dir +
                  (refused.empty() ? "" : " (" + std::to_string(refused.size()) + " refused)"));
              choice = kRefused;
            } else {
              choice = fs::path(found->path).filename().string();
              std::cout << "resuming from " << found->path
                        << (refused.empty() ? " (the newest checkpoint)"
                                            : " (the newest valid checkpoint)")
                        << " on " << run.device;
              if (ranks.group) std::cout << " on " << ranks.group->size() << " ranks";
              std::cout << "\n" << std::flush;
            }
          }
        }
        choice = ranks.agree(choice);
        if (choice == kRefused) return kExitFailed;
        if (!choice.empty()) {
          choice = (fs::path(dir) / choice).string();
          // A rank whose host lacks the file (no shared filesystem) receives rank 0's copy.
          if (ranks.group) {
            const int sent = runner::share_file_from_rank0(*ranks.group, choice);
            if (sent > 0)
              ranks.out() << "sent " << fs::path(choice).filename().string() << " to " << sent
                          << (sent == 1 ? " rank" : " ranks") << " without it\n";
          }
        }
        return fit(run, args.run_dir, choice, args.quiet, ranks);
      },
      [&](const std::string& message) { ranks.error(message); });
}

}  // namespace mantissa::cli
