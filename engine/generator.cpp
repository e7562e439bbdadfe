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

void manual_seed(uint64_t seed) {
  auto& g = generators();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.last_seed = seed;
  g.cpu.manual_seed(seed);
  for (auto& c : g.cuda) c.manual_seed(seed);
}

}  // namespace mantissa
