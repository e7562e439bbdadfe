// Which cuDNN math types a convolution may run with, as a pure rule that the CPU tests can check
// (tests/test_conv.cpp), and the description of a convolution call that cuDNN errors carry.
//
// cuDNN (8 and 9) math types on float32 data: DEFAULT permits TF32 tensor cores on Ampere and
// newer, FMA forbids them, TENSOR_OP permits them, and TENSOR_OP_ALLOW_CONVERSION also lets cuDNN
// down-convert float32 operands to float16, which loses float32's exponent range (overflow above
// 65504, flush below 6e-8). So float32 under "highest" must run as FMA and under "high" may use
// TF32 but never the conversion; half types run on tensor cores with float accumulation, and the
// conversion is never wanted for any dtype. PyTorch's ConvolutionDescriptor makes the same choice
// (FMA when allow_tf32 is off, TENSOR_OP for half types, DEFAULT otherwise).
#pragma once

#include <cstdint>
#include <string>

#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/kernel_tables.h"
#include "engine/precision.h"
#include "engine/shape.h"

namespace mantissa {

// cudnnMathType_t's values (cudnn_graph.h), kept here so this header needs no cuDNN.
enum class ConvMath : uint8_t { Default = 0, TensorOp = 1, TensorOpAllowConversion = 2, Fma = 3 };

inline const char* conv_math_name(ConvMath m) {
  switch (m) {
    case ConvMath::Default:
      return "DEFAULT_MATH";
    case ConvMath::TensorOp:
      return "TENSOR_OP_MATH";
    case ConvMath::TensorOpAllowConversion:
      return "TENSOR_OP_MATH_ALLOW_CONVERSION";
    case ConvMath::Fma:
      return "FMA_MATH";
  }
  return "unknown math type";
}

// The math type set on the descriptor before asking cuDNN's heuristics: it tells them which
// kernels to consider (see PyTorch's Note [behavior of cudnnFind and cudnnGet]).
constexpr ConvMath conv_requested_math(DType dt, MatmulPrecision fp32_precision) {
  if (dt == DType::Float16 || dt == DType::BFloat16) return ConvMath::TensorOp;
  if (dt == DType::Float32 && fp32_precision == MatmulPrecision::Highest) return ConvMath::Fma;
  return ConvMath::Default;
}

// Whether an algorithm whose perf result reports math type `m` keeps the dtype's contract. The
// chosen algorithm's math type is then set on the descriptor, so this decides what runs.
// Float64 may take any of the others: its tensor-core kernels compute in IEEE double.
constexpr bool conv_math_allowed(DType dt, MatmulPrecision fp32_precision, ConvMath m) {
  switch (m) {
    case ConvMath::Fma:
      return true;
    case ConvMath::Default:
    case ConvMath::TensorOp:
      return !(dt == DType::Float32 && fp32_precision == MatmulPrecision::Highest);
    default:  // TensorOpAllowConversion, or a value this rule does not know
      return false;
  }
}

// "conv2d backward weight: input [2, 4, 9, 9], weight [6, 2, 3, 3], output [2, 6, 4, 7], float16,
// stride [2, 1], padding [1, 0], dilation [1, 2], groups 2, float32 precision highest".
inline std::string describe_conv(const char* op, const Shape& input, const Shape& weight,
                                 const Shape& output, DType dt, const Conv2dParams& p,
                                 MatmulPrecision fp32_precision) {
  return detail::str_cat(
      op, ": input ", input, ", weight ", weight, ", output ", output, ", ", dtype_name(dt),
      ", stride [", p.stride[0], ", ", p.stride[1], "], padding [", p.padding[0], ", ",
      p.padding[1], "], dilation [", p.dilation[0], ", ", p.dilation[1], "], groups ", p.groups,
      ", float32 precision ", fp32_precision == MatmulPrecision::Highest ? "highest" : "high");
}

}  // namespace mantissa
