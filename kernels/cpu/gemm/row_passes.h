// The elementwise passes around a linear layer's GEMM, over rows of a few to a few thousand
// floats: bias and ReLU on the output (rounded to the storage type for float16/bfloat16 layers),
// column sums for the bias gradient. Small layers'
// rows are shorter than a vector register, where the baseline build's 4-lane loops spend more
// time on remainders than on the rows; with AVX-512 each row is whole masked registers. Results
// are identical either way (same operations per element, column sums in row order).
#pragma once

#include <cstdint>

#include "engine/half.h"

namespace mantissa::cpu {

// row[j] = act(row[j] + bias[j]) for `rows` dense rows of n floats; bias may be null, and act is
// activation::relu (kernels/activation_math.h) or the identity.
void bias_relu_rows(float* out, int64_t rows, int64_t n, const float* bias, bool relu);

// The end of a bfloat16/float16 layer's forward, in one pass over `rows` dense rows of n floats
// of the GEMM's result v: round to T, add bias[j] and round again (bias may be null), ReLU when
// relu, store into out (dense, rows of n). The same values as round_dense, a float add and
// narrow_to (kernels/cpu/convert_dense.h) one after the other.
void round_bias_relu_rows(const float* v, int64_t rows, int64_t n, const float* bias, bool relu,
                          BFloat16* out);
void round_bias_relu_rows(const float* v, int64_t rows, int64_t n, const float* bias, bool relu,
                          Half* out);

// sums[j] += m[r * ld + j] in double, for r = 0, 1, ... rows - 1 in order (half types widened
// exactly, in registers).
void add_column_sums(double* sums, const float* m, int64_t rows, int64_t n, int64_t ld);
void add_column_sums(double* sums, const BFloat16* m, int64_t rows, int64_t n, int64_t ld);
void add_column_sums(double* sums, const Half* m, int64_t rows, int64_t n, int64_t ld);

}  // namespace mantissa::cpu
