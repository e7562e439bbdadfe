// The process group, across real processes (tests/dist_test_util.h starts them).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "dist_test_util.h"
#include "test_util.h"

namespace mt = mantissa;
namespace dist = mantissa::distributed;
using mt::Tensor;
using mt::testing::exited_ok;
using mt::testing::Report;
using mt::testing::run_ranks;

namespace {

const std::vector<mt::DType> kDTypes = {mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16};

// Small multiples of 1/4, so sums and averages over up to 4 ranks are exact in every dtype.
double value(int rank, int64_t i) { return double((rank * 3 + i) % 7 + 1) * 0.25; }

Tensor rank_tensor(int rank, int64_t n, mt::DType dtype, int64_t offset = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, i + offset);
  return mt::from_vector(v).to(dtype);
}

void expect_values(Report& r, const char* what, mt::DType dtype, const Tensor& t,
                   const std::vector<double>& want) {
  const auto got = t.to_vector<double>();
  if (got != want) {
    std::ostringstream s;
    s << what << " " << dtype << ": got";
    for (double g : got) s << " " << g;
    s << ", want";
    for (double w : want) s << " " << w;
    r.fail(s.str());
  }
}

dist::InitOptions options_from_env(std::chrono::milliseconds timeout) {
  dist::InitOptions o;
  o.timeout = timeout;  // rank, world size and store path come from the environment
  return o;
}

// Every collective, in every dtype, checked against its definition on this rank.
void scenario_collectives(Report& r) {
  auto pg = dist::init_process_group(options_from_env(std::chrono::seconds(20)));
  const int rank = pg->rank(), w = pg->size();
  const int64_t n = 7;
  for (mt::DType dtype : kDTypes) {
    std::vector<double> sum(n, 0.0), mx(n, 0.0), avg(n);
    for (int q = 0; q < w; ++q)
      for (int64_t i = 0; i < n; ++i) {
        sum[i] += value(q, i);
        mx[i] = std::max(mx[i], value(q, i));
      }
    for (int64_t i = 0; i < n; ++i) avg[i] = sum[i] / w;

    Tensor t = rank_tensor(rank, n, dtype);
    pg->allreduce(t, dist::ReduceOp::Sum)->wait();
    expect_values(r, "allreduce sum", dtype, t, sum);
    t = rank_tensor(rank, n, dtype);
    pg->allreduce(t, dist::ReduceOp::Avg)->wait();
    expect_values(r, "allreduce avg", dtype, t, avg);
    t = rank_tensor(rank, n, dtype);
    pg->allreduce(t, dist::ReduceOp::Max)->wait();
    expect_values(r, "allreduce max", dtype, t, mx);

    const int root = w - 1;
    t = rank_tensor(rank, n, dtype);
    pg->broadcast(t, root)->wait();
    expect_values(r, "broadcast", dtype, t, rank_tensor(root, n, mt::kFloat64).to_vector<double>());

    Tensor gathered = mt::zeros({w, n}, dtype);
    pg->allgather(gathered, rank_tensor(rank, n, dtype))->wait();
    std::vector<double> all;
    for (int q = 0; q < w; ++q)
      for (int64_t i = 0; i < n; ++i) all.push_back(value(q, i));
    expect_values(r, "allgather", dtype, gathered, all);

    // Each rank contributes w * n elements; rank r keeps the reduction of slice r.
    Tensor scattered = mt::zeros({n}, dtype);
    pg->reduce_scatter(scattered, rank_tensor(rank, w * n, dtype), dist::ReduceOp::Sum)->wait();
    std::vector<double> mine(n, 0.0);
    for (int q = 0; q < w; ++q)
      for (int64_t i = 0; i < n; ++i) mine[i] += value(q, rank * n + i);
    expect_values(r, "reduce_scatter sum", dtype, scattered, mine);
  }
  pg->barrier()->wait();

  // Several collectives in flight at once, waited on in reverse order.
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int k = 0; k < 6; ++k) {
    tensors.push_back(rank_tensor(rank, 1000, mt::kFloat32, k));
    works.push_back(pg->allreduce(tensors.back(), dist::ReduceOp::Sum));
  }
  works.push_back(pg->barrier());
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int k = 0; k < 6; ++k) {
    if (!works[k]->is_completed()) r.fail("async: a waited-on work is not completed");
    std::vector<double> want(1000, 0.0);
    for (int q = 0; q < w; ++q)
      for (int64_t i = 0; i < 1000; ++i) want[i] += value(q, i + k);
    expect_values(r, "async allreduce", mt::kFloat32, tensors[k], want);
  }
  dist::destroy_process_group();
}

// Rank 0 runs an allreduce that rank 1 skips (rank 1 runs a barrier instead): both must fail
// with the timeout error, after about the 2 s timeout.
void scenario_mismatch(Report& r) {
  auto pg = dist::init_process_group(options_from_env(std::chrono::milliseconds(2000)));
  Tensor t = rank_tensor(pg->rank(), 4, mt::kFloat32);
  const auto start = std::chrono::steady_clock::now();
  try {
    if (pg->rank() == 0)
      pg->allreduce(t)->wait();
    else
      pg->barrier()->wait();
    r.fail("the mismatched collective completed");
  } catch (const mt::Error& e) {
    r.text << e.what() << "\n";
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s < 1.5 || s > 10) r.fail("the timeout took " + std::to_string(s) + " s, not about 2 s");
  // Every later collective fails at once with the first error.
  try {
    pg->barrier()->wait();
    r.fail("a collective after the failure completed");
  } catch (const mt::Error& e) {
    r.text << e.what() << "\n";
  }
  // Both ranks time out at about the same moment; staying connected a little longer keeps the
  // first to fail from turning its peer's timeout into a closed connection.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
}

const mt::testing::Scenarios kScenarios = {
    {"collectives", scenario_collectives},
    {"mismatch", scenario_mismatch},
    {"killed", mt::testing::scenario_rank_killed_mid_job},
};

[[maybe_unused]] const bool kRankProcess = mt::testing::run_rank_process_if_asked(kScenarios);

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::is_available(dist::Backend::Gloo))
      GTEST_SKIP() << "this build has no Gloo backend (libgloo-dev was not found)";
  }
};

TEST_F(Distributed, CollectivesOnTwoRanks) {
  const auto results = run_ranks("collectives", 2, std::chrono::seconds(30));
  for (size_t rank = 0; rank < results.size(); ++rank)
    EXPECT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
}

TEST_F(Distributed, CollectivesOnFourRanks) {
  const auto results = run_ranks("collectives", 4, std::chrono::seconds(30));
  for (size_t rank = 0; rank < results.size(); ++rank)
    EXPECT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
}

// Rendezvous leaves nothing behind, so the next job can meet in the same directory.
TEST_F(Distributed, StoreDirectoryCanBeReused) {
  const auto store = std::filesystem::temp_directory_path() /
                     ("mantissa-test-dist-reuse-" + std::to_string(getpid()));
  for (int job = 0; job < 2; ++job) {
    const auto results = run_ranks("collectives", 2, std::chrono::seconds(30), store);
    for (size_t rank = 0; rank < results.size(); ++rank)
      EXPECT_TRUE(exited_ok(results[rank]))
          << "job " << job << " rank " << rank << ": " << results[rank].report;
    EXPECT_TRUE(std::filesystem::is_empty(store)) << "job " << job << " left keys in " << store;
  }
  std::filesystem::remove_all(store);
}

TEST_F(Distributed, MismatchedCollectiveTimesOutWithTheOpRankAndPeer) {
  const auto results = run_ranks("mismatch", 2, std::chrono::seconds(20));
  ASSERT_EQ(results.size(), 2u);
  for (size_t rank = 0; rank < 2; ++rank)
    ASSERT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
  // Both ranks name their op, themselves and the peer. The first to reach its timeout says so;
  // the other may instead see the connection its peer closed on giving up, whichever is first.
  const std::string& r0 = results[0].report;
  const std::string& r1 = results[1].report;
  EXPECT_NE(r0.find("allreduce failed on rank 0 of 2, peer rank 1: "), std::string::npos) << r0;
  EXPECT_NE(r1.find("barrier failed on rank 1 of 2, peer rank 0: "), std::string::npos) << r1;
  const std::string timed_out = "timed out after 2000 ms";
  EXPECT_TRUE(r0.find(timed_out) != std::string::npos || r1.find(timed_out) != std::string::npos)
      << r0 << "\n"
      << r1;
  EXPECT_NE(results[0].report.find("barrier on rank 0: the process group failed earlier"),
            std::string::npos)
      << results[0].report;
}

TEST_F(Distributed, KilledRankMakesTheOthersFail) {
  mt::testing::expect_killed_rank_failed_the_others(
      run_ranks("killed", 3, std::chrono::seconds(25)));
}

// In-process checks on a group of one.
TEST_F(Distributed, ValidatesTensorsAndNamesTheOp) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mantissa-test-dist-single-" + std::to_string(getpid()));
  dist::InitOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.store_path = dir.string();
  o.timeout = std::chrono::seconds(5);
  auto pg = dist::init_process_group(o);
  EXPECT_TRUE(dist::is_initialized());
  EXPECT_EQ(dist::default_group(), pg);
  EXPECT_EQ(pg->backend(), "gloo");

  Tensor t = mt::tensor<float>({1.5f, -2.0f});
  pg->allreduce(t, dist::ReduceOp::Avg)->wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));

  mt::testing::expect_error(
      [&] {
        pg->allreduce(mt::tensor<int64_t>({1, 2}));
      },
      {"op allreduce not implemented for dtype int64 on device cpu"});
  mt::testing::expect_error(
      [&] {
        pg->allreduce(mt::zeros({3, 2}).t());
      },
      {"allreduce: expected a contiguous tensor, got shape [2, 3]"});
  mt::testing::expect_error(
      [&] { pg->allgather(mt::zeros({3}), mt::zeros({2})); },
      {"allgather: expected an output of 1 x 2 elements for input shape [2], got shape [3]"});
  mt::testing::expect_error(
      [&] { pg->reduce_scatter(mt::zeros({2}), mt::zeros({2}, mt::kFloat64)); },
      {"reduce_scatter: expected output and input of the same dtype and device"});
  mt::testing::expect_error([&] { pg->broadcast(mt::zeros({2}), 1); },
                            {"broadcast: root 1 is not a rank of a group of size 1"});
  dist::destroy_process_group();
  EXPECT_FALSE(dist::is_initialized());
  mt::testing::expect_error([] { dist::default_group(); }, {"call init_process_group()"});
  std::filesystem::remove_all(dir);
}

class ScopedEnv {
 public:
  explicit ScopedEnv(std::map<std::string, std::string> vars) {
    for (const char* name :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
          "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
          "SLURM_NTASKS_PER_NODE", "MANTISSA_STORE_PATH"}) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
    set_ = std::move(vars);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : set_) unsetenv(k.c_str());
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_, set_;
};

TEST(DistributedEnv, ReadsTorchrunThenMpirunThenSlurm) {
  {
    ScopedEnv env({{"RANK", "3"},
                   {"WORLD_SIZE", "8"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "node0"},
                   {"MASTER_PORT", "29500"},
                   {"OMPI_COMM_WORLD_RANK", "5"},
                   {"SLURM_PROCID", "6"}});
    const auto e = dist::read_launch_env();
    EXPECT_EQ(e.launcher, "torchrun");
    EXPECT_EQ(e.rank, 3);
    EXPECT_EQ(e.world_size, 8);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.local_world_size, 2);
    EXPECT_EQ(e.master_addr, "node0");
    EXPECT_EQ(e.master_port, 29500);
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "5"},
                   {"OMPI_COMM_WORLD_SIZE", "6"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                   {"SLURM_PROCID", "6"}});
    const auto e = dist::read_launch_env();
    EXPECT_EQ(e.launcher, "mpirun");
    EXPECT_EQ(e.rank, 5);
    EXPECT_EQ(e.world_size, 6);
    EXPECT_EQ(e.local_rank, 2);
    EXPECT_EQ(e.local_world_size, 3);
  }
  {
    ScopedEnv env({{"SLURM_PROCID", "4"},
                   {"SLURM_NTASKS", "8"},
                   {"SLURM_LOCALID", "0"},
                   {"SLURM_NTASKS_PER_NODE", "4(x2)"}});
    const auto e = dist::read_launch_env();
    EXPECT_EQ(e.launcher, "srun");
    EXPECT_EQ(e.rank, 4);
    EXPECT_EQ(e.world_size, 8);
    EXPECT_EQ(e.local_rank, 0);
    EXPECT_FALSE(e.local_world_size.has_value());
  }
  {
    ScopedEnv env(std::map<std::string, std::string>{});
    const auto e = dist::read_launch_env();
    EXPECT_EQ(e.launcher, "");
    EXPECT_FALSE(e.rank.has_value());
  }
}

TEST(DistributedEnv, OptionsOverrideTheEnvironmentAndBadValuesThrow) {
  ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "1"}});
  dist::InitOptions o;
  o.store_path = "/nonexistent-unused";
  // RANK=1 of WORLD_SIZE=1 is out of range unless the options override it.
  if (dist::is_available(dist::Backend::Gloo))
    mt::testing::expect_error([&] { dist::init_process_group(o); },
                              {"rank 1 is out of range for world size 1"});
  {
    ScopedEnv bad(std::map<std::string, std::string>{{"RANK", "x"}});
    mt::testing::expect_error([] { dist::read_launch_env(); },
                              {"environment variable RANK='x' is not a non-negative integer"});
  }
  {
    ScopedEnv none(std::map<std::string, std::string>{});
    if (dist::is_available(dist::Backend::Gloo))
      mt::testing::expect_error([] { dist::init_process_group({}); },
                                {"rank and world size are unknown"});
  }
  if (!dist::is_available(dist::Backend::Nccl))
    mt::testing::expect_error(
        [] {
          dist::InitOptions n;
          n.backend = dist::Backend::Nccl;
          dist::init_process_group(n);
        },
        {"this build of mantissa has no nccl backend"});
}

}  // namespace
