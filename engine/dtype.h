// Element types and PyTorch's type-promotion rules.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "engine/float8.h"
#include "engine/half.h"

namespace mantissa {

// The float8 types come after the others, which keep their numbers.
enum class DType : uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int32,
  Int64,
  UInt8,
  Bool,
  Float8E4M3FN,
  Float8E5M2
};
inline constexpr int kNumDTypes = 10;

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kDouble = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kLong = DType::Int64;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kBool = DType::Bool;
// The 8-bit floats of FP8 training (engine/float8.h). Storage types: tensors of them are made by
// casts (.to) and read back by casts; arithmetic kernels do not take them.
inline constexpr DType kFloat8E4M3FN = DType::Float8E4M3FN;
inline constexpr DType kFloat8E5M2 = DType::Float8E5M2;

constexpr int64_t itemsize(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64:
      return 8;
    case DType::Float32:
    case DType::Int32:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::UInt8:
    case DType::Bool:
    case DType::Float8E4M3FN:
    case DType::Float8E5M2:
      return 1;
  }
  return 0;
}
constexpr bool is_float8(DType t) { return t == DType::Float8E4M3FN || t == DType::Float8E5M2; }
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 ||
         t == DType::BFloat16 || is_float8(t);
}
constexpr bool is_reduced_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::Int32 || t == DType::Int64 || t == DType::UInt8 ||
         (include_bool && t == DType::Bool);
}

// "float32", "bfloat16", ... (PyTorch's spelling without the "torch." prefix).
std::string_view dtype_name(DType t);
// Parses the names above plus "float", "double", "half", "fp16", "bf16", "long", "int".
DType parse_dtype(std::string_view name);
std::ostream& operator<<(std::ostream& os, DType t);

// PyTorch's promote_types: bool < integers < floating; float16 with bfloat16 gives float32. A
// float8 type promotes only with itself (PyTorch: "Promotion for Float8 Types is not supported").
DType promote_types(DType a, DType b);

// The dtype a new floating tensor gets when none is given (torch.get_default_dtype()).
inline constexpr DType kDefaultFloat = DType::Float32;

// C++ type <-> DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<Float8E4M3FN> {
  static constexpr DType value = DType::Float8E4M3FN;
};
template <>
struct dtype_of<Float8E5M2> {
  static constexpr DType value = DType::Float8E5M2;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace mantissa
