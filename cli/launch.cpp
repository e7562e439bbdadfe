// `mantissa train --nproc N` / `distributed.nproc`: starts N local ranks of this program with the
// torchrun contract in their environment, forwards stop signals to them, and stops them all when
// one fails.
//
// The ranks run in a process group of their own, so a Ctrl-C at the terminal reaches the launcher
// only, which forwards it once (a rank that saw it twice would end without its final checkpoint).
// Each rank dies with the launcher (PR_SET_PDEATHSIG), so killing the launcher, even with SIGKILL,
// leaves no rank behind.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli.h"

extern char** environ;

namespace mantissa::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How long the other ranks get to stop on SIGTERM after one rank failed, before SIGKILL.
constexpr auto kGracePeriod = std::chrono::seconds(10);

volatile std::sig_atomic_t g_pending_signal = 0;
extern "C" void on_launcher_signal(int signo) { g_pending_signal = signo; }
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// A TCP port nobody listens on now, for MASTER_PORT (the ranks meet in the file store; the port
// names the job to tools that expect torchrun's contract).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

bool is_contract_variable(const char* entry) {
  static const char* const kNames[] = {
      "RANK=",        "WORLD_SIZE=",  "LOCAL_RANK=",         "LOCAL_WORLD_SIZE=",
      "MASTER_ADDR=", "MASTER_PORT=", "MANTISSA_STORE_PATH="};
  for (const char* name : kNames) {
    if (std::strncmp(entry, name, std::strlen(name)) == 0) return true;
  }
  return false;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

}  // namespace

int launch_local_ranks(int nproc, const std::vector<std::string>& args, bool make_store) {
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    print_error("cannot start the ranks: /proc/self/exe is unreadable");
    return kExitFailed;
  }
  std::string store;
  if (make_store) {
    std::string tmpl = (fs::temp_directory_path() / "mantissa-store-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      print_error("cannot create the ranks' store directory under " +
                  fs::temp_directory_path().string() + ": " + std::strerror(errno));
      return kExitFailed;
    }
    store = tmpl;
  }
  const int port = free_port();

  // Everything a child needs is built before fork(): between fork() and execve() only
  // async-signal-safe calls are made.
  std::vector<std::string> argv_text;
  argv_text.emplace_back(exe);
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::vector<std::string>> env_text(nproc);
  std::vector<std::vector<char*>> envp(nproc);
  for (int r = 0; r < nproc; ++r) {
    for (char** e = environ; *e != nullptr; ++e) {
      if (!is_contract_variable(*e)) env_text[r].emplace_back(*e);
    }
    env_text[r].push_back("RANK=" + std::to_string(r));
    env_text[r].push_back("WORLD_SIZE=" + std::to_string(nproc));
    env_text[r].push_back("LOCAL_RANK=" + std::to_string(r));
    env_text[r].push_back("LOCAL_WORLD_SIZE=" + std::to_string(nproc));
    env_text[r].push_back("MASTER_ADDR=127.0.0.1");
    env_text[r].push_back("MASTER_PORT=" + std::to_string(port));
    if (!store.empty()) env_text[r].push_back("MANTISSA_STORE_PATH=" + store);
    for (auto& e : env_text[r]) envp[r].push_back(e.data());
    envp[r].push_back(nullptr);
  }

  struct sigaction action = {};
  action.sa_handler = on_launcher_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction previous[3] = {};
  for (int i = 0; i < 3; ++i) ::sigaction(kForwardedSignals[i], &action, &previous[i]);
  g_pending_signal = 0;

  std::cout << std::flush;
  std::cerr << std::flush;
  const pid_t launcher = ::getpid();
  std::vector<pid_t> pids(nproc, -1);
  pid_t group = 0;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, group);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) _exit(kExitFailed);  // the launcher died before prctl
      for (int s : kForwardedSignals) ::signal(s, SIG_DFL);
      ::execve(exe, argv.data(), envp[r].data());
      _exit(127);
    }
    if (pid < 0) {
      print_error(std::string("cannot start rank ") + std::to_string(r) +
                  ": fork failed: " + std::strerror(errno));
      if (group != 0) ::kill(-group, SIGKILL);
      break;
    }
    ::setpgid(pid, group == 0 ? pid : group);  // also done by the child: whichever comes first
    if (group == 0) group = pid;
    pids[r] = pid;
  }

  int running = 0;
  for (pid_t p : pids) running += p > 0;
  const bool all_started = running == nproc;
  int forwarded = 0;
  int failed_rank = -1, failed_status = 0, rank0_status = 0;
  bool stopping = false;  // SIGTERM sent to the ranks after a failure
  Clock::time_point kill_at{};
  bool sent_kill = false;
  while (running > 0) {
    if (const int sig = g_pending_signal; sig != 0) {
      g_pending_signal = 0;
      forwarded = sig;
      ::kill(-group, sig);
    }
    int status = 0;
    const pid_t pid = ::waitpid(-group, &status, WNOHANG);
    if (pid > 0) {
      --running;
      int rank = 0;
      while (rank < nproc && pids[rank] != pid) ++rank;
      if (rank == 0) rank0_status = status;
      const bool ok =
          WIFEXITED(status) &&
          (WEXITSTATUS(status) == 0 || (forwarded != 0 && WEXITSTATUS(status) == 128 + forwarded));
      // A rank killed by a signal the launcher did not send is the cause rather than a rank
      // that exited with an error, which may be one that saw its peer's connection close.
      const bool killed_from_outside = WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM &&
                                       !(sent_kill && WTERMSIG(status) == SIGKILL);
      if (!ok && (failed_rank < 0 || (killed_from_outside && WIFEXITED(failed_status)))) {
        failed_rank = rank;
        failed_status = status;
      }
      if (!ok && !stopping && running > 0) {
        stopping = true;
        ::kill(-group, SIGTERM);
        kill_at = Clock::now() + kGracePeriod;
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;  // no children left
    if (stopping && !sent_kill && Clock::now() >= kill_at) {
      ::kill(-group, SIGKILL);
      sent_kill = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < 3; ++i) ::sigaction(kForwardedSignals[i], &previous[i], nullptr);
  if (!store.empty()) {
    std::error_code ec;
    fs::remove_all(store, ec);
  }
  if (failed_rank >= 0) {
    print_error("rank " + std::to_string(failed_rank) + " of " + std::to_string(nproc) + " (pid " +
                std::to_string(pids[failed_rank]) + ") " + describe_status(failed_status) +
                "; the other ranks were stopped");
    return kExitFailed;
  }
  if (!all_started) return kExitFailed;
  if (forwarded != 0 && WIFEXITED(rank0_status)) return WEXITSTATUS(rank0_status);
  return kExitOk;
}

}  // namespace mantissa::cli
