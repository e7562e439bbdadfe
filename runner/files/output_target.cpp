#include "runner/files/output_target.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "runner/files/atomic_file.h"

namespace mantissa::runner {
namespace {

namespace fs = std::filesystem;

// What a run directory holds besides checkpoints/ (cli/train.cpp, runner/training/trainer.cpp,
// runner/training/metrics.cpp, runner/files/run_lock.cpp).
constexpr std::string_view kRunFiles[] = {"resolved.yaml", "metrics.jsonl", "train.log",
                                          "summary.json", ".lock"};

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  const bool same = fs::equivalent(a, b, ec);
  return !ec && same;
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw OutputRefused("refusing to write '" + path + "': " + why);
}

}  // namespace

void check_output_target(const std::string& path, const std::vector<std::string>& inputs,
                         bool force) {
  struct stat st {};
  const bool exists = ::lstat(path.c_str(), &st) == 0;
  if (exists && S_ISLNK(st.st_mode)) {
    if (force) return;  // the link is replaced; what it points to is never opened
    std::error_code ec;
    const fs::path to = fs::read_symlink(path, ec);
    refuse(path, "it is a symbolic link" + (ec ? std::string() : " (to '" + to.string() + "')") +
                     "; pass --force to replace the link itself (the file it points to is left "
                     "as it is)");
  }
  if (exists && !S_ISREG(st.st_mode)) {
    refuse(path, "it is " + file_type_name(st.st_mode) + ", not a regular file");
  }
  if (force) return;

  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  if (ec || abs.filename().empty()) return;  // write_file_atomically reports a bad name
  // The directories' own symbolic links resolved: "link-to-run/resolved.yaml" is the run's file.
  const fs::path dir = fs::weakly_canonical(abs.parent_path(), ec);
  if (ec) return;
  const std::string name = abs.filename().string();

  std::vector<fs::path> input_dirs;
  for (const std::string& in : inputs) {
    if (fs::is_directory(in, ec)) {
      input_dirs.emplace_back(in);
    } else if (exists && same_file(path, in)) {
      refuse(path, "it is " + (in == path ? std::string("the file") : "'" + in + "', the file") +
                       " this command reads; pass --force to replace it");
    }
  }
  auto is_run_dir = [&](const fs::path& d) {
    std::error_code e;
    if (fs::is_regular_file(d / "resolved.yaml", e)) return true;
    return std::any_of(input_dirs.begin(), input_dirs.end(),
                       [&](const fs::path& in) { return same_file(d, in); });
  };
  if (std::find(std::begin(kRunFiles), std::end(kRunFiles), name) != std::end(kRunFiles) &&
      is_run_dir(dir)) {
    refuse(path, "it is the " + name + " of the run in '" + dir.string() +
                     "'; pass --force to replace it");
  }
  if (dir.filename() == "checkpoints" && (is_run_dir(dir.parent_path()) || is_run_dir(dir))) {
    refuse(path, "it is in the checkpoints directory of the run in '" + dir.parent_path().string() +
                     "'; pass --force to write there");
  }
}

}  // namespace mantissa::runner
