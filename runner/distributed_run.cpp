#include "runner/distributed_run.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/error.h"
#include "engine/factory.h"
#include "runner/hash.h"

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

std::string broadcast_string(distributed::ProcessGroup& group, const std::string& value) {
  // Bytes travel as float64 values (each exact), the length first: the process group moves
  // floating-point tensors only.
  Tensor length =
      from_vector(std::vector<double>{static_cast<double>(value.size())}).to(group.device());
  group.broadcast(length, 0)->wait();
  const auto n = static_cast<int64_t>(length.cpu().item<double>());
  if (n == 0) return {};
  std::vector<double> bytes(static_cast<size_t>(n));
  if (group.rank() == 0) {
    for (int64_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(value[i]);
  }
  Tensor t = from_vector(bytes, Shape{n}).to(group.device());
  group.broadcast(t, 0)->wait();
  const auto got = t.cpu().to_vector<double>();
  std::string out(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<char>(static_cast<unsigned char>(got[i]));
  return out;
}

int share_file_from_rank0(distributed::ProcessGroup& group, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool have = fs::is_regular_file(path, ec);
  MT_CHECK(group.rank() != 0 || have, "share_file_from_rank0: rank 0 has no file '", path, "'");
  Tensor missing = from_vector(std::vector<double>{have ? 0.0 : 1.0}).to(group.device());
  group.allreduce(missing)->wait();
  const auto receivers = static_cast<int>(missing.cpu().item<double>());
  if (receivers == 0) return 0;
  const uint64_t size = std::stoull(broadcast_string(
      group, group.rank() == 0 ? std::to_string(fs::file_size(path)) : std::string()));
  // Six bytes per float64 (an integer below 2^48, exact): the process group moves floating-point
  // tensors only.
  constexpr uint64_t kChunk = uint64_t{48} << 20;
  std::ifstream in;
  std::ofstream out;
  fs::path tmp;
  if (group.rank() == 0) {
    in.open(path, std::ios::binary);
    MT_CHECK(in.good(), "share_file_from_rank0: cannot read '", path, "'");
  } else if (!have) {
    const fs::path target(path);
    if (target.has_parent_path()) fs::create_directories(target.parent_path());
    std::string name = ".";  // runner/atomic_file.h's temporary names, which readers skip
    name += target.filename().string();
    name += ".tmp-";
    name += std::to_string(::getpid());
    tmp = target.parent_path() / name;
    out.open(tmp, std::ios::binary | std::ios::trunc);
    MT_CHECK(out.good(), "share_file_from_rank0: cannot write '", tmp.string(), "'");
  }
  std::string bytes;
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(kChunk, size - done);
    const uint64_t words = (n + 5) / 6;
    std::vector<double> packed(words, 0.0);
    if (group.rank() == 0) {
      bytes.assign(n, '\0');
      in.read(bytes.data(), static_cast<std::streamsize>(n));
      MT_CHECK(static_cast<uint64_t>(in.gcount()) == n, "share_file_from_rank0: '", path,
               "' ended early (was it changed while being sent?)");
      for (uint64_t w = 0; w < words; ++w) {
        uint64_t v = 0;
        for (uint64_t k = 0; k < 6 && 6 * w + k < n; ++k)
          v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[6 * w + k])) << (8 * k);
        packed[w] = static_cast<double>(v);
      }
    }
    Tensor t = from_vector(packed, Shape{static_cast<int64_t>(words)}).to(group.device());
    group.broadcast(t, 0)->wait();
    if (group.rank() != 0 && !have) {
      const std::vector<double> got = t.cpu().to_vector<double>();
      bytes.assign(n, '\0');
      for (uint64_t w = 0; w < words; ++w) {
        const auto v = static_cast<uint64_t>(got[w]);
        for (uint64_t k = 0; k < 6 && 6 * w + k < n; ++k)
          bytes[6 * w + k] = static_cast<char>((v >> (8 * k)) & 0xff);
      }
      out.write(bytes.data(), static_cast<std::streamsize>(n));
      MT_CHECK(out.good(), "share_file_from_rank0: error writing '", tmp.string(), "'");
    }
    done += n;
  }
  if (out.is_open()) {
    out.close();
    MT_CHECK(!out.fail(), "share_file_from_rank0: error writing '", tmp.string(), "'");
    fs::rename(tmp, path);
  }
  return receivers;
}

std::string check_ranks_agree_on_state(distributed::ProcessGroup& group, const nn::Module& model,
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
