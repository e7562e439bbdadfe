// Half, BFloat16 and TF32 rounding against references written here from the IEEE definitions
// (decode with ldexp, round with nearbyint in double), exhaustively over the 16-bit patterns,
// plus the F16C instruction and the CPU cast kernel's dense F16C path.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MT_TEST_X86 1
#endif

#include "kernels/cpu/convert_dense.h"
#include "test_util.h"

namespace mt = mantissa;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint16_t half_bits(float f) { return mt::Half(f).x; }
uint16_t bf16_bits(float f) { return mt::BFloat16(f).x; }

// binary16 decoded from its fields (sign, 5-bit exponent, 10-bit mantissa).
double ref_half_to_double(uint16_t h) {
  const bool neg = (h & 0x8000) != 0;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);  // zero or subnormal: m * 2^-14 * 2^-10
  } else if (e == 31) {
    v = m == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<double>(1024 + m), e - 25);  // 1.m * 2^(e-15)
  }
  return neg ? -v : v;
}

// bfloat16 decoded from its fields (sign, 8-bit exponent, 7-bit mantissa).
double ref_bf16_to_double(uint16_t b) {
  const bool neg = (b & 0x8000) != 0;
  const int e = (b >> 7) & 0xff;
  const int m = b & 0x7f;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -133);  // m * 2^-126 * 2^-7
  } else if (e == 255) {
    v = m == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<double>(128 + m), e - 134);
  }
  return neg ? -v : v;
}

// TF32: float32's exponent range with 10 mantissa bits; round to nearest even, in double.
float ref_round_to_tf32(float f) {
  if (!std::isfinite(f)) return f;
  const double x = f;
  int e = 0;
  std::frexp(x, &e);  // |x| = frac * 2^e, frac in [0.5, 1)
  // Quantum: 2^-136 for float32 subnormals (the kept bits of the mantissa field), else 2^(e-11).
  const double q =
      std::fabs(x) < std::ldexp(1.0, -126) ? std::ldexp(1.0, -136) : std::ldexp(1.0, e - 11);
  const double r = std::nearbyint(x / q) * q;  // default rounding mode: ties to even
  if (std::fabs(r) > FLT_MAX) return r > 0 ? INFINITY : -INFINITY;
  return static_cast<float>(r);
}

#if MT_TEST_X86
__attribute__((target("f16c"))) uint16_t f16c_from_float(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
bool have_f16c() { return __builtin_cpu_supports("f16c"); }
#endif

// Checks that Half rounds `f` to the half with bits `want` (sign included).
void expect_half_rounds(float f, uint16_t want, const char* what) {
  EXPECT_EQ(half_bits(f), want) << what << ": " << std::hexfloat << f;
}

}  // namespace

// ---- Half -----------------------------------------------------------------------------------

TEST(Half, AllPatternsToFloatMatchReference) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float got = mt::Half(h, mt::from_bits);
    const double want = ref_half_to_double(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << i;
      EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << i;
      // The payload moves to the top of float's mantissa (the quiet bit may be set).
      EXPECT_EQ((bits_of(got) >> 13) & 0x1ff, static_cast<uint32_t>(h & 0x1ff)) << std::hex << i;
    } else {
      ASSERT_EQ(bits_of(got), bits_of(static_cast<float>(want))) << std::hex << i;
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << i;
    }
  }
}

TEST(Half, AllPatternsRoundTripThroughFloat) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = mt::Half(h, mt::from_bits);
    const uint16_t back = half_bits(f);
    if (std::isnan(f)) {
      EXPECT_EQ(back & 0x7c00, 0x7c00) << std::hex << i;
      EXPECT_NE(back & 0x3ff, 0) << std::hex << i;  // still NaN, not Inf
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
}

TEST(Half, MidpointsRoundToEvenAndNeighboursToNearest) {
  // Every pair of adjacent finite halves of the same sign, including 0 / smallest subnormal.
  for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
    for (uint32_t lo = 0; lo < 0x7bff; ++lo) {
      const auto a = static_cast<uint16_t>(lo | sign), b = static_cast<uint16_t>((lo + 1) | sign);
      const double va = ref_half_to_double(a), vb = ref_half_to_double(b);
      const double mid_d = (va + vb) / 2;
      const float mid = static_cast<float>(mid_d);
      ASSERT_EQ(static_cast<double>(mid), mid_d) << "midpoint must be exact in float";
      const uint16_t even = (a & 1) == 0 ? a : b;
      ASSERT_EQ(half_bits(mid), even) << std::hex << lo << " sign " << sign;
      // One float ulp towards a rounds to a, towards b to b.
      ASSERT_EQ(half_bits(std::nextafter(mid, static_cast<float>(va))), a) << std::hex << lo;
      ASSERT_EQ(half_bits(std::nextafter(mid, static_cast<float>(vb))), b) << std::hex << lo;
      ASSERT_EQ(half_bits(static_cast<float>(va)), a);
    }
  }
}

TEST(Half, OverflowAndSpecialValues) {
  // 65504 is the largest half; the midpoint to the next binade, 65520, rounds (to even) to Inf.
  expect_half_rounds(65504.0f, 0x7bff, "max");
  expect_half_rounds(std::nextafter(65520.0f, 0.0f), 0x7bff, "just below 65520");
  expect_half_rounds(65520.0f, 0x7c00, "65520");
  expect_half_rounds(-65520.0f, 0xfc00, "-65520");
  expect_half_rounds(65536.0f, 0x7c00, "65536");
  expect_half_rounds(1e10f, 0x7c00, "1e10");
  expect_half_rounds(FLT_MAX, 0x7c00, "FLT_MAX");
  expect_half_rounds(-FLT_MAX, 0xfc00, "-FLT_MAX");
  expect_half_rounds(INFINITY, 0x7c00, "inf");
  expect_half_rounds(-INFINITY, 0xfc00, "-inf");
  expect_half_rounds(0.0f, 0x0000, "+0");
  expect_half_rounds(-0.0f, 0x8000, "-0");
  for (float nan :
       {NAN, -NAN, float_of(0x7f800001u), float_of(0xff800001u), float_of(0x7fffffffu)}) {
    const uint16_t h = half_bits(nan);
    EXPECT_EQ(h & 0x7c00, 0x7c00);
    EXPECT_NE(h & 0x3ff, 0) << "NaN must not become Inf";
    EXPECT_EQ((h & 0x8000) != 0, std::signbit(nan)) << "NaN keeps its sign";
  }
}

TEST(Half, TinyValuesRoundToSubnormalsOrZero) {
  const float min_sub = std::ldexp(1.0f, -24);  // smallest half subnormal
  expect_half_rounds(min_sub, 0x0001, "2^-24");
  expect_half_rounds(-min_sub, 0x8001, "-2^-24");
  expect_half_rounds(std::ldexp(1.0f, -25), 0x0000, "2^-25 ties to even zero");
  expect_half_rounds(-std::ldexp(1.0f, -25), 0x8000, "-2^-25 ties to -0");
  expect_half_rounds(std::nextafter(std::ldexp(1.0f, -25), 1.0f), 0x0001, "above 2^-25");
  expect_half_rounds(std::ldexp(3.0f, -25), 0x0002, "1.5 * 2^-24 ties to even 2");
  expect_half_rounds(std::ldexp(1.0f, -26), 0x0000, "2^-26");
  expect_half_rounds(std::ldexp(1.0f, -14), 0x0400, "smallest normal");
  expect_half_rounds(std::ldexp(1023.0f, -24), 0x03ff, "largest subnormal");
  // Midway between the largest subnormal and the smallest normal: ties to even (0x0400).
  expect_half_rounds(std::ldexp(2047.0f, -25), 0x0400, "subnormal/normal boundary");
  // float32 subnormals and the smallest normal are far below half's range.
  for (float f : {FLT_MIN, std::ldexp(1.0f, -140), std::numeric_limits<float>::denorm_min()}) {
    expect_half_rounds(f, 0x0000, "float tiny");
    expect_half_rounds(-f, 0x8000, "float -tiny");
  }
}

TEST(Half, SoftwareMatchesF16COnRandomFloats) {
#if MT_TEST_X86
  if (!have_f16c()) GTEST_SKIP() << "CPU lacks F16C";
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f), sub_range(-6.2e-5f, 6.2e-5f);
  int64_t checked = 0;
  auto check = [&](float f) {
    const uint16_t sw = half_bits(f), hw = f16c_from_float(f);
    if (std::isnan(f)) {
      ASSERT_EQ(sw & 0x7c00, 0x7c00);
      ASSERT_NE(sw & 0x3ff, 0);
      ASSERT_EQ(sw & 0x8000, hw & 0x8000);
    } else {
      ASSERT_EQ(sw, hw) << std::hexfloat << f;
    }
    ++checked;
  };
  for (int i = 0; i < 400000; ++i) check(float_of(any_bits(rng)));  // every class, NaN included
  for (int i = 0; i < 300000; ++i) {  // magnitudes around half's range, both signs
    const float f = std::exp2(exponent(rng)) * ((i & 1) ? -1.0f : 1.0f);
    check(f);
  }
  for (int i = 0; i < 300000; ++i) check(sub_range(rng));  // half subnormal range
  // Low mantissa bits at and around the rounding point, for every exponent near half's range.
  for (uint32_t e = 100; e < 145; ++e)
    for (uint32_t low : {0x0fffu, 0x1000u, 0x1001u, 0x2fffu, 0x3000u, 0x3001u, 0x1fffu})
      for (uint32_t top = 0; top < 1024; top += 7) check(float_of((e << 23) | (top << 13) | low));
  EXPECT_GT(checked, 1000000);
#else
  GTEST_SKIP() << "not an x86 CPU";
#endif
}

// ---- BFloat16 -------------------------------------------------------------------------------

TEST(BFloat16, AllPatternsToFloatMatchReference) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float got = mt::BFloat16(b, mt::from_bits);
    const double want = ref_bf16_to_double(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << i;
      EXPECT_EQ(std::signbit(got), (b & 0x8000) != 0);
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << i;
      ASSERT_EQ(std::signbit(got), (b & 0x8000) != 0) << std::hex << i;
    }
  }
}

TEST(BFloat16, AllPatternsRoundTripAndNaNStaysNaN) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = mt::BFloat16(b, mt::from_bits);
    const uint16_t back = bf16_bits(f);
    if (std::isnan(f)) {
      ASSERT_EQ(back & 0x7f80, 0x7f80) << std::hex << i;
      ASSERT_NE(back & 0x7f, 0) << std::hex << i;
      ASSERT_EQ(back & 0x8000, b & 0x8000) << std::hex << i;
    } else {
      ASSERT_EQ(back, b) << std::hex << i;
    }
  }
  // float NaNs whose payload lives only in the low 16 bits must not truncate to Inf.
  for (uint32_t u : {0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7fc00000u}) {
    const uint16_t b = bf16_bits(float_of(u));
    EXPECT_EQ(b & 0x7f80, 0x7f80);
    EXPECT_NE(b & 0x7f, 0) << std::hex << u;
    EXPECT_EQ(b & 0x8000, (u >> 16) & 0x8000);
  }
}

TEST(BFloat16, MidpointsRoundToEvenAndNeighboursToNearest) {
  for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
    for (uint32_t lo = 0; lo < 0x7f7f; ++lo) {
      const auto a = static_cast<uint16_t>(lo | sign), b = static_cast<uint16_t>((lo + 1) | sign);
      const double va = ref_bf16_to_double(a), vb = ref_bf16_to_double(b);
      const float mid = static_cast<float>((va + vb) / 2);
      ASSERT_EQ(static_cast<double>(mid), (va + vb) / 2);
      ASSERT_EQ(bf16_bits(mid), (a & 1) == 0 ? a : b) << std::hex << lo;
      ASSERT_EQ(bf16_bits(std::nextafter(mid, static_cast<float>(va))), a) << std::hex << lo;
      ASSERT_EQ(bf16_bits(std::nextafter(mid, static_cast<float>(vb))), b) << std::hex << lo;
    }
  }
  // Above the largest bfloat16: the midpoint to 2^128 ties to even, which is Inf.
  EXPECT_EQ(bf16_bits(float_of(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(bf16_bits(float_of(0x7f7f8000u)), 0x7f80);
  EXPECT_EQ(bf16_bits(FLT_MAX), 0x7f80);
  EXPECT_EQ(bf16_bits(-FLT_MAX), 0xff80);
  EXPECT_EQ(bf16_bits(INFINITY), 0x7f80);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
}

// ---- TF32 -----------------------------------------------------------------------------------

TEST(TF32, RoundToTf32MatchesReference) {
  // Every sign/exponent/top-10-mantissa combination, with low bits at and around the tie.
  std::mt19937 rng(7);
  for (uint32_t high = 0; high < (1u << 19); ++high) {
    const uint32_t lows[] = {0x0000u,
                             0x0001u,
                             0x0fffu,
                             0x1000u,
                             0x1001u,
                             0x1fffu,
                             static_cast<uint32_t>(rng() & 0x1fffu)};
    for (uint32_t low : lows) {
      const float f = float_of((high << 13) | low);
      const float got = mt::round_to_tf32(f), want = ref_round_to_tf32(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(got));
      } else {
        ASSERT_EQ(bits_of(got), bits_of(want)) << std::hexfloat << f;
        ASSERT_EQ(bits_of(got) & 0x1fffu, 0u);
      }
    }
  }
  EXPECT_EQ(mt::round_to_tf32(INFINITY), INFINITY);
  EXPECT_EQ(mt::round_to_tf32(-INFINITY), -INFINITY);
}

TEST(TF32, RoundToHalfAndBFloat16Helpers) {
  EXPECT_EQ(mt::round_to_half(1.0f + std::ldexp(1.0f, -11)), 1.0f);  // tie to even
  EXPECT_EQ(mt::round_to_half(1.0f + std::ldexp(3.0f, -11)), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(mt::round_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(mt::round_to_bfloat16(1.0f + std::ldexp(3.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
}

// ---- the CPU cast kernel --------------------------------------------------------------------

namespace {
std::vector<mt::Half> all_halves() {
  std::vector<mt::Half> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = mt::Half(static_cast<uint16_t>(i), mt::from_bits);
  return v;
}
void expect_same_float(float got, float want, size_t i) {
  if (std::isnan(want)) {
    ASSERT_TRUE(std::isnan(got)) << i;
    ASSERT_EQ(std::signbit(got), std::signbit(want)) << i;
  } else {
    ASSERT_EQ(bits_of(got), bits_of(want)) << i;
  }
}
void expect_same_half(mt::Half got, mt::Half want, size_t i) {
  if (std::isnan(float(want))) {
    ASSERT_TRUE(std::isnan(float(got))) << i;
    ASSERT_EQ(got.x & 0x8000, want.x & 0x8000) << i;
  } else {
    ASSERT_EQ(got.x, want.x) << i;
  }
}
}  // namespace

TEST(CastKernel, Float16ToFloat32AllPatterns) {
  const auto halves = all_halves();
  // Dense (F16C where available), plus an odd length for the scalar tail, plus a strided view.
  const mt::Tensor h = mt::from_vector(halves);
  const auto dense = h.to(mt::kFloat32).to_vector<float>();
  for (size_t i = 0; i < halves.size(); ++i) expect_same_float(dense[i], float(halves[i]), i);
  const auto tail = h.narrow(0, 3, 65531).to(mt::kFloat32).to_vector<float>();
  for (size_t i = 0; i < tail.size(); ++i) expect_same_float(tail[i], float(halves[i + 3]), i);
  const auto strided = h.view({256, 256}).t().to(mt::kFloat32).contiguous().to_vector<float>();
  for (size_t r = 0; r < 256; ++r)
    for (size_t c = 0; c < 256; ++c)
      expect_same_float(strided[r * 256 + c], float(halves[c * 256 + r]), r * 256 + c);
}

TEST(CastKernel, Float32ToFloat16MatchesScalarConversion) {
  std::vector<float> values;
  for (uint32_t i = 0; i < 65536; ++i)
    values.push_back(float(mt::Half(static_cast<uint16_t>(i), mt::from_bits)));
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) values.push_back(float_of(any_bits(rng)));
  for (int i = 0; i < 200000; ++i)
    values.push_back(std::exp2(exponent(rng)) * (i & 1 ? -1.0f : 1.0f));
  values.push_back(65520.0f);
  values.push_back(std::ldexp(1.0f, -25));
  values.push_back(1.0f + std::ldexp(1.0f, -11));  // a tie
  const mt::Tensor f = mt::from_vector(values);
  const auto dense = f.to(mt::kFloat16).to_vector<mt::Half>();
  for (size_t i = 0; i < values.size(); ++i) expect_same_half(dense[i], mt::Half(values[i]), i);
  const auto tail = f.narrow(0, 1, 1001).to(mt::kFloat16).to_vector<mt::Half>();
  for (size_t i = 0; i < tail.size(); ++i) expect_same_half(tail[i], mt::Half(values[i + 1]), i);
  const auto strided = f.slice(0, 0, std::nullopt, 3).to(mt::kFloat16).to_vector<mt::Half>();
  for (size_t i = 0; i < strided.size(); ++i)
    expect_same_half(strided[i], mt::Half(values[3 * i]), i);
}

TEST(CastKernel, BFloat16AndFloat64Casts) {
  std::vector<mt::BFloat16> all(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    all[i] = mt::BFloat16(static_cast<uint16_t>(i), mt::from_bits);
  const auto as_float = mt::from_vector(all).to(mt::kFloat32).to_vector<float>();
  for (size_t i = 0; i < all.size(); ++i) expect_same_float(as_float[i], float(all[i]), i);
  // float64 -> float16 goes through float32 (double rounding is what the scalar Half(double)
  // does too); check it agrees with Half(double).
  std::vector<double> d = {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 65519.9, -3.14159,
                           1e-8, 70000.0};
  const auto h = mt::from_vector(d).to(mt::kFloat16).to_vector<mt::Half>();
  for (size_t i = 0; i < d.size(); ++i) expect_same_half(h[i], mt::Half(d[i]), i);
}

// n random bit patterns as floats (NaNs, infinities and subnormals among them), then ties,
// NaN payloads, extremes and signed zeros.
static std::vector<float> random_float_bits(unsigned seed, int n) {
  std::vector<float> values;
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    values.push_back(f);
  }
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                        0xffa00000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x00000000u,
                        0x80000000u, 0x477fe000u, 0x477ff000u, 0x33000000u, 0x7f7f8000u}) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    values.push_back(f);
  }
  return values;
}

// The dense bfloat16 cast (branch-free, vectorised) must equal BFloat16(float) bit for bit,
// including ties, NaN, infinities and subnormals; and widening must be exact.
TEST(BFloat16, DenseCastKernelMatchesScalarConversion) {
  const std::vector<float> values = random_float_bits(7, 200000);
  const mantissa::Tensor t = mantissa::from_vector(values);
  const auto dense = t.to(mantissa::kBFloat16).to_vector<mantissa::BFloat16>();
  ASSERT_EQ(dense.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const mantissa::BFloat16 ref(values[i]);
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(static_cast<float>(dense[i]))) << i;
    } else {
      ASSERT_EQ(dense[i].x, ref.x) << "value " << values[i];
    }
  }
  const auto back = t.to(mantissa::kBFloat16).to(mantissa::kFloat32).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isnan(values[i])) {
      ASSERT_EQ(back[i], static_cast<float>(dense[i]));
    }
  }
}

// The linear kernels round float32 values in place through round_dense; it must give the bits of
// a narrow and a widen through a 16-bit buffer, NaNs included, on every length (vector bodies and
// scalar tails).
TEST(RoundDense, EqualsNarrowThenWidenForHalfAndBFloat16) {
  const std::vector<float> values = random_float_bits(11, 100003);
  const auto check = [&](auto tag, const char* name) {
    using T = decltype(tag);
    for (size_t n : {values.size(), size_t(7), size_t(16), size_t(33)}) {
      std::vector<T> narrow(n);
      std::vector<float> expected(n), got(n), in_place(values.begin(), values.begin() + n);
      mantissa::cpu::convert_dense(values.data(), narrow.data(), int64_t(n));
      mantissa::cpu::convert_dense(narrow.data(), expected.data(), int64_t(n));
      mantissa::cpu::round_dense(values.data(), got.data(), int64_t(n), T{});
      mantissa::cpu::round_dense(in_place.data(), in_place.data(), int64_t(n), T{});
      for (size_t i = 0; i < n; ++i) {
        uint32_t e, g, p;
        std::memcpy(&e, &expected[i], 4);
        std::memcpy(&g, &got[i], 4);
        std::memcpy(&p, &in_place[i], 4);
        ASSERT_EQ(g, e) << name << " element " << i << " of " << n;
        ASSERT_EQ(p, e) << name << " in place, element " << i << " of " << n;
      }
    }
  };
  check(mantissa::Half{}, "float16");
  check(mantissa::BFloat16{}, "bfloat16");
}
