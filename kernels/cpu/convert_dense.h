// Dense conversions between float32 and the half types — the hot casts of mixed precision, used
// by the cast kernel and by matmul's operand packing. float16 uses F16C when the CPU has it
// (checked at run time, so builds stay portable; F16C rounds to nearest even, like Half).
// bfloat16 is a bit shift one way and a branch-free rounding the other, which vectorises.
#pragma once

#include <cstdint>

#include "engine/float8.h"
#include "engine/half.h"
#include "kernels/cpu/worker_pool.h"

namespace mantissa::cpu {

void convert_dense(const float* src, Half* dst, int64_t n);
void convert_dense(const Half* src, float* dst, int64_t n);
void convert_dense(const float* src, BFloat16* dst, int64_t n);
void convert_dense(const BFloat16* src, float* dst, int64_t n);
// Float8 widened, exactly (every float8 value is a bfloat16 value), through a table of the 256
// codes: the operands of a scaled matrix product.
void convert_dense(const Float8E4M3FN* src, BFloat16* dst, int64_t n);
void convert_dense(const Float8E5M2* src, BFloat16* dst, int64_t n);
void convert_dense(const Float8E4M3FN* src, float* dst, int64_t n);
void convert_dense(const Float8E5M2* src, float* dst, int64_t n);

// Elements from which a dense conversion is split across the worker pool: a conversion costs well
// under a nanosecond per element, so below this a wake-up of the pool's workers costs about what
// the second core would save.
inline constexpr int64_t kConvertGrain = int64_t(1) << 18;

// convert_dense split across the worker pool from kConvertGrain elements (the casts of an
// autocast step: every weight to 16 bits, every weight gradient back).
template <typename From, typename To>
void convert_dense_parallel(const From* src, To* dst, int64_t n) {
  parallel_ranges(
      n, [&](int64_t b, int64_t e) { convert_dense(src + b, dst + b, e - b); }, n, kConvertGrain);
}

// dst = src rounded to float16 / bfloat16 and widened back, in one pass (src == dst allowed):
// what a narrow and a widen through a 16-bit buffer give, bit for bit.
void round_dense(const float* src, float* dst, int64_t n, Half);
void round_dense(const float* src, float* dst, int64_t n, BFloat16);

}  // namespace mantissa::cpu
