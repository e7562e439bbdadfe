#include "engine/dtype.h"

#include <ostream>
#include <string>

#include "engine/error.h"

namespace mantissa {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::UInt8:
      return "uint8";
    case DType::Bool:
      return "bool";
    case DType::Float8E4M3FN:
      return "float8_e4m3fn";
    case DType::Float8E5M2:
      return "float8_e5m2";
  }
  return "unknown";
}

DType parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias aliases[] = {{"float32", kFloat32},
                                      {"float", kFloat32},
                                      {"fp32", kFloat32},
                                      {"float64", kFloat64},
                                      {"double", kFloat64},
                                      {"fp64", kFloat64},
                                      {"float16", kFloat16},
                                      {"half", kFloat16},
                                      {"fp16", kFloat16},
                                      {"bfloat16", kBFloat16},
                                      {"bf16", kBFloat16},
                                      {"int32", kInt32},
                                      {"int", kInt32},
                                      {"int64", kInt64},
                                      {"long", kInt64},
                                      {"uint8", kUInt8},
                                      {"bool", kBool},
                                      {"float8_e4m3fn", kFloat8E4M3FN},
                                      {"float8_e5m2", kFloat8E5M2}};
  for (const auto& a : aliases) {
    if (a.name == name) return a.dtype;
  }
  std::string names;  // every dtype's name, for the refusal
  for (int i = 0; i < kNumDTypes; ++i)
    names += (i > 0 ? ", " : "") + std::string(dtype_name(static_cast<DType>(i)));
  MT_THROW("unknown dtype '", name, "' (expected one of ", names, ")");
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::ostream& operator<<(std::ostream& os, Half h) { return os << static_cast<float>(h); }
std::ostream& operator<<(std::ostream& os, BFloat16 b) { return os << static_cast<float>(b); }
std::ostream& operator<<(std::ostream& os, Float8E4M3FN f) { return os << static_cast<float>(f); }
std::ostream& operator<<(std::ostream& os, Float8E5M2 f) { return os << static_cast<float>(f); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  MT_CHECK(!is_float8(a) && !is_float8(b),
           "promotion of float8 types is not supported: ", dtype_name(a), " with ", dtype_name(b),
           " (cast one to the other's dtype first)");
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (is_reduced_float(a) && is_reduced_float(b)) return DType::Float32;  // f16 with bf16
    return itemsize(a) >= itemsize(b) ? (is_reduced_float(a) ? b : a) : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integral (uint8, int32, int64): the wider signed type wins.
  return itemsize(a) >= itemsize(b) ? a : b;
}

}  // namespace mantissa
