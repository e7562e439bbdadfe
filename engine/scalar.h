// Scalar: a number passed to an op (alpha, fill value, the scalar side of `t * 2.0`).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <type_traits>

#include "engine/convert.h"
#include "engine/dtype.h"

namespace mantissa {

class Scalar {
 public:
  enum class Kind : uint8_t { Floating, Integral, Boolean };
  Scalar() : Scalar(int64_t{0}) {}
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Floating), d_(static_cast<double>(v)) {}  // NOLINT
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Integral), i_(static_cast<int64_t>(v)) {}  // NOLINT
  Scalar(bool v) : kind_(Kind::Boolean), i_(v) {}                      // NOLINT
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}                    // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}                // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Floating; }
  bool is_integral() const { return kind_ == Kind::Integral; }
  bool is_bool() const { return kind_ == Kind::Boolean; }
  double to_double() const { return is_floating() ? d_ : static_cast<double>(i_); }
  int64_t to_int64() const { return is_floating() ? float_to_integer<int64_t>(d_) : i_; }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) {
      return is_floating() ? d_ != 0.0 : i_ != 0;
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(to_int64());
    } else {
      return static_cast<T>(to_double());
    }
  }
  // The dtype PyTorch gives a wrapped number: float64, int64 or bool.
  DType dtype() const {
    return is_floating() ? DType::Float64 : is_bool() ? DType::Bool : DType::Int64;
  }

 private:
  Kind kind_;
  double d_ = 0.0;
  int64_t i_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace mantissa
