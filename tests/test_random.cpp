// Random tensors and dropout: reproducibility from seeds and generators, each element's value
// against Philox computed here, sample statistics, range guarantees after rounding to the dtype,
// strided outputs, and dropout's mask, scaling, gradient and errors.
#include <climits>
#include <cmath>
#include <cstdint>
#include <set>

// Before mantissa.h: philox_normal calls log/sqrt/cos unqualified, which mantissa's Tensor
// overloads would otherwise hide.
#include "engine/philox.h"
#include "kernels/cpu/philox_batch.h"

#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;

namespace {

struct Moments {
  double mean, var, min, max;
};
Moments moments(const Tensor& t) {
  const auto v = t.to_vector<double>();
  double s = 0, mn = INFINITY, mx = -INFINITY;
  for (double x : v) {
    s += x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  const double mean = s / v.size();
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, ss / (v.size() - 1), mn, mx};
}

double fraction_equal(const Tensor& t, double value) {
  const auto v = t.to_vector<double>();
  int64_t n = 0;
  for (double x : v) n += x == value;
  return static_cast<double>(n) / v.size();
}

}  // namespace

// ---- reproducibility --------------------------------------------------------------------------
TEST(Random, SameSeedGivesSameTensors) {
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    mt::manual_seed(123);
    const Tensor u1 = mt::rand({5, 7}, dt), n1 = mt::randn({33}, dt);
    mt::manual_seed(123);
    const Tensor u2 = mt::rand({5, 7}, dt), n2 = mt::randn({33}, dt);
    EXPECT_TRUE(mt::equal(u1, u2)) << mt::dtype_name(dt);
    EXPECT_TRUE(mt::equal(n1, n2)) << mt::dtype_name(dt);
  }
  mt::Generator g1(99), g2(99);
  EXPECT_TRUE(mt::equal(mt::randint(0, 1000, {50}, {}, &g1), mt::randint(0, 1000, {50}, {}, &g2)));
  Tensor b1 = mt::empty({64}), b2 = mt::empty({64});
  mt::bernoulli_(b1, 0.5, &g1);
  mt::bernoulli_(b2, 0.5, &g2);
  EXPECT_TRUE(mt::equal(b1, b2));
  // An explicit generator does not disturb the default one.
  mt::manual_seed(5);
  const Tensor d1 = mt::rand({10});
  mt::manual_seed(5);
  mt::rand({10}, {}, &g1);
  EXPECT_TRUE(mt::equal(mt::rand({10}), d1));
}

TEST(Random, DifferentSeedsAndSuccessiveCallsDiffer) {
  mt::manual_seed(1);
  const Tensor a = mt::rand({100});
  const Tensor b = mt::rand({100});
  mt::manual_seed(2);
  const Tensor c = mt::rand({100});
  EXPECT_FALSE(mt::equal(a, b));
  EXPECT_FALSE(mt::equal(a, c));
  mt::Generator g1(1), g2(2);
  EXPECT_FALSE(mt::equal(mt::randn({100}, {}, &g1), mt::randn({100}, {}, &g2)));
}

TEST(Random, ElementIDrawsPhiloxCounterOffsetPlusI) {
  mt::Generator g(0xC0FFEE);
  mt::rand({3}, {}, &g);  // advance the offset so it is not zero
  const uint64_t offset = g.offset();
  const int64_t n = 70000;  // large enough to be split across threads
  const Tensor u32 = mt::rand({n}, mt::kFloat32, &g);
  const Tensor u64 = mt::rand({n}, mt::kFloat64, &g);
  const Tensor z = mt::randn({n}, mt::kFloat64, &g);
  const auto v32 = u32.to_vector<float>();
  const auto v64 = u64.to_vector<double>(), vz = z.to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    const mt::Philox4 r32 = mt::philox4x32(0xC0FFEE, offset + i);
    ASSERT_EQ(v32[i], static_cast<float>((r32.v[0] >> 8) * 0x1p-24)) << i;
    const mt::Philox4 r64 = mt::philox4x32(0xC0FFEE, offset + n + i);
    const uint64_t bits =
        ((static_cast<uint64_t>(r64.v[0]) << 21) ^ (r64.v[1] >> 11)) & ((1ull << 53) - 1);
    ASSERT_EQ(v64[i], bits * 0x1p-53) << i;
    ASSERT_EQ(vz[i], mt::philox_normal(mt::philox4x32(0xC0FFEE, offset + 2 * n + i))) << i;
  }
  EXPECT_EQ(g.offset(), offset + 3 * n);
}

// The CPU kernels draw 64 consecutive counters at a time (vectorised where the CPU has AVX-512):
// the same words as philox4x32 counter by counter, across the carry into the counter's high word
// and the wrap at 2^64.
TEST(Random, PhiloxBatchEqualsPhiloxCounterByCounter) {
  const uint64_t seeds[] = {0, 0xC0FFEE, 0xFFFFFFFFFFFFFFFFull, 0x123456789ABCDEF0ull};
  const uint64_t starts[] = {0, 1, 0xFFFFFFF0ull, 0x1FFFFFFC7ull, 0xFFFFFFFFFFFFFFE0ull, 987654321};
  for (uint64_t seed : seeds)
    for (uint64_t start : starts) {
      mt::cpu::PhiloxBatch r;
      mt::cpu::philox4x32_batch(seed, start, r);
      for (int l = 0; l < mt::cpu::kPhiloxBatch; ++l) {
        const mt::Philox4 want = mt::philox4x32(seed, start + static_cast<uint64_t>(l));
        for (int k = 0; k < 4; ++k)
          ASSERT_EQ(r.w[k][l], want.v[k]) << "seed " << seed << " counter " << start << "+" << l;
      }
    }
}

// Bernoulli draws compare the 53 random bits with an integer bound: the same decision as the
// double uniform against p, for every p, on both sides of the bound.
TEST(Random, Bits53BoundDecidesAsTheDoubleUniform) {
  const double xs[] = {0.0, -0.5, 0x1p-60,     0x1p-53, 0x1.8p-53, 0.1, 0.25,
                       0.5, 0.9,  1 - 0x1p-53, 1.0,     1.5,       NAN};
  for (double x : xs) {
    const uint64_t bound = mt::philox_bits53_bound(x);
    for (uint64_t c = 0; c < 20000; ++c) {
      const mt::Philox4 r = mt::philox4x32(17, c);
      EXPECT_EQ(mt::philox_bits53(r.v[0], r.v[1]) < bound,
                mt::philox_uniform01_double(r.v[0], r.v[1]) < x)
          << x;
    }
    // Bit patterns at the bound itself, where a rounding slip would show.
    for (uint64_t d = 0; d < 3; ++d)
      for (uint64_t bits : {bound - d, bound + d}) {
        if (bits >= (1ull << 53)) continue;
        const auto hi = static_cast<uint32_t>(bits >> 21), lo = static_cast<uint32_t>(bits << 11);
        ASSERT_EQ(mt::philox_bits53(hi, lo), bits);
        EXPECT_EQ(bits < bound, mt::philox_uniform01_double(hi, lo) < x) << x << " " << bits;
      }
  }
}

// ---- statistics -------------------------------------------------------------------------------
TEST(Random, UniformStatistics) {
  mt::manual_seed(10);
  const double low = -3.0, high = 5.0, n = 1e5;
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    Tensor t = mt::empty({static_cast<int64_t>(n)}, dt);
    mt::uniform_(t, low, high);
    const Moments m = moments(t);
    const double sd = (high - low) / std::sqrt(12.0);
    EXPECT_NEAR(m.mean, (low + high) / 2, 5 * sd / std::sqrt(n)) << mt::dtype_name(dt);
    EXPECT_NEAR(m.var, sd * sd, 0.03 * sd * sd) << mt::dtype_name(dt);
    EXPECT_GE(m.min, low);
    EXPECT_LT(m.max, high);
    EXPECT_LT(m.min, low + 0.01);
    EXPECT_GT(m.max, high - 0.05);
  }
}

TEST(Random, NormalStatistics) {
  mt::manual_seed(11);
  const double mean = 2.0, sd = 3.0, n = 1e5;
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    Tensor t = mt::empty({static_cast<int64_t>(n)}, dt);
    mt::normal_(t, mean, sd);
    const Moments m = moments(t);
    EXPECT_NEAR(m.mean, mean, 5 * sd / std::sqrt(n)) << mt::dtype_name(dt);
    EXPECT_NEAR(std::sqrt(m.var), sd, 0.02 * sd) << mt::dtype_name(dt);
    // About 68.3% within one standard deviation.
    const auto v = t.to_vector<double>();
    double within = 0;
    for (double x : v) within += std::fabs(x - mean) < sd;
    EXPECT_NEAR(within / n, 0.6827, 0.01) << mt::dtype_name(dt);
  }
  const Tensor s = mt::randn({100000}, mt::kFloat64);
  const Moments ms = moments(s);
  EXPECT_NEAR(ms.mean, 0.0, 0.016);
  EXPECT_NEAR(ms.var, 1.0, 0.02);
}

TEST(Random, BernoulliFrequency) {
  mt::manual_seed(12);
  const double p = 0.3;
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kInt64, mt::kUInt8, mt::kBool}) {
    Tensor t = mt::empty({100000}, dt);
    mt::bernoulli_(t, p);
    const double ones = fraction_equal(t, 1.0), zeros = fraction_equal(t, 0.0);
    EXPECT_EQ(ones + zeros, 1.0) << mt::dtype_name(dt);
    EXPECT_NEAR(ones, p, 0.008) << mt::dtype_name(dt);
  }
  Tensor t = mt::empty({1000});
  mt::bernoulli_(t, 0.0);
  EXPECT_EQ(fraction_equal(t, 0.0), 1.0);
  mt::bernoulli_(t, 1.0);
  EXPECT_EQ(fraction_equal(t, 1.0), 1.0);
}

TEST(Random, RandintRangeAndCoverage) {
  mt::manual_seed(13);
  for (mt::DType dt : {mt::kInt64, mt::kInt32, mt::kFloat32, mt::kFloat64}) {
    const Tensor t = mt::randint(-3, 7, {10000}, dt);
    EXPECT_EQ(t.dtype(), dt);
    std::set<double> seen;
    for (double x : t.to_vector<double>()) {
      ASSERT_GE(x, -3) << mt::dtype_name(dt);
      ASSERT_LT(x, 7) << mt::dtype_name(dt);
      ASSERT_EQ(x, std::floor(x));
      seen.insert(x);
    }
    EXPECT_EQ(seen.size(), 10u) << mt::dtype_name(dt);
  }
  // Ranges beyond 32 bits use all 64 random bits.
  const Tensor big = mt::randint(0, int64_t{1} << 40, {2000});
  EXPECT_GT(moments(big).max, static_cast<double>(int64_t{1} << 39));
  const Tensor extreme = mt::randint(INT64_MIN, INT64_MAX, {100});
  for (int64_t x : extreme.to_vector<int64_t>()) EXPECT_LT(x, INT64_MAX);
}

// ---- rounding never reaches `high` ------------------------------------------------------------
TEST(Random, UniformStaysBelowHighAfterRounding) {
  mt::manual_seed(14);
  struct Case {
    mt::DType dt;
    double low, high;
  };
  // Narrow ranges just below a representable bound: most samples round up to `high` unless
  // they are pulled back.
  const Case cases[] = {{mt::kFloat16, 0.0, 1.0},        {mt::kFloat16, 1000.0, 1001.0},
                        {mt::kBFloat16, 0.0, 1.0},       {mt::kBFloat16, 255.0, 256.0},
                        {mt::kFloat32, 0.999999, 1.0},   {mt::kFloat32, -1.0, -0.9999999},
                        {mt::kFloat16, -2.0, 0.0},       {mt::kBFloat16, 1.0, 1.001},
                        {mt::kFloat64, 1.0, 1.0 + 1e-15}};
  for (const Case& c : cases) {
    Tensor t = mt::empty({100000}, c.dt);
    mt::uniform_(t, c.low, c.high);
    const Moments m = moments(t);
    EXPECT_LT(m.max, c.high) << mt::dtype_name(c.dt) << " [" << c.low << ", " << c.high << ")";
    EXPECT_GE(m.min, c.low - std::fabs(c.low) * 1e-2) << mt::dtype_name(c.dt);
  }
  // Default rand: [0, 1) in every floating dtype.
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    EXPECT_LT(moments(mt::rand({100000}, dt)).max, 1.0) << mt::dtype_name(dt);
  }
}

// ---- strided outputs --------------------------------------------------------------------------
TEST(Random, NonContiguousOutputGetsSameValuesInLogicalOrder) {
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat64}) {
    mt::Generator g1(77), g2(77);
    Tensor dense = mt::empty({6, 5}, dt);
    Tensor base = mt::zeros({5, 12}, dt);
    Tensor strided = base.slice(1, 0, std::nullopt, 2).t();  // [6, 5], strides (2, 12)
    ASSERT_FALSE(strided.is_contiguous());
    mt::uniform_(dense, -1, 1, &g1);
    mt::uniform_(strided, -1, 1, &g2);
    EXPECT_TRUE(mt::equal(dense, strided.contiguous())) << mt::dtype_name(dt);
    // The skipped columns were not written.
    EXPECT_EQ(fraction_equal(base.slice(1, 1, std::nullopt, 2), 0.0), 1.0);
    mt::normal_(dense, 0, 1, &g1);
    mt::normal_(strided, 0, 1, &g2);
    EXPECT_TRUE(mt::equal(dense, strided.contiguous())) << mt::dtype_name(dt);
    mt::bernoulli_(dense, 0.5, &g1);
    mt::bernoulli_(strided, 0.5, &g2);
    EXPECT_TRUE(mt::equal(dense, strided.contiguous())) << mt::dtype_name(dt);
  }
}

// ---- dropout ----------------------------------------------------------------------------------
TEST(Dropout, ZeroFractionAndScaling) {
  mt::manual_seed(20);
  for (mt::DType dt : mt::testing::floating_dtypes()) {
    for (double p : {0.1, 0.5, 0.8}) {
      const Tensor x = mt::testing::random_tensor({4, 100, 250}, dt, true, 0.5, 2.0);
      const Tensor y = mt::dropout(x, p, /*training=*/true);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_EQ(y.shape(), x.shape());
      const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
      // Kept elements are x scaled by 1/(1-p) (the scale rounded to dtype, then the product).
      const double scale = mt::full({}, 1.0 / (1.0 - p), dt).item<double>();
      const auto tol = mt::testing::tolerance_for(dt);
      int64_t zeros = 0, bad = 0;
      for (size_t i = 0; i < xv.size(); ++i) {
        if (yv[i] == 0.0) {
          ++zeros;
        } else if (std::fabs(yv[i] - xv[i] * scale) >
                   tol.atol + tol.rtol * std::fabs(xv[i] * scale)) {
          ++bad;
        }
      }
      EXPECT_EQ(bad, 0) << mt::dtype_name(dt) << " p=" << p;
      EXPECT_NEAR(static_cast<double>(zeros) / xv.size(), p, 0.01)
          << mt::dtype_name(dt) << " p=" << p;
    }
  }
}

TEST(Dropout, IdentityCasesAndAllZeros) {
  const Tensor x = mt::randn({4, 5});
  EXPECT_TRUE(mt::dropout(x, 0.5, /*training=*/false).is_same(x));
  EXPECT_TRUE(mt::dropout(x, 0.0, /*training=*/true).is_same(x));
  const Tensor z = mt::dropout(x, 1.0, /*training=*/true);
  EXPECT_EQ(fraction_equal(z, 0.0), 1.0);
  EXPECT_EQ(z.shape(), x.shape());
}

TEST(Dropout, SameGeneratorStateSameMask) {
  const Tensor x = mt::randn({1000});
  mt::Generator g1(3), g2(3);
  EXPECT_TRUE(mt::equal(mt::dropout(x, 0.3, true, &g1), mt::dropout(x, 0.3, true, &g2)));
  EXPECT_FALSE(mt::equal(mt::dropout(x, 0.3, true, &g1), mt::dropout(x, 0.3, true, &g1)));
}

TEST(Dropout, Gradient) {
  mt::manual_seed(21);
  const double p = 0.4;
  const Tensor x =
      mt::testing::random_tensor({30, 40}, mt::kFloat64, false, 0.5, 2.0).requires_grad_();
  const Tensor y = mt::dropout(x, p, true);
  const Tensor g = mt::randn({30, 40}, mt::kFloat64);
  y.backward(g);
  // d y / d x = mask / (1 - p) = y / x elementwise (x is never zero here).
  const auto xv = x.to_vector<double>(), yv = y.detach().to_vector<double>();
  const auto gv = g.to_vector<double>(), gx = x.grad().to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(gx[i], gv[i] * yv[i] / xv[i], 1e-12) << i;

  // Finite differences with the mask held fixed by re-seeding the generator on every call.
  const Tensor leaf = mt::randn({3, 4}, mt::kFloat64).requires_grad_();
  EXPECT_TRUE(mt::autograd::gradcheck(
      [](const auto& in) {
        mt::Generator gen(8);
        return mt::dropout(in[0], 0.5, true, &gen);
      },
      {leaf}));

  // p == 1: zero gradient, not none.
  const Tensor w = mt::randn({5}, mt::kFloat64).requires_grad_();
  mt::dropout(w, 1.0, true).backward(mt::ones({5}, mt::kFloat64));
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(fraction_equal(w.grad(), 0.0), 1.0);
}

TEST(Dropout, Errors) {
  const Tensor x = mt::ones({3});
  mt::testing::expect_error([&] { mt::dropout(x, -0.1, true); },
                            {"dropout", "between 0 and 1", "-0.1"});
  mt::testing::expect_error([&] { mt::dropout(x, 1.5, false); },
                            {"dropout", "between 0 and 1", "1.5"});
  mt::testing::expect_error([&] { mt::dropout(mt::ones({3}, mt::kInt64), 0.5, true); },
                            {"dropout", "floating"});
}
