#include "runner/training/distributed_run.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/error.h"
#include "engine/factory.h"
#include "nn/float8.h"
#include "runner/files/hash.h"

namespace mantissa::runner {

RankPlacement rank_placement() {
  const distributed::LaunchEnv env = distributed::read_launch_env();
  RankPlacement p;
  if (!env.rank || !env.world_size) return p;
  p.rank = *env.rank;
  p.world_size = *env.world_size;
  p.local_rank = env.local_rank.value_or(0);
  p.launcher = env.launcher;
  MT_CHECK(p.world_size >= 1 && p.rank >= 0 && p.rank < p.world_size, "distributed: rank ", p.rank,
           " from ", p.launcher, "'s environment is out of range for world size ", p.world_size);
  return p;
}

distributed::Backend resolve_backend(const DistributedConfig& config, Device device) {
  if (config.backend == "gloo") return distributed::Backend::Gloo;
  if (config.backend == "nccl") return distributed::Backend::Nccl;
  return device.is_cuda() ? distributed::Backend::Nccl : distributed::Backend::Gloo;
}

distributed::InitOptions init_options(const DistributedConfig& config, Device device,
                                      const RankPlacement& placement) {
  distributed::InitOptions o;
  o.backend = resolve_backend(config, device);
  o.rank = placement.rank;
  o.world_size = placement.world_size;
  o.local_rank = placement.local_rank;
  o.store_path = config.store_path;
  o.rendezvous = config.rendezvous == "mpi"    ? distributed::Rendezvous::Mpi
                 : config.rendezvous == "file" ? distributed::Rendezvous::File
                                               : distributed::Rendezvous::Auto;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.timeout_s * 1000.0));
  return o;
}

nn::DistributedDataParallelOptions ddp_options(const DistributedConfig& config) {
  nn::DistributedDataParallelOptions o;
  o.bucket_cap_mb = config.bucket_cap_mb;
  o.first_bucket_mb = config.first_bucket_mb;
  o.find_unused_parameters = config.find_unused_parameters;
  o.static_graph = config.static_graph;
  o.broadcast_buffers = config.broadcast_buffers;
  o.reduce_scatter_gradients = config.zero_stage == 2;
  return o;
}

namespace {

// Rank 0's data[0, n) into every rank's data[0, n) (a collective). Six bytes travel per float64,
// an integer below 2^48 and so exact: the process group moves floating-point tensors only.
void broadcast_bytes(distributed::ProcessGroup& group, char* data, size_t n) {
  const size_t words = (n + 5) / 6;
  std::vector<double> packed(words, 0.0);
  if (group.rank() == 0) {
    for (size_t w = 0; w < words; ++w) {
      uint64_t v = 0;
      for (size_t k = 0; k < 6 && 6 * w + k < n; ++k)
        v |= static_cast<uint64_t>(static_cast<unsigned char>(data[6 * w + k])) << (8 * k);
      packed[w] = static_cast<double>(v);
    }
  }
  Tensor t = from_vector(packed, Shape{static_cast<int64_t>(words)}).to(group.device());
  group.broadcast(t, 0)->wait();
  if (group.rank() == 0) return;
  const std::vector<double> got = t.cpu().to_vector<double>();
  for (size_t w = 0; w < words; ++w) {
    const auto v = static_cast<uint64_t>(got[w]);
    for (size_t k = 0; k < 6 && 6 * w + k < n; ++k)
      data[6 * w + k] = static_cast<char>((v >> (8 * k)) & 0xff);
  }
}

// The sum of every rank's `value` (a collective).
double sum_over_ranks(distributed::ProcessGroup& group, double value) {
  Tensor t = from_vector(std::vector<double>{value}).to(group.device());
  group.allreduce(t)->wait();
  return t.cpu().item<double>();
}

}  // namespace

std::string broadcast_string(distributed::ProcessGroup& group, const std::string& value) {
  // The length first (a float64, exact), then the bytes.
  Tensor length =
      from_vector(std::vector<double>{static_cast<double>(value.size())}).to(group.device());
  group.broadcast(length, 0)->wait();
  const auto n = static_cast<size_t>(length.cpu().item<double>());
  std::string out = group.rank() == 0 ? value : std::string(n, '\0');
  if (n > 0) broadcast_bytes(group, out.data(), n);
  return out;
}

std::string run_config_note_key() {
  std::string key = "mantissa_run_config";
  for (const char* name : {"TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_RESTART_COUNT"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    key += '_';
    for (const char* c = v; *c != '\0'; ++c)
      key += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '-';
  }
  return key;
}

namespace {

// "SIZE HASH" of a file (FNV-1a 64 of its bytes), read in 1 MiB blocks.
std::string file_fingerprint(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  MT_CHECK(f != nullptr, "cannot read '", path, "': ", std::strerror(errno));
  Fnv1a64 h;
  uint64_t size = 0;
  std::vector<char> block(size_t{1} << 20);
  for (size_t n; (n = std::fread(block.data(), 1, block.size(), f)) > 0;) {
    h.add(block.data(), n);
    size += n;
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  MT_CHECK(!failed, "error reading '", path, "'");
  return std::to_string(size) + " " + h.hex();
}

// Every rank's `ok` together: true when all are. A collective.
bool all_ok(distributed::ProcessGroup& group, bool ok) {
  return sum_over_ranks(group, ok ? 0.0 : 1.0) == 0.0;
}

}  // namespace

int share_file_from_rank0(distributed::ProcessGroup& group, const std::string& path) {
  namespace fs = std::filesystem;
  const bool root = group.rank() == 0;
  const std::string what = "sharing '" + path + "' from rank 0";
  // Rank 0's size and hash, or why it cannot send: every rank learns it before any byte moves.
  std::string info;
  if (root) {
    try {
      info = file_fingerprint(path);
    } catch (const std::exception& e) {
      info = std::string(1, '!') + e.what();
    }
  }
  info = broadcast_string(group, info);
  MT_CHECK(info.empty() || info[0] != '!', what, ": rank 0: ", info.substr(1));
  const uint64_t size = std::stoull(info.substr(0, info.find(' ')));
  // A rank whose file differs (another run's, a partial copy) takes rank 0's too.
  std::string problem;
  bool need = false;
  std::FILE* out = nullptr;
  fs::path tmp;
  if (!root) {
    try {
      std::error_code ec;
      need = !fs::is_regular_file(path, ec) || file_fingerprint(path) != info;
      if (need) {
        const fs::path target(path);
        if (target.has_parent_path()) {
          fs::create_directories(target.parent_path(), ec);
          MT_CHECK(!ec, "cannot create '", target.parent_path().string(), "': ", ec.message());
        }
        std::string name = ".";  // runner/files/atomic_file.h's temporary names, which readers skip
        name += target.filename().string();
        name += ".tmp-";
        name += std::to_string(::getpid());
        tmp = target.parent_path() / name;
        out = std::fopen(tmp.c_str(), "wb");
        MT_CHECK(out != nullptr, "cannot write '", tmp.string(), "': ", std::strerror(errno));
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  const auto discard = [&] {
    if (out != nullptr) std::fclose(out);
    out = nullptr;
    std::error_code ignored;
    if (!tmp.empty()) fs::remove(tmp, ignored);
  };
  if (!all_ok(group, problem.empty())) {
    discard();
    MT_THROW(what, ": ", problem.empty() ? "another rank could not take it" : problem);
  }
  const auto receivers = static_cast<int>(sum_over_ranks(group, need ? 1.0 : 0.0));
  if (receivers == 0) return 0;
  // A rank that fails part way keeps taking part in every chunk (so no rank waits on it) and says
  // so at the end.
  constexpr uint64_t kChunk = uint64_t{48} << 20;
  std::FILE* in = nullptr;
  if (root) {
    in = std::fopen(path.c_str(), "rb");
    if (in == nullptr) problem = "cannot read it: " + std::string(std::strerror(errno));
  }
  std::vector<char> bytes;
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(kChunk, size - done);
    bytes.assign(n, '\0');  // what rank 0 sends once it has failed
    if (root && problem.empty() && std::fread(bytes.data(), 1, n, in) != n) {
      problem = "it ended early or could not be read (was it changed while being sent?)";
      bytes.assign(n, '\0');
    }
    broadcast_bytes(group, bytes.data(), n);
    if (out != nullptr && problem.empty() && std::fwrite(bytes.data(), 1, n, out) != n)
      problem = "error writing '" + tmp.string() + "': " + std::strerror(errno);
    done += n;
  }
  if (in != nullptr) std::fclose(in);
  if (out != nullptr && problem.empty()) {
    // On disk before it takes the file's name: a crash leaves the temporary, never a torn copy.
    const bool written = std::fflush(out) == 0 && ::fsync(fileno(out)) == 0;
    std::fclose(out);
    out = nullptr;
    std::error_code ec;
    if (!written) {
      problem = "error writing '" + tmp.string() + "': " + std::strerror(errno);
    } else {
      fs::rename(tmp, path, ec);
      if (ec) problem = "cannot rename '" + tmp.string() + "' to '" + path + "': " + ec.message();
    }
  }
  if (!problem.empty()) discard();
  MT_CHECK(all_ok(group, problem.empty()), what, ": ",
           problem.empty() ? "another rank failed to send or receive it" : problem);
  return receivers;
}

std::string check_ranks_agree_on_state(distributed::ProcessGroup& group, nn::Module& model,
                                       const amp::GradScaler* scaler) {
  Fnv1a64 h;
  auto add = [&h](const std::vector<std::pair<std::string, Tensor>>& named) {
    for (const auto& [name, t] : named) {
      const Tensor c = t.detach().cpu().contiguous();
      h.add(name);
      h.add(c.data_ptr(), static_cast<size_t>(c.nbytes()));
    }
  };
  add(model.named_parameters());
  add(model.named_buffers());
  for (const auto& [name, layer] : nn::float8_delayed_layers(model))
    add({{name + ".float8_amax_history", layer->float8_amax_history},
         {name + ".float8_scale", layer->float8_scale}});
  if (const auto st = scaler != nullptr ? scaler->state_dict() : std::nullopt) {
    for (const double v : {st->scale, st->growth_factor, st->backoff_factor, st->min_scale})
      h.add(&v, sizeof v);
    for (const int64_t v : {st->growth_interval, st->growth_tracker, st->hysteresis,
                            st->overflow_streak, st->steps_taken, st->steps_skipped})
      h.add(&v, sizeof v);
  }
  // Two 32-bit halves, each exact in float64; their max and -min over ranks agree iff every
  // rank's hash is the same.
  const uint64_t v = h.value();
  const double hi = static_cast<double>(v >> 32), lo = static_cast<double>(v & 0xffffffffu);
  Tensor t = from_vector(std::vector<double>{hi, lo, -hi, -lo}, Shape{4}).to(group.device());
  group.allreduce(t, distributed::ReduceOp::Max)->wait();
  const auto r = t.cpu().to_vector<double>();
  MT_CHECK(r[0] == -r[2] && r[1] == -r[3],
           "distributed: the ranks' parameters, buffers or loss scaler differ at the end ",
           "of the run (rank ", group.rank(), " of ", group.size(), " has hash ", h.hex(),
           "); they were not kept in sync");
  return h.hex();
}

}  // namespace mantissa::runner
