#include "engine/generator.h"

#include <deque>
#include <mutex>

namespace mantissa {
namespace {
struct Generators {
  std::mutex mutex;
  Generator cpu;
  std::deque<Generator> cuda;  // deque: references stay valid as it grows
  uint64_t last_seed = kDefaultSeed;
};
Generators& generators() {
  static Generators g;
  return g;
}
}  // namespace

Generator& default_generator(Device device) {
  auto& g = generators();
  if (device.is_cpu()) return g.cpu;
  std::lock_guard<std::mutex> lock(g.mutex);
  while (static_cast<int>(g.cuda.size()) <= device.index()) g.cuda.emplace_back(g.last_seed);
  return g.cuda[device.index()];
}

std::vector<GeneratorState> get_rng_states() {
  std::vector<GeneratorState> out;
  const Generator& c = default_generator(Device::cpu());
  out.push_back({Device::cpu(), c.seed(), c.offset()});
  const int n = cuda::is_available() ? cuda::device_count() : 0;
  for (int i = 0; i < n; ++i) {
    const Generator& g = default_generator(Device::cuda(i));
    out.push_back({Device::cuda(i), g.seed(), g.offset()});
  }
  return out;
}

void set_rng_states(const std::vector<GeneratorState>& states) {
  const int n = cuda::is_available() ? cuda::device_count() : 0;
  for (const auto& s : states) {
    if (s.device.is_cuda() && s.device.index() >= n) continue;
    default_generator(s.device).set_state(s.seed, s.offset);
  }
}

void manual_seed(uint64_t seed) {
  auto& g = generators();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.last_seed = seed;
  g.cpu.manual_seed(seed);
  for (auto& c : g.cuda) c.manual_seed(seed);
}

}  // namespace mantissa
