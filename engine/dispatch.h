// The dispatcher: per-op kernel tables keyed by device and the one dtype switch (OpMath is in
// engine/opmath.h).
//
// An op declares a KernelTable in engine/kernel_tables.h; kernels/cpu and kernels/cuda fill its
// slots during static initialisation with MT_REGISTER_KERNEL. An op looks its kernel up with
// table(device) and the kernel resolves the element type with dispatch_dtype().
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/half.h"
#include "engine/opmath.h"

namespace mantissa {

namespace detail {
[[noreturn]] void throw_no_kernel(const char* op, DeviceType device);
[[noreturn]] void throw_not_implemented(const char* op, DType dtype, Device device);
}  // namespace detail

template <typename Fn>
struct KernelTable {
  static_assert(std::is_pointer_v<Fn>, "kernel slots hold function pointers");
  const char* op_name;
  Fn slots[kNumDeviceTypes] = {};

  Fn operator()(DeviceType device) const {
    Fn fn = slots[static_cast<int>(device)];
    if (fn == nullptr) [[unlikely]]
      detail::throw_no_kernel(op_name, device);
    return fn;
  }
  Fn operator()(Device device) const { return (*this)(device.type()); }
};

// A table by name, with whether a device type has a kernel in it (for tests/test_op_index.cpp).
struct KernelTableEntry {
  const char* name;
  bool (*has_kernel)(DeviceType device_type);
};
const std::vector<KernelTableEntry>& kernel_table_list();
namespace detail {
bool list_kernel_table(KernelTableEntry entry);
}  // namespace detail

// MT_KERNEL_TABLE(name, Fn) in engine/kernel_tables.h and engine/amp_kernel_tables.h declares
// the table name_kernel. engine/kernel_tables.cpp includes both headers with
// MT_DEFINE_KERNEL_TABLES set, which makes each line the table's definition and its entry in
// kernel_table_list(), so a table is written once.
#ifdef MT_DEFINE_KERNEL_TABLES
#define MT_KERNEL_TABLE(name, Fn)                                        \
  KernelTable<Fn> name##_kernel{#name};                                  \
  [[maybe_unused]] const bool name##_listed = detail::list_kernel_table( \
      {#name, [](DeviceType d) { return name##_kernel.slots[static_cast<int>(d)] != nullptr; }});
#else
#define MT_KERNEL_TABLE(name, Fn) extern KernelTable<Fn> name##_kernel;
#endif

#define MT_REGISTER_KERNEL(table, device_type, fn)                                \
  [[maybe_unused]] static const bool MT_UNIQUE_NAME(mt_kernel_registered_) = [] { \
    (table).slots[static_cast<int>(device_type)] = (fn);                          \
    return true;                                                                  \
  }()

// Sets of dtypes a kernel supports, as bit masks over DType.
constexpr uint32_t dtype_bit(DType t) { return 1u << static_cast<int>(t); }
inline constexpr uint32_t kFloatingTypes = dtype_bit(DType::Float32) | dtype_bit(DType::Float64) |
                                           dtype_bit(DType::Float16) | dtype_bit(DType::BFloat16);
inline constexpr uint32_t kIntegralTypes =
    dtype_bit(DType::Int32) | dtype_bit(DType::Int64) | dtype_bit(DType::UInt8);
inline constexpr uint32_t kAllTypes = kFloatingTypes | kIntegralTypes;
inline constexpr uint32_t kAllTypesAndBool = kAllTypes | dtype_bit(DType::Bool);
// The float8 storage types: casts, copies and fills take them, arithmetic does not.
inline constexpr uint32_t kFloat8Types =
    dtype_bit(DType::Float8E4M3FN) | dtype_bit(DType::Float8E5M2);
inline constexpr uint32_t kAllTypesAndBoolAndFloat8 = kAllTypesAndBool | kFloat8Types;
// The output dtypes of a scaled (float8) matrix product.
inline constexpr uint32_t kScaledMmOutTypes = kFloatingTypes | kFloat8Types;
inline constexpr uint32_t kFloatingNoReduced =
    dtype_bit(DType::Float32) | dtype_bit(DType::Float64);

// The dtype switch. Calls f(TypeTag<T>{}) for the C++ type T of `dtype` if it is in `Types`,
// otherwise throws "op X not implemented for dtype Y on device Z".
//   dispatch_dtype<kFloatingTypes>(t.dtype(), "exp", t.device(), [&](auto tag) {
//     using scalar_t = typename decltype(tag)::type; ... });
template <uint32_t Types, typename F>
decltype(auto) dispatch_dtype(DType dtype, const char* op, Device device, F&& f) {
#define MT_DTYPE_CASE(E, T)                                                   \
  case DType::E:                                                              \
    if constexpr ((Types & dtype_bit(DType::E)) != 0) return f(TypeTag<T>{}); \
    break;
  switch (dtype) {
    MT_DTYPE_CASE(Float32, float)
    MT_DTYPE_CASE(Float64, double)
    MT_DTYPE_CASE(Float16, Half)
    MT_DTYPE_CASE(BFloat16, BFloat16)
    MT_DTYPE_CASE(Int32, int32_t)
    MT_DTYPE_CASE(Int64, int64_t)
    MT_DTYPE_CASE(UInt8, uint8_t)
    MT_DTYPE_CASE(Bool, bool)
    MT_DTYPE_CASE(Float8E4M3FN, Float8E4M3FN)
    MT_DTYPE_CASE(Float8E5M2, Float8E5M2)
  }
#undef MT_DTYPE_CASE
  detail::throw_not_implemented(op, dtype, device);
}

}  // namespace mantissa
