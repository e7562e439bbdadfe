// Dense conversions between float32 and the half types — the hot casts of mixed precision, used
// by the cast kernel and by matmul's operand packing. float16 uses F16C when the CPU has it
// (checked at run time, so builds stay portable; F16C rounds to nearest even, like Half).
// bfloat16 is a bit shift one way and a branch-free rounding the other, which vectorises.
#pragma once

#include <cstdint>

#include "engine/half.h"

namespace mantissa::cpu {

void convert_dense(const float* src, Half* dst, int64_t n);
void convert_dense(const Half* src, float* dst, int64_t n);
void convert_dense(const float* src, BFloat16* dst, int64_t n);
void convert_dense(const BFloat16* src, float* dst, int64_t n);

// dst = src rounded to float16 / bfloat16 and widened back, in one pass (src == dst allowed):
// what a narrow and a widen through a 16-bit buffer give, bit for bit.
void round_dense(const float* src, float* dst, int64_t n, Half);
void round_dense(const float* src, float* dst, int64_t n, BFloat16);

}  // namespace mantissa::cpu
