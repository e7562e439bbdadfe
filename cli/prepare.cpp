// `mantissa prepare`: nanoGPT's train.bin / val.bin from a text file and a BPE tokenizer.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/cli.h"
#include "engine/error.h"
#include "runner/config/config.h"
#include "runner/files/atomic_file.h"
#include "runner/text/bpe_tokenizer.h"
#include "runner/text/prepare_tokens.h"
#include "runner/training/progress.h"

namespace mantissa::cli {

namespace fs = std::filesystem;

namespace {

// "encoding: 45% of 27.1 MB, 13.2 MB/s, 2.1s left" on stderr: redrawn on a terminal at most ten
// times a second, else a line every ten seconds. Nothing for a text encoded within a second.
class EncodeProgress {
 public:
  EncodeProgress() : tty_(isatty(fileno(stderr)) != 0), start_(Clock::now()), last_(start_) {}
  void operator()(size_t done, size_t total) {
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double since = std::chrono::duration<double>(now - last_).count();
    const bool final = done >= total;
    if (elapsed < 1.0 || (!final && since < (tty_ ? 0.1 : 10.0))) return;
    if (final && !drawn_) return;
    last_ = now;
    drawn_ = true;
    const double rate = static_cast<double>(done) / elapsed;
    const double left = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
    std::fprintf(stderr, "%sencoding: %3.0f%% of %.1f MB, %.1f MB/s, %s left%s", tty_ ? "\r" : "",
                 total ? 100.0 * static_cast<double>(done) / total : 100.0,
                 static_cast<double>(total) / 1e6, rate / 1e6,
                 runner::format_duration(left).c_str(), tty_ && !final ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  Clock::time_point start_, last_;
  bool drawn_ = false;
};

}  // namespace

int prepare(const PrepareArgs& args) {
  std::optional<runner::BpeTokenizer> tokenizer;
  std::string text;
  fs::path out_dir;
  return reporting_errors([&]() -> int {
    if (!(args.val_fraction >= 0 && args.val_fraction < 1)) {
      throw runner::ConfigError("--val-fraction must be in [0, 1), got " +
                                std::to_string(args.val_fraction));
    }
    if (const std::string problem = runner::regular_file_problem(args.text); !problem.empty())
      throw runner::ConfigError(args.text + ": " + problem);
    std::error_code ec;
    if (!fs::exists(args.tokenizer, ec))
      throw runner::ConfigError("--tokenizer " + args.tokenizer + ": no such file or folder");
    out_dir = args.out_dir.empty() ? fs::path(args.text).parent_path() : fs::path(args.out_dir);
    if (out_dir.empty()) out_dir = ".";
    if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
      throw runner::ConfigError("--out " + out_dir.string() + " is not a folder");
    try {
      tokenizer = runner::BpeTokenizer::load(args.tokenizer);
    } catch (const Error& e) {
      throw runner::ConfigError(e.what());
    }
    if (tokenizer->vocab_size() > 65536) {
      throw runner::ConfigError("--tokenizer " + args.tokenizer + ": its vocabulary (" +
                                std::to_string(tokenizer->vocab_size()) +
                                " tokens) does not fit train.bin's uint16 ids");
    }
    text = runner::read_file_bytes(args.text);
    EncodeProgress progress;
    const runner::TrainValTokens split =
        runner::tokenize_train_val(text, *tokenizer, args.val_fraction, std::ref(progress));
    if (split.replaced > 0) {
      std::cerr << "mantissa: " << args.text << " is not all UTF-8: " << split.replaced
                << " ill-formed byte sequences were read as U+FFFD (as Python's "
                   "errors=\"replace\" and Hugging Face tokenizers read them)\n";
    }
    // Both files are made before either is written, so an id that does not fit writes nothing.
    const std::string train = runner::uint16_token_bytes(split.train, "train.bin");
    const std::string val = runner::uint16_token_bytes(split.val, "val.bin");
    std::error_code made;
    fs::create_directories(out_dir, made);
    if (made) throw Error("cannot create '" + out_dir.string() + "': " + made.message());
    const fs::path train_path = out_dir / "train.bin", val_path = out_dir / "val.bin";
    runner::write_file_atomically(train_path.string(), train);
    if (!split.val.empty()) {
      runner::write_file_atomically(val_path.string(), val);
    } else if (fs::exists(val_path, ec)) {
      std::cerr << "mantissa: " << val_path.string()
                << " was left as it was (--val-fraction 0 writes no val.bin)\n";
    }
    std::cout << train_path.string() << ": " << split.train.size() << " tokens ("
              << split.train_chars << " characters)\n";
    if (!split.val.empty()) {
      std::cout << val_path.string() << ": " << split.val.size() << " tokens (" << split.val_chars
                << " characters)\n";
    }
    const fs::path tok = fs::absolute(args.tokenizer).lexically_normal();
    std::cout << "vocabulary: " << tokenizer->vocab_size() << " tokens; train on it with\n"
              << "  data: {type: tokens_bin, path: "
              << fs::absolute(train_path).lexically_normal().string();
    if (!split.val.empty())
      std::cout << ", val_path: " << fs::absolute(val_path).lexically_normal().string();
    std::cout << ", tokenizer: " << tok.string() << "}\n"
              << "  model: {preset: gpt, vocab_size: " << tokenizer->vocab_size()
              << "} (or more)\n";
    return kExitOk;
  });
}

}  // namespace mantissa::cli
