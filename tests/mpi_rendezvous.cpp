// Ranks started by mpirun meet through MPI (distributed/mpi_store.h) and then reduce with Gloo:
// the MpiRendezvous tests run `mpirun -np N` on this binary's MpiWorker tests (disabled, so
// only mpirun's ranks run them), and `mpirun -np 2 mantissa train` as one 2-rank run. Built and
// registered only when MPI and mpirun were found (tests/CMakeLists.txt).
#include <mpi.h>

#include <set>

// cli_test_util.h's file helpers are static; this file does not use all of them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "cli_test_util.h"
#pragma GCC diagnostic pop
#include "distributed/init.h"
#include "engine/factory.h"

namespace {

using namespace mantissa;
namespace dist = mantissa::distributed;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::atoi(v);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Every collective of the process group, checked on every rank; values depend on the rank so a
// rank that reduced with the wrong peers, or alone, fails.
void check_collectives(dist::ProcessGroup& group) {
  const int rank = group.rank(), size = group.size();
  const double r = rank + 1;
  const double n = size;
  const double sum = n * (n + 1) / 2;

  Tensor t = from_vector(std::vector<float>{static_cast<float>(r), static_cast<float>(2 * r)});
  group.allreduce(t, dist::ReduceOp::Sum)->wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{float(sum), float(2 * sum)}));

  Tensor m = from_vector(std::vector<double>{r, -r});
  group.allreduce(m, dist::ReduceOp::Max)->wait();
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{n, -1.0}));

  Tensor a = from_vector(std::vector<double>{r});
  group.allreduce(a, dist::ReduceOp::Avg)->wait();
  EXPECT_DOUBLE_EQ(a.to_vector<double>()[0], sum / n);

  // From the last rank, so a group that only ever hears rank 0 fails.
  Tensor b = from_vector(std::vector<float>{static_cast<float>(r), 7.f * static_cast<float>(r)});
  group.broadcast(b, size - 1)->wait();
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{float(n), 7.f * float(n)}));

  Tensor in = from_vector(std::vector<float>{static_cast<float>(r)});
  Tensor out = zeros(Shape{size}, DType::Float32);
  group.allgather(out, in)->wait();
  std::vector<float> expected;
  for (int i = 1; i <= size; ++i) expected.push_back(static_cast<float>(i));
  EXPECT_EQ(out.to_vector<float>(), expected);

  group.barrier()->wait();
}

// Run by mpirun's ranks. No MASTER_PORT and no store directory: a file rendezvous has nowhere
// to meet, so passing proves the ranks met through MPI, which `auto` picks under mpirun.
TEST(MpiWorker, DISABLED_AutoRendezvousUnderMpirunMeetsThroughMpi) {
  ASSERT_GE(env_int("OMPI_COMM_WORLD_RANK"), 0) << "run under mpirun";
  ASSERT_EQ(std::getenv("MASTER_PORT"), nullptr);
  ASSERT_EQ(std::getenv("MANTISSA_STORE_PATH"), nullptr);
  dist::InitOptions file;
  file.rendezvous = dist::Rendezvous::File;
  try {
    dist::init_process_group(file);
    ADD_FAILURE() << "a file rendezvous without a store directory should throw";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no store to meet in")) << e.what();
  }
  int initialized = 1;
  MPI_Initialized(&initialized);
  EXPECT_EQ(initialized, 0) << "a file rendezvous must not start MPI";

  dist::InitOptions options;
  options.timeout = std::chrono::seconds(30);
  auto group = dist::init_process_group(options);
  EXPECT_EQ(group->rank(), env_int("OMPI_COMM_WORLD_RANK"));
  EXPECT_EQ(group->size(), env_int("OMPI_COMM_WORLD_SIZE"));
  EXPECT_EQ(group->backend(), "gloo");
  check_collectives(*group);
  dist::destroy_process_group();
  group.reset();
  // A second group meets again through MPI in the same process.
  options.rendezvous = dist::Rendezvous::Mpi;
  check_collectives(*dist::init_process_group(options));
  dist::destroy_process_group();
  // mantissa started MPI, so it finalises it at exit (mpirun fails a rank that does not).
  MPI_Initialized(&initialized);
  EXPECT_EQ(initialized, 1);
}

// A program that initialised MPI itself keeps it: mantissa neither initialises it again nor
// finalises it; the program's own MPI_Finalize is the only one. Explicit rank and world size
// must agree with MPI's.
TEST(MpiWorker, DISABLED_AProgramThatStartedMpiFinalisesIt) {
  ASSERT_EQ(MPI_Init(nullptr, nullptr), MPI_SUCCESS);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  dist::InitOptions wrong;
  wrong.rendezvous = dist::Rendezvous::Mpi;
  wrong.rank = (rank + 1) % size;
  wrong.world_size = size;
  if (size > 1) {
    try {
      dist::init_process_group(wrong);
      ADD_FAILURE() << "a rank that disagrees with MPI's should throw";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "disagrees with MPI's rank")) << e.what();
    }
  }
  dist::InitOptions options;
  options.rendezvous = dist::Rendezvous::Mpi;
  options.rank = rank;
  options.world_size = size;
  options.timeout = std::chrono::seconds(30);
  check_collectives(*dist::init_process_group(options));
  dist::destroy_process_group();
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0);
  EXPECT_EQ(MPI_Finalize(), MPI_SUCCESS);
}

class MpiRendezvous : public CliTest {
 protected:
  // Runs `mpirun -np N program args...` in the scratch directory; stdout+stderr of every rank.
  Result mpirun(int np, const std::string& program, const std::vector<std::string>& args,
                const std::string& log_name) {
    const fs::path log = dir_ / log_name;
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (::chdir(dir_.c_str()) != 0) _exit(127);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(127);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      // The ranks must learn who they are from mpirun alone.
      for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                               "MASTER_ADDR", "MASTER_PORT", "MANTISSA_STORE_PATH", "SLURM_PROCID"})
        ::unsetenv(name);
      // Open MPI keeps allocations until the process exits: in sanitizer builds LeakSanitizer
      // skips stacks through its libraries (full stacks needed to see them) and still checks
      // mantissa's own allocations in the ranks.
      if (const char* source = std::getenv("MANTISSA_SOURCE_DIR")) {
        const std::string lsan = "suppressions=" + std::string(source) +
                                 "/tests/lsan_open_mpi.supp:fast_unwind_on_malloc=0";
        ::setenv("LSAN_OPTIONS", lsan.c_str(), 1);
      }
      std::vector<std::string> all = {MANTISSA_MPIEXEC,   "--allow-run-as-root",
                                      "--oversubscribe",  "-np",
                                      std::to_string(np), program};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
    const int code = wait_exit(pid);
    return {code, read_file(log)};
  }
  Result workers(int np, const std::string& test) {
    return mpirun(
        np, fs::read_symlink("/proc/self/exe").string(),
        {"--gtest_color=no", "--gtest_also_run_disabled_tests", "--gtest_filter=MpiWorker." + test},
        test + std::to_string(np) + ".txt");
  }
};

TEST_F(MpiRendezvous, TwoAndThreeRanksReduceThroughGlooAfterMeetingThroughMpi) {
  for (int np : {2, 3}) {
    const Result r = workers(np, "DISABLED_AutoRendezvousUnderMpirunMeetsThroughMpi");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(count(r.output, "[  PASSED  ] 1 test."), static_cast<size_t>(np)) << r.output;
  }
}

TEST_F(MpiRendezvous, AProgramThatStartedMpiKeepsIt) {
  const Result r = workers(2, "DISABLED_AProgramThatStartedMpiFinalisesIt");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "[  PASSED  ] 1 test."), 2u) << r.output;
}

// `mpirun -np 2 mantissa train`: one 2-rank run in which only rank 0 writes, with no store
// directory anywhere (TMPDIR stays empty).
TEST_F(MpiRendezvous, MpirunTrainsOneRunOfTwoRanks) {
  fs::create_directories(dir_ / "tmp");
  ::setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);
  const std::string cli =
      std::getenv("MANTISSA_CLI") ? std::getenv("MANTISSA_CLI") : std::string(MANTISSA_CLI_PATH);
  const Result r = mpirun(2, cli,
                          {"train", config("toy.yaml"), "--run-dir", "run", "--set", "device=cpu",
                           "--set", "steps=40", "--set", "eval_every=0", "--set", "log_every=1",
                           "--set", "checkpoint_every=20", "--set", "distributed.timeout_s=30"},
                          "train.txt");
  ::unsetenv("TMPDIR");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "on 2 ranks")) << r.output;
  EXPECT_TRUE(contains(r.output, "parameters and buffers identical on all 2 ranks")) << r.output;
  EXPECT_EQ(count(r.output, "done: 40 steps"), 1u) << r.output;
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
  // One writer: the step records of metrics.jsonl count 1, 2, ... once each.
  std::istringstream in(read_file(dir_ / "run" / "metrics.jsonl"));
  std::string line;
  int64_t expected = 1;
  while (std::getline(in, line)) {
    const JsonDoc j(line);
    if (const auto s = j.find("step")) {
      EXPECT_EQ(s->as_int(), expected++) << line;
    }
  }
  EXPECT_EQ(expected - 1, 40);
  std::set<std::string> checkpoints;
  for (const auto& e : fs::directory_iterator(dir_ / "run" / "checkpoints"))
    checkpoints.insert(e.path().filename());
  EXPECT_EQ(checkpoints, (std::set<std::string>{"step-000000020.ckpt", "step-000000040.ckpt"}));
}

}  // namespace
