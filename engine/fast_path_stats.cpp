#include "engine/fast_path_stats.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>

#include "engine/environment.h"

namespace mantissa {
namespace {

// A live row: the pointers the kernels passed (string literals), found by address on the hot
// path; a second call site spelling the same name is found by content and shares the row.
struct Row {
  const char* path;
  PathOutcome outcome;
  const char* what;
  std::optional<DType> dtype;
  int64_t count;
  std::string message;
};

struct Table {
  std::mutex mutex;
  std::vector<Row> rows;
  std::vector<std::string> strict_paths;
  std::vector<std::string> disabled_paths;
};

Table& table() {
  static Table t;
  return t;
}

std::atomic<bool>& strict_flag() {
  static std::atomic<bool> flag{
      mantissa::detail::env_word("MANTISSA_STRICT_FAST_PATHS", {"0", "1"}) == 1};
  return flag;
}

Row& bump(Table& t, const char* path, PathOutcome outcome, const char* what,
          std::optional<DType> dtype) {
  for (Row& r : t.rows) {
    if (r.path == path && r.what == what && r.outcome == outcome && r.dtype == dtype) {
      ++r.count;
      return r;
    }
  }
  for (Row& r : t.rows) {
    if (r.outcome == outcome && r.dtype == dtype && std::strcmp(r.path, path) == 0 &&
        std::strcmp(r.what, what) == 0) {
      ++r.count;
      return r;
    }
  }
  t.rows.push_back(Row{path, outcome, what, dtype, 1, {}});
  return t.rows.back();
}

bool is_strict_path(const Table& t, std::string_view path) {
  for (const auto& p : t.strict_paths) {
    if (p == path) return true;
  }
  return false;
}

const char* outcome_name(PathOutcome o) {
  switch (o) {
    case PathOutcome::Ran:
      return "ran";
    case PathOutcome::FellBackByDesign:
      return "fell back";
    case PathOutcome::Refused:
      return "refused";
  }
  return "?";
}

}  // namespace

namespace {

// The counts of the rows of `path` that `take` accepts.
template <typename Take>
int64_t sum_rows(const std::vector<FastPathRow>& rows, std::string_view path, Take take) {
  int64_t n = 0;
  for (const auto& r : rows) {
    if (r.path == path && take(r)) n += r.count;
  }
  return n;
}

}  // namespace

int64_t FastPathStats::ran(std::string_view path, std::string_view what,
                           std::optional<DType> dtype) const {
  return sum_rows(rows_, path, [&](const FastPathRow& r) {
    return r.outcome == PathOutcome::Ran && r.what == what && (!dtype || r.dtype == dtype);
  });
}

int64_t FastPathStats::fell_back(std::string_view path, std::string_view reason) const {
  return sum_rows(rows_, path, [&](const FastPathRow& r) {
    return r.outcome != PathOutcome::Ran && (reason.empty() || r.what == reason);
  });
}

int64_t FastPathStats::refused(std::string_view path, std::string_view reason) const {
  return sum_rows(rows_, path, [&](const FastPathRow& r) {
    return r.outcome == PathOutcome::Refused && (reason.empty() || r.what == reason);
  });
}

std::string FastPathStats::to_string() const {
  std::ostringstream os;
  for (const auto& r : rows_) {
    os << r.path << ' ' << outcome_name(r.outcome) << ' ' << r.what;
    if (r.dtype) os << ' ' << dtype_name(*r.dtype);
    os << ": " << r.count << '\n';
  }
  return os.str();
}

FastPathStats fast_path_stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<FastPathRow> rows;
  rows.reserve(t.rows.size());
  for (const Row& r : t.rows)
    rows.push_back(FastPathRow{r.path, r.outcome, r.what, r.dtype, r.count, r.message});
  return FastPathStats(std::move(rows));
}

void reset_fast_path_stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.rows.clear();
}

bool strict_fast_paths() { return strict_flag().load(std::memory_order_relaxed); }
void set_strict_fast_paths(bool strict) { strict_flag().store(strict, std::memory_order_relaxed); }

bool strict_fast_path(std::string_view path) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return is_strict_path(t, path);
}

void set_strict_fast_path(std::string_view path, bool strict) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto& paths = t.strict_paths;
  std::erase(paths, std::string(path));
  if (strict) paths.emplace_back(path);
}

bool fast_path_enabled(std::string_view path) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return std::find(t.disabled_paths.begin(), t.disabled_paths.end(), path) ==
         t.disabled_paths.end();
}

void set_fast_path_enabled(std::string_view path, bool enabled) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::erase(t.disabled_paths, std::string(path));
  if (!enabled) t.disabled_paths.emplace_back(path);
}

namespace detail {

void count_fast_path(const char* path, const char* what, std::optional<DType> dtype) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  bump(t, path, PathOutcome::Ran, what, dtype);
}

bool count_fallback(const char* path, const char* reason, bool refusal, std::optional<DType> dtype,
                    std::string_view message) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Row& row =
      bump(t, path, refusal ? PathOutcome::Refused : PathOutcome::FellBackByDesign, reason, dtype);
  if (refusal && !message.empty()) row.message = std::string(message);
  return (refusal && strict_fast_paths()) || is_strict_path(t, path);
}

}  // namespace detail
}  // namespace mantissa
