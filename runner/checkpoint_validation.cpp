// What read_checkpoint checks beyond the file's integrity: the checksum proves the bytes are the
// ones written, not that the values make sense — a file can be rewritten with a recomputed
// checksum, or a good file copied under another step's name. So a checkpoint must record a config
// hash, a trainer state's counters must be in range, and a file named step-<N>.ckpt must hold
// step N. The rules are listed in docs/checkpoints.md ("Validation").
#include <charconv>
#include <filesystem>
#include <limits>
#include <string_view>

#include "runner/checkpoint.h"

namespace mantissa::runner {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// obj[field], when present, as an integer in [lo, hi]; `range` is the bound as the message
// states it ("an integer >= 0", "an integer in [0, step + 1 = 6]").
std::optional<int64_t> int_field(const std::string& what, const Json& obj, const std::string& name,
                                 const char* field, int64_t lo, int64_t hi,
                                 const std::string& range) {
  const Json* v = obj.find(field);
  if (v == nullptr) return std::nullopt;
  MT_CHECK(v->is_int() && v->as_int() >= lo && v->as_int() <= hi, what, ": ", name, ".", field,
           " is ", v->dump(), "; expected ", range);
  return v->as_int();
}

std::string up_to(const char* bound, int64_t value) {
  return "an integer in [0, " + std::string(bound) + " = " + std::to_string(value) + "]";
}

}  // namespace

std::optional<int64_t> checkpoint_filename_step(const std::string& path) {
  // "step-<digits>.ckpt"
  const std::string filename = std::filesystem::path(path).filename().string();
  constexpr std::string_view pre = "step-", suf = ".ckpt";
  if (filename.size() <= pre.size() + suf.size() || !filename.starts_with(pre) ||
      !filename.ends_with(suf))
    return std::nullopt;
  const std::string_view digits(filename.data() + pre.size(),
                                filename.size() - pre.size() - suf.size());
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

void validate_checkpoint_info(const CheckpointInfo& info) {
  const std::string what = "checkpoint '" + info.path + "'";
  MT_CHECK(!info.config_hash.empty(), what,
           ": config_hash is empty (every checkpoint records the hash of its config)");
  const Json& s = info.trainer_state;
  MT_CHECK(s.is_null() || s.is_object(), what, ": trainer_state is ", s.dump(),
           "; expected a JSON object");
  const Json none = Json::object();
  const Json& state = s.is_object() ? s : none;

  // step + 1 bounds the epoch and the loader's position: every epoch after the first begins with
  // a step, and every batch taken is a step.
  const std::optional<int64_t> step =
      int_field(what, state, "trainer_state", "step", 0, kMaxInt - 1, "an integer >= 0");
  const int64_t limit = step ? *step + 1 : kMaxInt;
  const std::string to_limit = step ? up_to("step + 1", limit) : "an integer >= 0";
  const std::string to_step = step ? up_to("step", *step) : "an integer >= 0";
  const std::optional<int64_t> epoch =
      int_field(what, state, "trainer_state", "epoch", 0, limit, to_limit);
  int_field(what, state, "trainer_state", "steps_skipped", 0, step.value_or(kMaxInt), to_step);
  int_field(what, state, "trainer_state", "pending_loss_count", 0, step.value_or(kMaxInt), to_step);
  int_field(what, state, "trainer_state", "pending_samples", 0, kMaxInt, "an integer >= 0");
  if (const Json* t = state.find("wall_time_s")) {
    MT_CHECK(t->is_number() && t->as_double() >= 0.0, what, ": trainer_state.wall_time_s is ",
             t->dump(), "; expected a number >= 0");
  }
  if (const Json* loader = state.find("loader")) {
    MT_CHECK(loader->is_object(), what, ": trainer_state.loader is ", loader->dump(),
             "; expected a JSON object");
    const std::optional<int64_t> loader_epoch =
        int_field(what, *loader, "trainer_state.loader", "epoch", 0, limit, to_limit);
    int_field(what, *loader, "trainer_state.loader", "index", 0, limit, to_limit);
    MT_CHECK(!loader_epoch || !epoch || *loader_epoch == *epoch, what,
             ": trainer_state.loader.epoch is ", loader_epoch.value_or(0),
             " but trainer_state.epoch is ", epoch.value_or(0), "; expected them equal");
  }

  // The name is what list_checkpoints sorts by and prune_checkpoints goes by: a file named for
  // step N must hold step N, so a renamed copy cannot stand in for another step.
  if (const std::optional<int64_t> named = checkpoint_filename_step(info.path)) {
    MT_CHECK(step.has_value(), what, ": its name says step ", *named,
             " but its trainer state has no step");
    MT_CHECK(*step == *named, what, ": its name says step ", *named,
             " but its trainer state holds step ", *step, " (a renamed or misnamed file)");
  }
}

}  // namespace mantissa::runner
