// Random-number state per device. Seeded and reproducible: the same manual_seed gives the same
// tensors on the same device.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device.h"

namespace mantissa {

// The state a random op draws from: element i of a call uses Philox4x32-10 counter (offset + i),
// so results depend only on (seed, offset), never on threading.
struct PhiloxState {
  uint64_t seed;
  uint64_t offset;
};

inline constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default

class Generator {
 public:
  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `count` counters and returns the state to draw them from.
  PhiloxState advance(uint64_t count) {
    PhiloxState s{seed_, offset_};
    offset_ += count;
    return s;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of a device (cpu, or cuda:i).
Generator& default_generator(Device device);
// Seeds the generators of every device.
void manual_seed(uint64_t seed);

// The state of one device's default generator (Philox: seed and counter offset), for checkpoints.
struct GeneratorState {
  Device device;
  uint64_t seed = kDefaultSeed;
  uint64_t offset = 0;
};
// The cpu generator, then cuda:0..N-1 for every visible GPU.
std::vector<GeneratorState> get_rng_states();
// Restores each listed device's generator; devices not present here are skipped (a GPU run's
// checkpoint resumed on the cpu restores the cpu stream only).
void set_rng_states(const std::vector<GeneratorState>& states);

}  // namespace mantissa
