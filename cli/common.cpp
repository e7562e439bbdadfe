#include <filesystem>
#include <iostream>

#include "cli/cli.h"
#include "cli/default_config.h"
#include "engine/error.h"
#include "runner/config/config.h"
#include "runner/files/output_target.h"
#include "runner/files/run_lock.h"
#include "runner/text/bpe_tokenizer.h"
#include "runner/training/checkpoint.h"

namespace mantissa::cli {

namespace fs = std::filesystem;

void print_error(const std::string& message) {
  std::cerr << "mantissa: " << message.substr(0, message.find('\n')) << "\n";
}

int reporting_errors(const std::function<int()>& body,
                     const std::function<void(const std::string&)>& report) {
  try {
    return body();
  } catch (const runner::ConfigError& e) {
    report(e.what());
    return kExitUsage;
  } catch (const runner::OutputRefused& e) {
    report(e.what());
    return kExitUsage;
  } catch (const runner::RunDirInUse& e) {
    report(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    report(e.what());
    return kExitFailed;
  }
}

const char* default_config_yaml() { return kDefaultConfigYaml; }

std::string resolve_checkpoint(const std::string& source, bool verbose) {
  std::error_code ec;
  if (!fs::exists(source, ec))
    MT_THROW("'", source, "' does not exist (expected a run directory or a checkpoint file)");
  if (!fs::is_directory(source, ec)) return source;
  const std::string dir = fs::is_directory(fs::path(source) / "checkpoints", ec)
                              ? (fs::path(source) / "checkpoints").string()
                              : source;
  std::vector<std::string> refused;
  auto choice = runner::latest_valid_checkpoint(dir, &refused);
  if (verbose) {
    for (const auto& r : refused) std::cerr << "mantissa: refused newer " << r << "\n";
  }
  if (!choice) {
    MT_THROW(
        "no valid checkpoint in ", dir,
        refused.empty() ? " (it has none)" : " (" + std::to_string(refused.size()) + " refused)");
  }
  return choice->path;
}

runner::Config checkpoint_config(const std::string& checkpoint, std::vector<std::string> sets,
                                 const std::string& device) {
  const runner::CheckpointInfo info = runner::read_checkpoint(checkpoint);
  if (!device.empty()) sets.push_back("device=" + device);
  return runner::parse_config(info.config_text, checkpoint + " (its config)", sets);
}

void load_checkpoint_model(const std::string& checkpoint, nn::Module& model) {
  runner::CheckpointParts parts;
  parts.model = &model;
  parts.rng = false;
  runner::load_checkpoint(checkpoint, parts);
}

std::shared_ptr<const runner::BpeTokenizer> run_tokenizer(const runner::Config& config,
                                                          const std::string& what) {
  if (config.data.type == "text") return nullptr;
  if (config.data.type != "tokens_bin") {
    throw runner::ConfigError(what +
                              " decodes bytes (data.type text) or the tokens of a "
                              "tokens_bin run with data.tokenizer, but the run's data.type is " +
                              config.data.type);
  }
  const std::string path = config.data.tokenizer();
  if (path.empty()) {
    throw runner::ConfigError(what +
                              " needs the run's tokenizer to decode its tokens: data.tokenizer "
                              "is not set (a tokenizer.json, vocab.json or their folder)");
  }
  try {
    return std::make_shared<const runner::BpeTokenizer>(runner::BpeTokenizer::load(path));
  } catch (const Error& e) {
    throw runner::ConfigError("data.tokenizer: " + std::string(e.what()));
  }
}

}  // namespace mantissa::cli
