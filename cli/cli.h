// The `mantissa` command: one function per subcommand, shared helpers. Exit codes: 0 success,
// 1 a failure while running (I/O, a refused checkpoint, a numerical error), 2 a bad command line
// or config (reported before anything runs or any file is written).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mantissa::nn {
class Module;
}
namespace mantissa::runner {
struct Config;
class BpeTokenizer;
}  // namespace mantissa::runner

namespace mantissa::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

struct TrainArgs {
  std::string config;  // empty: the built-in default (configs/toy.yaml)
  std::vector<std::string> sets;
  std::string device;
  std::string run_dir;
  int nproc = 0;  // > 0: distributed.nproc
  bool dry_run = false;
  bool quiet = false;
};
int train(const TrainArgs& args);

struct ResumeArgs {
  std::string run_dir;
  std::string device;
  int nproc = 0;  // > 0: on this many local ranks instead of the run's distributed.nproc
  bool quiet = false;
};
int resume(const ResumeArgs& args);

struct EvalArgs {
  std::string source;  // run dir or checkpoint
  std::string data;    // train | val | a .csv / .safetensors path; empty: val if any, else train
  std::vector<std::string> sets;
  std::string device;
  bool json = false;
};
int eval(const EvalArgs& args);

// `force`: also replace a symbolic link or a file of a run (runner/files/output_target.h). `layout`
// "hf": a GPT run's weights as Hugging Face GPT-2 (OUT a directory: model.safetensors and
// config.json).
int export_weights(const std::string& source, const std::string& out, bool force = false,
                   const std::string& layout = "mantissa");

struct ImportArgs {
  std::string path;
  std::string config;  // optional: check the weights load into this config's model
  std::vector<std::string> sets;
  // A GPT state dict: "nanogpt", "hf" or "auto" converts it to nn::GPT's names and layout
  // (runner/files/gpt_weights.h); empty: list the file as it is.
  std::string layout;
  std::string out;  // with layout: write the converted weights here
  bool force = false;
};
int import_weights(const ImportArgs& args);

int devices();

// Starts `nproc` local ranks: this program with `args`, each with the torchrun variables (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and, with `make_store`, a
// fresh MANTISSA_STORE_PATH. Waits for them, forwards SIGINT/SIGTERM/SIGHUP, and when one fails
// stops the others (SIGTERM, then SIGKILL after a grace period) and prints one line naming it.
// Returns the exit status for the launcher (cli/launch.cpp).
int launch_local_ranks(int nproc, const std::vector<std::string>& args, bool make_store);

int plot(const std::string& run_dir, const std::string& out, bool force = false);

struct GenerateArgs {
  std::string run_dir;  // or a checkpoint file
  std::string prompt;
  int64_t tokens = 256;
  double temperature = 1.0;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  std::string device;
};
int generate(const GenerateArgs& args);

struct PrepareArgs {
  std::string text;       // the text file
  std::string tokenizer;  // tokenizer.json, vocab.json (+ merges.txt) or their folder
  std::string out_dir;    // default: the text file's folder
  double val_fraction = 0.1;
};
int prepare(const PrepareArgs& args);

// ---- helpers (common.cpp) ----
// "mantissa: <message>" on stderr (the message's first line only: errors are one line).
void print_error(const std::string& message);
// Runs a command's `body` (which returns its exit code) and turns what it throws into one line
// (`report`, print_error by default) and an exit code: a bad input — a config key or argument
// (runner::ConfigError), an output that would replace what it should not (OutputRefused), a run
// directory another run holds (RunDirInUse) — is kExitUsage, anything else kExitFailed.
int reporting_errors(const std::function<int()>& body,
                     const std::function<void(const std::string&)>& report = print_error);
// A checkpoint path from a run dir (its newest valid checkpoint, printing why newer ones were
// refused) or a checkpoint file. Throws mantissa::Error when there is none.
std::string resolve_checkpoint(const std::string& source, bool verbose = true);
// The config `checkpoint` was trained with, its `sets` overrides applied and then, when `device`
// is not empty, device=<device>. Throws runner::ConfigError for a bad override.
runner::Config checkpoint_config(const std::string& checkpoint, std::vector<std::string> sets,
                                 const std::string& device);
// Restores only the model's weights from `checkpoint`: not the generators, since eval and
// generate draw from their own seeds.
void load_checkpoint_model(const std::string& checkpoint, nn::Module& model);
// The tokenizer a GPT run's text goes through: null for data.type text (bytes), data.tokenizer's
// for tokens_bin. Throws runner::ConfigError naming the key when the run has no tokenizer
// (another dataset, or tokens_bin without data.tokenizer); `what` names the command.
std::shared_ptr<const runner::BpeTokenizer> run_tokenizer(const runner::Config& config,
                                                          const std::string& what);
// The built-in default config's YAML text.
const char* default_config_yaml();

}  // namespace mantissa::cli
