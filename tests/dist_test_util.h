// Multi-process tests: the test binary starts copies of itself (fork + exec of /proc/self/exe)
// with MANTISSA_DIST_SCENARIO set; such a copy runs the scenario from a static initialiser,
// before GoogleTest, writes what it saw to a file and exits. The parent checks every rank's exit
// status and file, and kills ranks that outlive a deadline, so no test can hang.
//
// A test file defines its scenarios and, at namespace scope,
//   [[maybe_unused]] const bool kRankProcess = mt::testing::run_rank_process_if_asked(kScenarios);
#pragma once

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
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "distributed/init.h"
#include "engine/error.h"
#include "engine/factory.h"

namespace mantissa::testing {

// What a rank process writes: "ok" or the reason it failed.
struct Report {
  std::ostringstream text;
  bool ok = true;
  void fail(const std::string& why) {
    ok = false;
    text << why << "\n";
  }
};

using Scenarios = std::map<std::string, std::function<void(Report&)>>;

// In a rank process: runs the scenario named in the environment, writes the report and exits.
// In the parent: returns false.
inline bool run_rank_process_if_asked(const Scenarios& scenarios) {
  const char* name = std::getenv("MANTISSA_DIST_SCENARIO");
  if (name == nullptr) return false;
  Report r;
  try {
    scenarios.at(name)(r);
  } catch (const std::exception& e) {
    r.fail(std::string("uncaught: ") + e.what());
  }
  std::ofstream(std::string(std::getenv("MANTISSA_DIST_REPORT"))) << r.text.str();
  std::_Exit(r.ok ? 0 : 1);
}

struct RankResult {
  int status = -1;  // waitpid status
  std::string report;
};

// Starts `world` ranks of `scenario` meeting in a fresh store directory, and waits at most
// `deadline` for all of them; ranks still running then are killed and reported as such.
inline std::vector<RankResult> run_ranks(const std::string& scenario, int world,
                                         std::chrono::seconds deadline,
                                         const std::filesystem::path& shared_store = {}) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mantissa-test-dist-" + std::to_string(getpid()) +
                                                "-" + scenario + "-" + std::to_string(world));
  std::filesystem::remove_all(dir);
  const auto store = shared_store.empty() ? dir / "store" : shared_store;
  std::filesystem::create_directories(dir);  // the reports
  // A redis://HOST:PORT store is an address, not a directory.
  if (store.string().rfind("redis://", 0) != 0) std::filesystem::create_directories(store);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("MANTISSA_DIST_SCENARIO", scenario.c_str(), 1);
      setenv("MANTISSA_DIST_REPORT", (dir / ("rank" + std::to_string(rank))).c_str(), 1);
      setenv("MANTISSA_STORE_PATH", store.c_str(), 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("OMP_NUM_THREADS", "1", 1);
      execl("/proc/self/exe", "/proc/self/exe", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<RankResult> results(world);
  std::vector<bool> done(world, false);
  const auto end = std::chrono::steady_clock::now() + deadline;
  int remaining = world;
  while (remaining > 0 && std::chrono::steady_clock::now() < end) {
    for (int rank = 0; rank < world; ++rank) {
      if (done[rank]) continue;
      if (waitpid(pids[rank], &results[rank].status, WNOHANG) == pids[rank]) {
        done[rank] = true;
        --remaining;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int rank = 0; rank < world; ++rank) {
    if (!done[rank]) {
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], nullptr, 0);
      results[rank].report = "still running at the deadline; killed\n";
      results[rank].status = -1;
      continue;
    }
    std::ifstream in(dir / ("rank" + std::to_string(rank)));
    results[rank].report.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::filesystem::remove_all(dir);
  return results;
}

inline bool exited_ok(const RankResult& r) {
  return r.status >= 0 && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
}

// A scenario: the ranks meet (in the store of the environment), then the last one dies (SIGKILL)
// after the first barrier; the others keep reducing and must get an error well within their 20 s
// timeout. After the meeting the store is no longer used, whichever it was: Gloo's connections
// between the ranks carry the collectives, and one closing is noticed at once.
inline void scenario_rank_killed_mid_job(Report& r) {
  distributed::InitOptions o;
  o.timeout = std::chrono::seconds(20);
  auto pg = distributed::init_process_group(o);
  pg->barrier()->wait();
  if (pg->rank() == pg->size() - 1) raise(SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int k = 0; k < 100000; ++k) {
      Tensor t = full({64}, static_cast<double>(pg->rank()));
      pg->allreduce(t)->wait();
    }
    r.fail("collectives kept completing after a rank died");
  } catch (const Error& e) {
    r.text << e.what() << "\n";
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s > 15) r.fail("noticing the dead rank took " + std::to_string(s) + " s");
}

// What scenario_rank_killed_mid_job leaves: the last rank killed, each other rank reporting the
// allreduce that failed.
inline void expect_killed_rank_failed_the_others(const std::vector<RankResult>& results) {
  ASSERT_GE(results.size(), 2u);
  const RankResult& last = results.back();
  EXPECT_TRUE(last.status >= 0 && WIFSIGNALED(last.status) && WTERMSIG(last.status) == SIGKILL);
  const std::string world = std::to_string(results.size());
  for (size_t rank = 0; rank + 1 < results.size(); ++rank) {
    ASSERT_TRUE(exited_ok(results[rank])) << "rank " << rank << ": " << results[rank].report;
    EXPECT_NE(results[rank].report.find("allreduce failed on rank " + std::to_string(rank) +
                                        " of " + world),
              std::string::npos)
        << results[rank].report;
  }
}

}  // namespace mantissa::testing
