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

}  // namespace mantissa::cpu
