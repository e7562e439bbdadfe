#include "engine/scalar_range.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "engine/error.h"

namespace mantissa {

namespace {

struct Range {
  double lowest, max;  // of the values the dtype holds
  bool has_infinity;
};

Range floating_range(DType dtype) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  switch (dtype) {
    case DType::Float64:
      return {-kInf, kInf, true};
    case DType::Float32: {
      const double m = std::numeric_limits<float>::max();
      return {-m, m, true};
    }
    case DType::Float16:
      return {-65504.0, 65504.0, true};
    case DType::BFloat16:
      return {-0x1.fep127, 0x1.fep127, true};
    case DType::Float8E4M3FN:
      return {-448.0, 448.0, false};
    case DType::Float8E5M2:
      return {-57344.0, 57344.0, true};
    default:
      break;
  }
  MT_THROW("fits: ", dtype, " is not a floating dtype");
}

// [lowest, max] of an integer dtype, as int64.
std::pair<int64_t, int64_t> integer_range(DType dtype) {
  switch (dtype) {
    case DType::UInt8:
      return {0, 255};
    case DType::Int32:
      return {std::numeric_limits<int32_t>::lowest(), std::numeric_limits<int32_t>::max()};
    case DType::Int64:
      return {std::numeric_limits<int64_t>::lowest(), std::numeric_limits<int64_t>::max()};
    default:
      break;
  }
  MT_THROW("fits: ", dtype, " is not an integer dtype");
}

}  // namespace

bool fits(const Scalar& value, DType dtype) {
  if (value.is_bool() || dtype == DType::Bool) return true;
  if (is_floating(dtype)) {
    const Range r = floating_range(dtype);
    const double v = value.to_double();  // an int64 beyond 2^53 rounds, far inside every max
    if (std::isnan(v)) return true;
    if (std::isinf(v)) return r.has_infinity;
    return v >= r.lowest && v <= r.max;
  }
  const auto [lowest, max] = integer_range(dtype);
  if (value.is_floating()) {
    // Converting truncates toward zero, so PyTorch accepts up to (not including) max + 1 above
    // and refuses anything below lowest. max + 1 is a power of two, exact in a double.
    const double v = value.to_double();
    const double above = static_cast<double>(max / 2 + 1) * 2.0;
    return !std::isnan(v) && v >= static_cast<double>(lowest) && v < above;
  }
  const int64_t v = value.to_int64();
  if (dtype == DType::UInt8 && v < 0) return v >= -max;  // wraps, as two's complement
  return v >= lowest && v <= max;
}

void check_fits(const char* op, const Scalar& value, DType dtype) {
  if (!fits(value, dtype)) {
    MT_THROW(op, ": value ", value, " cannot be converted to dtype ", dtype, " without overflow");
  }
}

}  // namespace mantissa
