// mantissa's data-parallel benchmarks: allreduce bus bandwidth of the Gloo process group, and
// training throughput of the MLP 512 workload (bench/workloads.h) with and without
// nn::DistributedDataParallel. bench/run_distributed.sh runs it beside
// bench/peers/torch_distributed.py and prints the table; running it by hand works too:
//
//   mantissa_dist_bench allreduce [--nproc N] [--sizes 4096,65536,...] [options]
//   mantissa_dist_bench ddp [--nproc N] [--no-ddp] [--unfused] [options]
//   options: --threads T (per rank, default 1), --min-time S (default 0.2), --reps R (default 3)
//
// With --nproc the program starts N copies of itself as ranks, with init_process_group's
// environment contract (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and a fresh file store in
// a temporary directory, and waits for them. Without it, it is one rank of a job its launcher
// describes. Rank 0 prints one line per measurement:
//
//   allreduce world=2 bytes=4096 us=<per call> algbw_gbs=<..> busbw_gbs=<..>
//   ddp world=2 ddp=1 fused=1 batch=256 us_per_step=<..> samples_per_s=<all ranks together>
//
// Timing: every rank times the same number of calls; a measurement is the slowest rank's time
// (an allreduce of the elapsed times with Max), best of --reps repetitions. The call count is
// chosen from one timed call so that a repetition lasts at least --min-time; every rank derives it
// from the same (reduced) time, so the ranks agree without a further message.
#include <mantissa.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "workloads.h"

namespace mt = mantissa;
namespace dist = mantissa::distributed;
using mantissa_bench::Workload;

namespace {

struct Args {
  std::string mode;
  int nproc = 0;  // 0: this process is a rank
  int threads = 1;
  double min_time = 0.2;
  int reps = 3;
  bool ddp = true;
  bool unfused = false;  // plain Linear/ReLU modules instead of FusedMLP
  std::vector<int64_t> sizes = {int64_t(4) << 10,   int64_t(16) << 10, int64_t(64) << 10,
                                int64_t(256) << 10, int64_t(1) << 20,  int64_t(4) << 20,
                                int64_t(16) << 20,  int64_t(64) << 20};
};

[[noreturn]] void usage(int status) {
  std::fprintf(status == 0 ? stdout : stderr,
               "usage: mantissa_dist_bench allreduce|ddp [--nproc N] [--threads T] "
               "[--min-time S] [--reps R] [--sizes B,B,...] [--no-ddp] [--unfused]\n");
  std::exit(status);
}

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) usage(2);
  a.mode = argv[1];
  if (a.mode == "-h" || a.mode == "--help") usage(0);
  if (a.mode != "allreduce" && a.mode != "ddp") usage(2);
  for (int i = 2; i < argc; ++i) {
    const std::string opt = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (opt == "--nproc")
      a.nproc = std::stoi(value());
    else if (opt == "--threads")
      a.threads = std::stoi(value());
    else if (opt == "--min-time")
      a.min_time = std::stod(value());
    else if (opt == "--reps")
      a.reps = std::stoi(value());
    else if (opt == "--sizes")
      a.sizes = parse_sizes(value());
    else if (opt == "--no-ddp")
      a.ddp = false;
    else if (opt == "--unfused")
      a.unfused = true;
    else if (opt == "-h" || opt == "--help")
      usage(0);
    else
      usage(2);
  }
  return a;
}

// Starts nproc ranks of this program (the same arguments minus --nproc) and waits for them.
int launch(int argc, char** argv, const Args& a) {
  const auto store =
      std::filesystem::temp_directory_path() / ("mantissa-dist-bench-" + std::to_string(getpid()));
  std::filesystem::remove_all(store);
  std::filesystem::create_directories(store);
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--nproc") {
      ++i;
      continue;
    }
    args.push_back(argv[i]);
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < a.nproc; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      setenv("MANTISSA_STORE_PATH", store.c_str(), 1);
      // Read when OpenMP and OpenBLAS start, so they must be set before this process's exec.
      setenv("OMP_NUM_THREADS", std::to_string(a.threads).c_str(), 1);
      setenv("OPENBLAS_NUM_THREADS", std::to_string(a.threads).c_str(), 1);
      std::vector<char*> cargs;
      for (auto& s : args) cargs.push_back(s.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      std::_Exit(127);
    }
    if (pid < 0) {
      std::perror("mantissa_dist_bench: fork");
      return 1;
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (int rank = 0; rank < a.nproc; ++rank) {
    int status = 0;
    waitpid(pids[rank], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "mantissa_dist_bench: rank %d failed (status %d)\n", rank, status);
      failed = 1;
    }
  }
  std::filesystem::remove_all(store);
  return failed;
}

// The slowest rank's value.
double max_over_ranks(dist::ProcessGroup& pg, double value) {
  auto t = mt::full({1}, value, mt::TensorOptions().dtype(mt::DType::Float64));
  pg.allreduce(t, dist::ReduceOp::Max)->wait();
  return t.item<double>();
}

// Seconds per call of `fn`, as described at the top of the file.
double time_per_call(dist::ProcessGroup& pg, const Args& a, const std::function<void()>& fn) {
  using clock = std::chrono::steady_clock;
  auto timed = [&](int64_t calls) {
    pg.barrier()->wait();
    const auto t0 = clock::now();
    for (int64_t i = 0; i < calls; ++i) fn();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    return max_over_ranks(pg, s);
  };
  fn();  // warm-up: first-touch of buffers, DDP's first iteration and bucket rebuild
  fn();
  const double once = timed(1);
  const int64_t calls = std::max<int64_t>(1, int64_t(std::ceil(a.min_time / std::max(once, 1e-9))));
  double best = 1e300;
  for (int r = 0; r < a.reps; ++r) best = std::min(best, timed(calls) / double(calls));
  return best;
}

void bench_allreduce(dist::ProcessGroup& pg, const Args& a) {
  const int n = pg.size();
  for (const int64_t bytes : a.sizes) {
    auto t = mt::zeros({bytes / 4});  // float32; zeros stay zeros however many calls run
    const double s = time_per_call(pg, a, [&] { pg.allreduce(t, dist::ReduceOp::Sum)->wait(); });
    // nccl-tests' definitions: algbw = size / time; busbw = algbw * 2(n-1)/n for allreduce.
    const double algbw = double(bytes) / s / 1e9;
    const double busbw = algbw * 2.0 * double(n - 1) / double(n);
    if (pg.rank() == 0)
      std::printf("allreduce world=%d bytes=%lld us=%.4f algbw_gbs=%.4f busbw_gbs=%.4f\n", n,
                  static_cast<long long>(bytes), s * 1e6, algbw, busbw);
  }
}

// make_mlp of bench/mantissa_bench.cpp: each Linear -> ReLU -> Linear as one FusedMLP (whose
// backward yields all its gradients at once), or, unfused, as separate modules (whose gradients
// become ready layer by layer, so DDP can reduce the last layer's while backward goes on).
std::shared_ptr<mt::nn::SequentialImpl> make_mlp(const Workload& w, bool unfused) {
  auto model = std::make_shared<mt::nn::SequentialImpl>();
  const size_t n = w.layers.size();
  size_t i = 0;
  for (; !unfused && i + 2 < n; i += 2) {
    if (i > 0) model->push_back(mt::nn::ReLU());
    model->push_back(mt::nn::FusedMLP(w.layers[i], w.layers[i + 1], w.layers[i + 2]));
  }
  for (; i + 1 < n; ++i) {
    if (i > 0) model->push_back(mt::nn::ReLU());
    model->push_back(mt::nn::Linear(w.layers[i], w.layers[i + 1]));
  }
  return model;
}

// MLP 512 SGD steps, the batch of bench/workloads.h on every rank (so the job's batch is
// world * batch, as when DDP scales a single-process run out).
void bench_ddp(const std::shared_ptr<dist::ProcessGroup>& group, const Args& a) {
  dist::ProcessGroup& pg = *group;
  const Workload& w = *mantissa_bench::find_workload("mlp512");
  mt::manual_seed(0);
  auto model = make_mlp(w, a.unfused);
  mt::manual_seed(uint64_t(1 + pg.rank()));  // each rank its own data
  auto x = mt::randn({w.batch, w.layers.front()});
  auto target = mt::randn({w.batch, w.layers.back()});
  std::optional<mt::nn::DistributedDataParallel> ddp;
  if (a.ddp) ddp.emplace(model, group);
  mt::nn::MSELoss loss_fn;
  mt::optim::SGD opt(model->parameters(), w.lr, {.momentum = w.momentum});
  const double s = time_per_call(pg, a, [&] {
    opt.zero_grad();
    mt::Tensor out = ddp ? (*ddp)(x) : model->forward(x);
    loss_fn(out, target).backward();
    opt.step();
  });
  if (pg.rank() == 0)
    std::printf("ddp world=%d ddp=%d fused=%d batch=%lld us_per_step=%.4f samples_per_s=%.2f\n",
                pg.size(), a.ddp ? 1 : 0, a.unfused ? 0 : 1, static_cast<long long>(w.batch),
                s * 1e6, double(pg.size()) * double(w.batch) / s);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.nproc > 0) return launch(argc, argv, a);
  try {
    auto pg = dist::init_process_group();
    if (a.mode == "allreduce")
      bench_allreduce(*pg, a);
    else
      bench_ddp(pg, a);
    pg->barrier()->wait();
    dist::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mantissa_dist_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
