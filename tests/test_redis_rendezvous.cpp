// Ranks meeting through a Redis server (InitOptions::store_path redis://HOST:PORT, what jobs on
// several hosts without a shared filesystem use): Debian's redis-server on loopback, started by
// the test, 2 and 4 ranks, the same job meeting again, a rank that never comes, a rank killed
// mid-job, and addresses that are wrong. Skipped, with the reason, where redis-server is not
// installed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
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

// Every rank contributes rank + 1; the sum over the group is known.
void scenario_allreduce(Report& r) {
  dist::InitOptions o;
  o.timeout = std::chrono::seconds(20);
  auto pg = dist::init_process_group(o);
  Tensor t = mt::full({4}, static_cast<double>(pg->rank() + 1));
  pg->allreduce(t)->wait();
  const double want = pg->size() * (pg->size() + 1) / 2.0;
  for (double v : t.to_vector<double>())
    if (v != want) r.fail("allreduce gave " + std::to_string(v) + ", want " + std::to_string(want));
  pg->barrier()->wait();
}

// The last rank never comes; the others must give up within their timeout, naming the store.
void scenario_absent(Report& r) {
  if (std::stoi(std::getenv("RANK")) == std::stoi(std::getenv("WORLD_SIZE")) - 1) return;
  dist::InitOptions o;
  o.timeout = std::chrono::seconds(3);
  const auto start = std::chrono::steady_clock::now();
  try {
    dist::init_process_group(o);
    r.fail("met a group whose last rank never came");
  } catch (const mt::Error& e) {
    r.text << e.what() << "\n";
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s > 10) r.fail("giving up took " + std::to_string(s) + " s");
}

const mt::testing::Scenarios kScenarios = {
    {"allreduce", scenario_allreduce},
    {"absent", scenario_absent},
    {"killed", mt::testing::scenario_rank_killed_mid_job},
};

[[maybe_unused]] const bool kRankProcess = mt::testing::run_rank_process_if_asked(kScenarios);

std::string run_command(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 256> buf{};
    while (fgets(buf.data(), buf.size(), p)) out += buf.data();
    pclose(p);
  }
  return out;
}

// A redis-server of this test's own on loopback, without persistence.
class RedisRendezvous : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::is_available(dist::Backend::Gloo))
      GTEST_SKIP() << "this build has no Gloo backend (libgloo-dev was not found)";
    if (run_command("command -v redis-server").empty())
      GTEST_SKIP() << "redis-server is not installed (Debian: apt-get install redis-server)";
    port_ = 20000 + getpid() % 20000;
    pid_ = fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr))
        std::_Exit(126);
      execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--loglevel", "warning",
             static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (dbsize() < 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(dbsize(), 0) << "redis-server did not start on port " << port_;
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The number of keys in the server, or -1 when it does not answer.
  int dbsize() const {
    const std::string out =
        run_command("redis-cli -p " + std::to_string(port_) + " DBSIZE 2>/dev/null");
    return out.empty() || !std::isdigit(static_cast<unsigned char>(out[0])) ? -1 : std::stoi(out);
  }
  std::string address() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace

// 2 and then 4 ranks meet and reduce; each job deletes its keys, so the same job (the same key
// prefix) meets again on the same server.
TEST_F(RedisRendezvous, RanksMeetAndLeaveNoKeysBehind) {
  for (int world : {2, 4, 2}) {
    const auto results = run_ranks("allreduce", world, std::chrono::seconds(40), address());
    for (size_t rank = 0; rank < results.size(); ++rank)
      EXPECT_TRUE(exited_ok(results[rank]))
          << world << " ranks, rank " << rank << ": " << results[rank].report;
    EXPECT_EQ(dbsize(), 0) << "a job of " << world << " ranks left keys in the server";
  }
}

TEST_F(RedisRendezvous, ARankThatNeverComesFailsTheOthersNamingTheStore) {
  const auto results = run_ranks("absent", 3, std::chrono::seconds(30), address());
  ASSERT_EQ(results.size(), 3u);
  for (size_t rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
    const std::string& text = results[rank].report;
    EXPECT_NE(text.find("could not meet the other ranks through the Redis store " + address()),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("a rank that never came"), std::string::npos) << text;
  }
  EXPECT_EQ(dbsize(), 0) << "the ranks that gave up left their keys";
}

TEST_F(RedisRendezvous, ARankKilledMidJobFailsTheOthers) {
  mt::testing::expect_killed_rank_failed_the_others(
      run_ranks("killed", 3, std::chrono::seconds(30), address()));
  EXPECT_EQ(dbsize(), 0) << "keys left in the server";
}

TEST_F(RedisRendezvous, WrongAddressesAreRefusedByName) {
  dist::InitOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.timeout = std::chrono::seconds(2);
  o.store_path = "redis://127.0.0.1:1";  // nothing listens there
  mt::testing::expect_error([&] { dist::init_process_group(o); },
                            {"cannot reach the Redis store redis://127.0.0.1:1"});
  o.store_path = "redis://127.0.0.1:port";
  mt::testing::expect_error([&] { dist::init_process_group(o); },
                            {"a Redis store is redis://HOST:PORT, got 'redis://127.0.0.1:port'"});
}
