// A per-test scratch directory under the system temp dir, removed with its contents at the end.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace mantissa::testing {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("mt_data_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `content` to a file in the directory; returns its path.
  std::string file(const std::string& name, const std::string& content) const {
    const auto p = (path / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

}  // namespace mantissa::testing
