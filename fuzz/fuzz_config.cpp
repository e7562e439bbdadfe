// Fuzz target: the YAML run-config loader, runner::parse_config (what `mantissa train CONFIG`
// reads, and `--set` overrides).
//
// Input: the YAML text, optionally followed by a NUL byte and `--set` overrides, one per line
// ("optimizer.lr=0.1\nsteps=3"). A ConfigError is a clean refusal. An accepted config must
// survive the round trip config.h promises: to_yaml(cfg) parses again, to the same text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runner/config/config.h"

namespace mt = mantissa;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::string rest = input.substr(nul + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t nl = rest.find('\n', start);
      overrides.push_back(rest.substr(start, nl == std::string::npos ? nl : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }

  std::string resolved;
  try {
    resolved = mt::runner::to_yaml(mt::runner::parse_config(yaml, "fuzz.yaml", overrides));
  } catch (const mt::runner::ConfigError& e) {
    mt::fuzz::refused(e);
    return 0;
  }
  std::string again;
  try {
    again = mt::runner::to_yaml(mt::runner::parse_config(resolved, "resolved.yaml"));
  } catch (const mt::runner::ConfigError& e) {
    mt::fuzz::finding("the resolved config of an accepted config is refused: " +
                      std::string(e.what()) + "\n--- resolved ---\n" + resolved);
  }
  if (again != resolved)
    mt::fuzz::finding("the resolved config does not round-trip:\n--- first ---\n" + resolved +
                      "\n--- second ---\n" + again);
  return 0;
}
