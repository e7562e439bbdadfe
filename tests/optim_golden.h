// tests/golden/optim.txt (scripts/golden/make_optim.py): per case, named lines of float64
// values (init/grad/param lines repeat once per step, in order), read once.
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
    return read_golden_file("optim.txt", format);
  }();
  return cases;
}

}  // namespace mantissa::testing
