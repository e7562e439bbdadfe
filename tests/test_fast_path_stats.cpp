// The fast-path counters (engine/fast_path_stats.h): rows by path, outcome, name and dtype; the
// strict modes; switching a path off; reset; and that the CPU kernels count no CUDA path.
#include <string>
#include <thread>
#include <vector>

#include "engine/fast_path_stats.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mt::nn::functional;
using mt::Tensor;

namespace {

// Restores both strict modes and clears the counters around a test.
class FastPathStats : public ::testing::Test {
 protected:
  void SetUp() override { mt::reset_fast_path_stats(); }
  void TearDown() override {
    mt::set_strict_fast_paths(saved_strict_);
    mt::set_strict_fast_path("test.path", false);
    mt::reset_fast_path_stats();
  }
  bool saved_strict_ = mt::strict_fast_paths();
};

TEST_F(FastPathStats, CountsByPathNameAndDtypeAndResetClears) {
  mt::detail::count_fast_path("test.path", "GELU_BIAS", mt::kBFloat16);
  mt::detail::count_fast_path("test.path", "GELU_BIAS", mt::kBFloat16);
  mt::detail::count_fast_path("test.path", "GELU_BIAS", mt::kFloat16);
  mt::detail::count_fast_path("test.path", "fused");
  mt::detail::count_fast_path("other.path", "GELU_BIAS", mt::kBFloat16);
  // The same names from another call site (other pointers) count in the same row.
  static const std::string path = "test.path", what = "GELU_BIAS";
  mt::detail::count_fast_path(path.c_str(), what.c_str(), mt::kBFloat16);

  const mt::FastPathStats s = mt::fast_path_stats();
  EXPECT_EQ(s.ran("test.path", "GELU_BIAS", mt::kBFloat16), 3);
  EXPECT_EQ(s.ran("test.path", "GELU_BIAS", mt::kFloat16), 1);
  EXPECT_EQ(s.ran("test.path", "GELU_BIAS", mt::kFloat32), 0);
  EXPECT_EQ(s.ran("test.path", "GELU_BIAS"), 4);  // every dtype
  EXPECT_EQ(s.ran("test.path", "fused"), 1);
  EXPECT_EQ(s.ran("other.path", "GELU_BIAS"), 1);
  EXPECT_EQ(s.fell_back("test.path"), 0);
  EXPECT_EQ(s.rows().size(), 4u);
  EXPECT_NE(s.to_string().find("test.path ran GELU_BIAS bfloat16: 3\n"), std::string::npos)
      << s.to_string();

  mt::reset_fast_path_stats();
  EXPECT_EQ(mt::fast_path_stats().ran("test.path", "GELU_BIAS"), 0);
  EXPECT_TRUE(mt::fast_path_stats().rows().empty());
}

TEST_F(FastPathStats, StrictModeThrowsOnlyForRefusals) {
  for (bool strict : {false, true}) {
    mt::set_strict_fast_paths(strict);
    EXPECT_EQ(mt::strict_fast_paths(), strict);
    // A route chosen by design (float64, a layout, an empty shape) is counted and never an
    // error; a refusal (the library was asked and declined) is one in strict mode.
    EXPECT_FALSE(mt::detail::count_fallback("test.path", "Layout", /*refusal=*/false));
    EXPECT_EQ(mt::detail::count_fallback("test.path", "NoAlgorithm", /*refusal=*/true), strict);
  }
  const mt::FastPathStats s = mt::fast_path_stats();
  EXPECT_EQ(s.fell_back("test.path", "Layout"), 2);
  EXPECT_EQ(s.fell_back("test.path", "NoAlgorithm"), 2);
  EXPECT_EQ(s.fell_back("test.path"), 4);
  EXPECT_EQ(s.refused("test.path"), 2);
  EXPECT_EQ(s.refused("test.path", "Layout"), 0);
  EXPECT_EQ(s.ran("test.path", "Layout"), 0);  // a fallback is not a run
}

TEST_F(FastPathStats, AStrictPathMakesEveryFallbackOfItAnError) {
  mt::set_strict_fast_paths(false);
  mt::set_strict_fast_path("test.path", true);
  EXPECT_TRUE(mt::strict_fast_path("test.path"));
  EXPECT_FALSE(mt::strict_fast_path("other.path"));
  EXPECT_TRUE(mt::detail::count_fallback("test.path", "Mask", /*refusal=*/false));
  EXPECT_FALSE(mt::detail::count_fallback("other.path", "Mask", /*refusal=*/false));
  mt::set_strict_fast_path("test.path", false);
  EXPECT_FALSE(mt::detail::count_fallback("test.path", "Mask", /*refusal=*/false));
  EXPECT_EQ(mt::fast_path_stats().fell_back("test.path", "Mask"), 2);
}

TEST_F(FastPathStats, PathsCanBeSwitchedOffAndOnAgain) {
  EXPECT_TRUE(mt::fast_path_enabled("test.path"));
  mt::set_fast_path_enabled("test.path", false);
  EXPECT_FALSE(mt::fast_path_enabled("test.path"));
  EXPECT_TRUE(mt::fast_path_enabled("other.path"));
  mt::set_fast_path_enabled("test.path", false);  // twice: once back on is enough
  mt::set_fast_path_enabled("test.path", true);
  EXPECT_TRUE(mt::fast_path_enabled("test.path"));
}

TEST_F(FastPathStats, ConcurrentCountsAreAllKept) {
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kPerThread; ++i) mt::detail::count_fast_path("test.path", "fused");
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mt::fast_path_stats().ran("test.path", "fused"), 4 * kPerThread);
}

TEST_F(FastPathStats, CpuKernelsCountNoCudaPath) {
  using Act = mt::LinearActivation;
  const Tensor x = mt::randn({4, 8}), w = mt::randn({16, 8}), b = mt::randn({16});
  for (Act act : {Act::None, Act::Relu, Act::GeluTanh}) {
    const Tensor xg = x.detach().requires_grad_();
    mt::sum(F::linear_act_linear(xg, w, b, act, mt::randn({3, 16}), Tensor())).backward();
  }
  const mt::FastPathStats stats = mt::fast_path_stats();
  for (const auto& row : stats.rows())
    EXPECT_NE(row.path.rfind("cuda.", 0), 0u) << row.path << " " << row.what;
}

}  // namespace
