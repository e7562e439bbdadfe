// Reads tests/golden/optim.txt (scripts/golden/make_optim.py): per case, named lines of float64
// values (init/grad/param lines repeat once per step, in order).
#pragma once

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mantissa::testing {

struct OptimGoldenCase {
  std::vector<std::pair<std::string, std::vector<double>>> lines;
  // The values of the first line named `key` (empty if none).
  std::vector<double> first(const std::string& key) const {
    for (const auto& [name, values] : lines) {
      if (name == key) return values;
    }
    return {};
  }
  std::vector<std::vector<double>> all(const std::string& key) const {
    std::vector<std::vector<double>> out;
    for (const auto& [name, values] : lines) {
      if (name == key) out.push_back(values);
    }
    return out;
  }
};

inline const std::map<std::string, OptimGoldenCase>& optim_golden() {
  static const std::map<std::string, OptimGoldenCase> cases = [] {
    const char* root = std::getenv("MANTISSA_SOURCE_DIR");
    std::ifstream in(std::string(root ? root : ".") + "/tests/golden/optim.txt");
    std::map<std::string, OptimGoldenCase> out;
    std::string line, current;
    while (std::getline(in, line)) {
      std::istringstream is(line);
      std::string key;
      is >> key;
      if (key == "case") {
        is >> current;
        out[current];
      } else if (key == "end") {
        current.clear();
      } else if (!current.empty()) {
        std::vector<double> values;
        std::string v;
        while (is >> v) values.push_back(std::strtod(v.c_str(), nullptr));
        out[current].lines.emplace_back(key, std::move(values));
      }
    }
    return out;
  }();
  return cases;
}

}  // namespace mantissa::testing
