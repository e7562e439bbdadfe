// Philox4x32-10 for a run of consecutive counters at once. The CPU's random fills and the
// attention kernel's dropout draw one philox4x32(seed, counter) per element over consecutive
// counters; one at a time, each of its 10 rounds waits on the previous round's multiplies.
//
// Contract: philox4x32_batch(seed, counter0, out) leaves out.w[k][l] == philox4x32(seed,
// counter0 + l).v[k] for every l < kPhiloxBatch and k < 4, bit for bit, on every CPU (the
// counter wraps modulo 2^64 as philox4x32's does). On CPUs with AVX-512 it runs four vectors of
// 16 counters interleaved, which hides the multiplies' latency; elsewhere it loops philox4x32.
// Tested against philox4x32 in tests/test_random.cpp; measured in docs/performance.md.
#pragma once

#include <cstdint>

#include "engine/philox.h"

namespace mantissa::cpu {

inline constexpr int kPhiloxBatch = 64;

struct PhiloxBatch {
  alignas(64) uint32_t w[4][kPhiloxBatch];

  Philox4 at(int l) const { return Philox4{{w[0][l], w[1][l], w[2][l], w[3][l]}}; }
};

void philox4x32_batch(uint64_t seed, uint64_t counter0, PhiloxBatch& out);

}  // namespace mantissa::cpu
