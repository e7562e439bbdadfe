// Float and double overloads of the math functions the CUDA kernels call, spelled with the C
// names (expf, sqrtf, ...) so that a float argument can never end up in the double routine:
// that would be slower on the device and would round differently from the CPU's float math.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace mantissa::cuda::dmath {

#define MT_DEVICE_MATH_1(name)                                            \
  __device__ __forceinline__ float name(float x) { return ::name##f(x); } \
  __device__ __forceinline__ double name(double x) { return ::name(x); }
MT_DEVICE_MATH_1(exp)
MT_DEVICE_MATH_1(log)
MT_DEVICE_MATH_1(sqrt)
MT_DEVICE_MATH_1(fabs)
#undef MT_DEVICE_MATH_1

__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }

}  // namespace mantissa::cuda::dmath
