// The fixture of the tests that run the built `mantissa` binary as a child process (fork/exec),
// as a user would: a scratch directory per test, spawn/run with captured output, file helpers.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "json_doc.h"

namespace fs = std::filesystem;

#ifndef MANTISSA_CLI_PATH
#error "tests/CMakeLists.txt defines MANTISSA_CLI_PATH for the CLI tests"
#endif

namespace {

std::string source_dir() {
  const char* s = std::getenv("MANTISSA_SOURCE_DIR");
  return s ? s : ".";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A scratch directory per test, removed at the end.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info->name();  // "Test/0" for parameterized tests
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("mt_cli_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Starts `mantissa args...` in the scratch directory with stdout+stderr to `log`.
  pid_t spawn(const std::vector<std::string>& args, const fs::path& log,
              const std::vector<std::string>& env = {}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (::chdir(dir_.c_str()) != 0) _exit(127);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(127);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv;
      // MANTISSA_CLI points at a staged binary when the tests run away from their build tree
      // (scripts/gpu/run.sh).
      const char* staged = std::getenv("MANTISSA_CLI");
      std::string exe = staged ? staged : MANTISSA_CLI_PATH;
      argv.push_back(exe.data());
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      _exit(127);
    }
    return pid;
  }
  static int wait_exit(pid_t pid, bool* signaled = nullptr) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (signaled) *signaled = WIFSIGNALED(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  struct Result {
    int code;
    std::string output;
  };
  Result run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    const fs::path log = dir_ / ("out_" + std::to_string(counter_++) + ".txt");
    const int code = wait_exit(spawn(args, log, env));
    return {code, read_file(log)};
  }
  std::string config(const std::string& name) const { return source_dir() + "/configs/" + name; }

  fs::path dir_;
  int counter_ = 0;
};

}  // namespace
