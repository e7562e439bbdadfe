// Shared by the fuzz targets (docs/fuzzing.md): a private scratch directory for the readers that
// take a path, and the rule every target follows: a mantissa::Error (ConfigError included) is a
// clean refusal of a malformed input; anything else escaping the reader — another exception type,
// a crash, a sanitizer report, a huge allocation — is a finding, so nothing else is caught.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "engine/logging.h"
#include "runner/data/data.h"

namespace mantissa::fuzz {

// A directory of this process's own under $TMPDIR (libFuzzer's -fork/-jobs workers each get one),
// removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/mantissa-fuzz-XXXXXX";
    if (::mkdtemp(path_.data()) == nullptr) {
      std::perror("mantissa fuzz: mkdtemp");
      std::abort();
    }
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `bytes` to `name` in the scratch directory (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  static const ScratchDir dir;
  const std::string path = dir.path() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      std::fclose(f) != 0) {
    std::perror(("mantissa fuzz: writing " + path).c_str());
    std::abort();
  }
  return path;
}

// Every example of a dataset in one batch: what a data loader would read of it.
inline void gather_every_example(const runner::Dataset& dataset) {
  std::vector<int64_t> all(static_cast<size_t>(dataset.size()));
  std::iota(all.begin(), all.end(), int64_t{0});
  (void)dataset.get_batch(all);
}

// The readers may log warnings; a fuzzer prints enough already.
inline void quiet() { set_log_level("off"); }

// A clean refusal. With MANTISSA_FUZZ_VERBOSE set, its message is printed (to check that the seed
// inputs are accepted, or why one is not).
inline void refused(const std::exception& e) {
  static const bool verbose = std::getenv("MANTISSA_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
}

// A broken invariant the reader itself cannot see (e.g. a round trip that fails): reported like a
// crash, with the message.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "mantissa fuzz: FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace mantissa::fuzz
