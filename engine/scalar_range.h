// Whether a number fits a dtype, by PyTorch's rule for the values fill_, full and masked_fill_
// store (c10::overflows, which they apply and a cast does not).
#pragma once

#include "engine/dtype.h"
#include "engine/scalar.h"

namespace mantissa {

// False when converting `value` to `dtype` overflows:
//  - to a floating dtype, a finite value beyond the dtype's largest magnitude (65504.5 to
//    float16), or an infinity where the dtype has none (float8_e4m3fn); NaN always converts;
//  - to an integer dtype, a floating value that is NaN, infinite, below the lowest value or at or
//    above the largest plus one (255.9 stores 255 in uint8, 256.0 overflows), or an integer out of
//    range, except that a negative integer wraps into uint8 down to -255 (-1 stores 255);
//  - to bool, never.
bool fits(const Scalar& value, DType dtype);

// Throws "op: value v cannot be converted to dtype d without overflow" unless fits(value, dtype).
void check_fits(const char* op, const Scalar& value, DType dtype);

}  // namespace mantissa
