// Element types as template tags, and OpMath: the type a kernel's arithmetic is done in. Half
// types compute in float and round once on store. Shared by the dtype switch (engine/dispatch.h)
// and the value conversions (engine/convert.h).
#pragma once

#include "engine/float8.h"
#include "engine/half.h"

namespace mantissa {

template <typename T>
struct TypeTag {
  using type = T;
};

// OpMath: the type arithmetic is done in. Half types compute in float and round once on store.
template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <>
struct OpMath<Float8E4M3FN> {
  using type = float;
};
template <>
struct OpMath<Float8E5M2> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

}  // namespace mantissa
