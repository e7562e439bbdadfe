// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), host and device.
// Counter-based: the numbers for element i depend only on (seed, counter), so CPU and CUDA
// kernels produce identical streams regardless of how work is split across threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/macros.h"

namespace mantissa {

struct Philox4 {
  uint32_t v[4];
};

// The round multipliers and the key schedule's Weyl increments (Salmon et al., table 2).
inline constexpr uint32_t kPhiloxMul0 = 0xD2511F53u, kPhiloxMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u, kPhiloxWeyl1 = 0xBB67AE85u;

MT_HOST_DEVICE inline Philox4 philox4x32(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kPhiloxWeyl0;
    k1 += kPhiloxWeyl1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
MT_HOST_DEVICE inline float philox_uniform01(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}
// The 53 random bits of a double uniform, from two Philox words.
MT_HOST_DEVICE inline uint64_t philox_bits53(uint32_t hi, uint32_t lo) {
  return ((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) & ((1ull << 53) - 1);
}
// Uniform in [0, 1) with 53 random bits.
MT_HOST_DEVICE inline double philox_uniform01_double(uint32_t hi, uint32_t lo) {
  return static_cast<double>(philox_bits53(hi, lo)) * (1.0 / 9007199254740992.0);
}
// The bound b with philox_uniform01_double(hi, lo) < x exactly when philox_bits53(hi, lo) < b,
// for any x: the uniform is bits * 2^-53 exactly, so the test is bits < x * 2^53, and bits is
// an integer. Lets a loop of Bernoulli draws compare integers, without a branch.
MT_HOST_DEVICE inline uint64_t philox_bits53_bound(double x) {
  if (!(x > 0)) return 0;         // NaN too: no uniform is below it
  if (x >= 1) return 1ull << 53;  // every 53-bit value is below
  return static_cast<uint64_t>(::ceil(x * 9007199254740992.0));
}
// Standard normal by Box-Muller from two uniforms.
MT_HOST_DEVICE inline double philox_normal(const Philox4& r) {
  const double u1 = 1.0 - philox_uniform01_double(r.v[0], r.v[1]);  // (0, 1]
  const double u2 = philox_uniform01_double(r.v[2], r.v[3]);
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

}  // namespace mantissa
