// Inputs for the fused linear paths with NaN and infinities planted: test_linear_nan.cpp checks
// the CPU against PyTorch's semantics, test_cuda_linear.cpp checks CUDA against the CPU.
//
// Every finite value is a nonzero multiple of 1/4 in [-1, 1] and the layers are small, so the
// float32 GEMMs are exact and half types round little: finite values are compared with small
// tolerances, and what the tests are about is where NaN and inf land. N and K are multiples of 8
// so that on CUDA every cuBLASLt epilogue applies (GELU's aux layout).
// No GEMM multiplies 0 by a non-finite value (the only zeros are ReLU's, and the rows of x that
// hold NaN or inf get no zero gradient: checked for these patterns), because whether 0 * inf
// gives NaN depends on whether a GEMM skips zeros, which no BLAS promises.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include <mantissa.h>

namespace mantissa::testing {

struct SpecialLinearCase {
  static constexpr int64_t M = 6, K = 8, N = 16, N2 = 8;
  // float64, on the CPU: x [M,K], w1 [N,K], b1 [N], w2 [N2,N], b2 [N2], and the upstream
  // gradients gy1 [M,N] (of linear(x, w1, b1, act)) and gy2 [M,N2] (of the two-layer block).
  Tensor x, w1, b1, w2, b2, gy1, gy2;
};

// Nonzero multiples of 1/4 in [-1, 1], a fixed pattern per seed.
inline std::vector<double> quarter_values(int64_t n, int seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int q = static_cast<int>((i * 5 + seed * 3 + (i * i) % 7) % 8);  // 0..7
    v[static_cast<size_t>(i)] = (q < 4 ? -(q + 1) : (q - 3)) * 0.25;
  }
  return v;
}

// with_inf: besides NaN in x[1, 2], +inf in x[3, 0] (w1's column 0 is made positive, so row 3 of
// the pre-activation is +inf, or NaN where the bias is -inf), and in b1 -inf at 2 and +inf at 4.
inline SpecialLinearCase special_linear_case(bool with_inf) {
  using S = SpecialLinearCase;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x = quarter_values(S::M * S::K, 1), w1 = quarter_values(S::N * S::K, 2),
                      b1 = quarter_values(S::N, 3);
  x[1 * S::K + 2] = nan;
  if (with_inf) {
    x[3 * S::K + 0] = inf;
    for (int64_t n = 0; n < S::N; ++n) w1[n * S::K] = std::fabs(w1[n * S::K]);
    b1[2] = -inf;
    b1[4] = inf;
  }
  auto make = [](const std::vector<double>& v, const Shape& s) { return from_vector(v, s); };
  SpecialLinearCase c;
  c.x = make(x, {S::M, S::K});
  c.w1 = make(w1, {S::N, S::K});
  c.b1 = make(b1, {S::N});
  c.w2 = make(quarter_values(S::N2 * S::N, 4), {S::N2, S::N});
  c.b2 = make(quarter_values(S::N2, 5), {S::N2});
  c.gy1 = make(quarter_values(S::M * S::N, 6), {S::M, S::N});
  c.gy2 = make(quarter_values(S::M * S::N2, 7), {S::M, S::N2});
  return c;
}

}  // namespace mantissa::testing
