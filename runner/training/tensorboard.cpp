// TensorBoard event files: TFRecord framing around Event protocol buffers.
#include "runner/training/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "engine/error.h"
#include "runner/files/atomic_file.h"
#include "runner/training/tensorboard_event.pb.h"

namespace mantissa::runner {

namespace fs = std::filesystem;
namespace pb = mantissa::tensorboard;

namespace {

// The reflected Castagnoli polynomial's byte table.
std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t load_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

uint32_t load_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void store_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

// One TFRecord: length, masked CRC of the length, data, masked CRC of the data.
std::string frame_record(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  store_le(out, payload.size(), 8);
  store_le(out, masked_crc32c(std::string_view(out.data(), 8)), 4);
  out += payload;
  store_le(out, masked_crc32c(payload), 4);
  return out;
}

// Calls f(record bytes, parsed event) for each whole record of `bytes` whose data is an Event,
// stopping as parse_tensorboard_events describes.
template <typename F>
void for_each_record(std::string_view bytes, F&& f) {
  size_t at = 0;
  while (bytes.size() - at >= 12) {
    const char* p = bytes.data() + at;
    if (masked_crc32c(std::string_view(p, 8)) != load_u32(p + 8)) return;
    const uint64_t length = load_u64(p);
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4) return;
    const std::string_view data(p + 12, length);
    const std::string_view record(p, 16 + length);
    at += 16 + length;
    if (length > static_cast<uint64_t>(INT32_MAX)) continue;  // more than a protobuf can be
    if (masked_crc32c(data) != load_u32(p + 12 + length)) continue;
    pb::Event event;
    if (!event.ParseFromArray(data.data(), static_cast<int>(data.size()))) continue;
    f(record, event);
  }
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool is_event_file(const fs::path& p) {
  return p.filename().string().find("tfevents") != std::string::npos &&
         !is_atomic_temp_name(p.filename().string());
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  uint32_t c = 0xffffffffu;
  for (const char b : bytes) c = table[(c ^ static_cast<unsigned char>(b)) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view bytes) { return mask(crc32c(bytes)); }

std::vector<TensorBoardEvent> parse_tensorboard_events(std::string_view bytes) {
  std::vector<TensorBoardEvent> events;
  for_each_record(bytes, [&](std::string_view, const pb::Event& e) {
    TensorBoardEvent out;
    out.wall_time = e.wall_time();
    out.step = e.step();
    switch (e.what_case()) {
      case pb::Event::kFileVersion:
        out.kind = TensorBoardEvent::Kind::FileVersion;
        out.file_version = e.file_version();
        break;
      case pb::Event::kSummary:
        out.kind = TensorBoardEvent::Kind::Scalars;
        for (const auto& v : e.summary().value()) {
          if (v.value_case() == pb::SummaryValue::kSimpleValue)
            out.scalars.push_back({v.tag(), v.simple_value()});
        }
        break;
      case pb::Event::kSessionLog:
        if (e.session_log().status() == pb::SessionLog::START)
          out.kind = TensorBoardEvent::Kind::SessionStart;
        break;
      default:
        break;
    }
    events.push_back(std::move(out));
  });
  return events;
}

std::vector<TensorBoardEvent> read_tensorboard_events(const std::string& path) {
  return parse_tensorboard_events(read_file_bytes(path));
}

std::vector<std::string> tensorboard_event_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  fs::directory_iterator it(dir, ec), end;
  MT_CHECK(!ec, "tensorboard: cannot list '", dir, "': ", ec.message());
  for (; it != end; it.increment(ec)) {
    MT_CHECK(!ec, "tensorboard: cannot list '", dir, "': ", ec.message());
    std::error_code type;
    if (it->is_regular_file(type) && is_event_file(it->path())) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void keep_tensorboard_events_through_step(const std::string& dir, int64_t step) {
  for (const std::string& file : tensorboard_event_files(dir)) {
    if (step <= 0) {
      std::error_code ec;
      fs::remove(file, ec);
      MT_CHECK(!ec, "tensorboard: cannot remove '", file, "': ", ec.message());
      continue;
    }
    std::string kept;
    for_each_record(read_file_bytes(file), [&](std::string_view record, const pb::Event& e) {
      if (e.step() <= step) kept += record;
    });
    write_file_atomically(file, kept);
  }
}

TensorBoardWriter::TensorBoardWriter(std::string dir) : dir_(std::move(dir)) {}

void TensorBoardWriter::on_train_begin(Trainer& trainer) {
  keep_tensorboard_events_through_step(dir_, trainer.step());
  std::error_code ec;
  fs::create_directories(dir_, ec);
  MT_CHECK(!ec, "tensorboard: cannot create '", dir_, "': ", ec.message());
  // TensorBoard's naming (events.out.tfevents.SECONDS.HOST...): files sort by their session's
  // start, the order TensorBoard reads them in.
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const auto seconds = static_cast<int64_t>(unix_seconds());
  for (int n = 0;; ++n) {
    const fs::path p =
        fs::path(dir_) / ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." +
                          std::to_string(getpid()) + "." + std::to_string(n) + ".mantissa");
    if (!fs::exists(p, ec)) {
      path_ = p.string();
      break;
    }
  }
  out_.open(path_, std::ios::out | std::ios::binary | std::ios::trunc);
  MT_CHECK(out_.good(), "tensorboard: cannot open '", path_, "' for writing");
  pb::Event version;
  version.set_wall_time(unix_seconds());
  version.set_file_version("brain.Event:2");
  write_event(version.SerializeAsString());
  if (trainer.step() > 0) {
    pb::Event restart;
    restart.set_wall_time(unix_seconds());
    restart.set_step(trainer.step() + 1);
    restart.mutable_session_log()->set_status(pb::SessionLog::START);
    write_event(restart.SerializeAsString());
  }
}

void TensorBoardWriter::write_event(const std::string& payload) {
  const std::string record = frame_record(payload);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  MT_CHECK(out_.good(), "tensorboard: error writing '", path_, "'");
}

namespace {

void add(pb::Summary* s, const char* tag, double value) {
  auto* v = s->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
}

}  // namespace

void TensorBoardWriter::on_step_end(Trainer&, const StepMetrics& m) {
  pb::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(m.step);
  pb::Summary* s = e.mutable_summary();
  add(s, "train/loss", m.loss);
  add(s, "train/lr", m.lr);
  add(s, "train/loss_scale", m.loss_scale);
  if (!std::isnan(m.grad_norm)) add(s, "train/grad_norm", m.grad_norm);
  add(s, "train/samples_per_s", m.samples_per_s);
  add(s, "train/step_time_ms", m.step_time_ms);
  if (m.tokens_per_s > 0) add(s, "train/tokens_per_s", m.tokens_per_s);
  if (m.mfu) add(s, "train/mfu", *m.mfu);
  add(s, "train/skipped_steps", static_cast<double>(m.skipped_total));
  for (const nn::Float8LayerStats& l : m.float8) {
    for (int r = 0; r < 3; ++r) {
      const nn::Float8TensorStats& t = l.tensors[r];
      const std::string tag = "float8/" + l.layer + "/" + nn::kFloat8TensorNames[r] + "/";
      add(s, (tag + "amax").c_str(), t.amax);
      if (t.scale > 0) add(s, (tag + "scale").c_str(), t.scale);
      add(s, (tag + "saturated").c_str(), static_cast<double>(t.saturated));
      add(s, (tag + "flushed").c_str(), static_cast<double>(t.flushed));
    }
  }
  write_event(e.SerializeAsString());
}

void TensorBoardWriter::on_eval(Trainer&, const EvalMetrics& m) {
  pb::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(m.step);
  pb::Summary* s = e.mutable_summary();
  add(s, "eval/loss", m.loss);
  if (m.accuracy) add(s, "eval/accuracy", *m.accuracy);
  write_event(e.SerializeAsString());
}

}  // namespace mantissa::runner
