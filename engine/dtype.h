// Element types and PyTorch's type-promotion rules.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "engine/half.h"

namespace mantissa {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8, Bool };
inline constexpr int kNumDTypes = 8;

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
      return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
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

// PyTorch's promote_types: bool < integers < floating; float16 with bfloat16 gives float32.
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
