// tests/golden/optim.txt (scripts/golden/make_optim.py, PyTorch 1.13) and optim_torch2.txt
// (make_optim_torch2.py: the options PyTorch 2 added): per case, named lines of float64 values
// (init/grad/param lines repeat once per step, in order), read once.
#pragma once

#include <map>
#include <string>

#include "golden_file.h"

namespace mantissa::testing {

using OptimGoldenCase = GoldenCase;

inline const std::map<std::string, GoldenCase>& optim_golden() {
  static const std::map<std::string, GoldenCase> cases = [] {
    GoldenFormat format;
    format.tensor_kinds = {};
    format.other_kinds_are_values = true;  // the keys are the tests' own: init, grad, lr1...
    std::map<std::string, GoldenCase> all = read_golden_file("optim.txt", format);
    all.merge(read_golden_file("optim_torch2.txt", format));
    return all;
  }();
  return cases;
}

}  // namespace mantissa::testing
