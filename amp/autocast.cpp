#include "amp/autocast.h"

#include "autograd/autocast_wrapper.h"
#include "engine/logging.h"

namespace mantissa::amp {
namespace {

void refresh_any_cast(autocast_state::ThreadState& s) {
  s.any_cast = false;
  for (const auto& d : s.device) s.any_cast = s.any_cast || (d.enabled && !d.tf32);
}

}  // namespace

Precision::Precision(DType dtype) {
  switch (dtype) {
    case kFloat32:
      kind_ = Float32;
      break;
    case kFloat16:
      kind_ = Float16;
      break;
    case kBFloat16:
      kind_ = BFloat16;
      break;
    default:
      MT_THROW("autocast: unsupported precision ", dtype,
               " (expected float32, tf32, float16 or bfloat16)");
  }
}

Precision Precision::parse(std::string_view name) {
  if (name == "float32" || name == "fp32" || name == "off") return Float32;
  if (name == "tf32") return TF32;
  if (name == "float16" || name == "fp16" || name == "half") return Float16;
  if (name == "bfloat16" || name == "bf16") return BFloat16;
  MT_THROW("unknown precision '", name, "' (expected float32, tf32, float16 or bfloat16)");
}

std::string_view Precision::name() const {
  switch (kind_) {
    case Float32:
      return "float32";
    case TF32:
      return "tf32";
    case Float16:
      return "float16";
    case BFloat16:
      return "bfloat16";
  }
  return "unknown";
}

DType Precision::dtype() const {
  return kind_ == Float16 ? kFloat16 : kind_ == BFloat16 ? kBFloat16 : kFloat32;
}

Precision default_precision(DeviceType t) {
  return t == DeviceType::CUDA ? Precision::Float16 : Precision::BFloat16;
}

autocast::autocast(DeviceType device_type, std::optional<Precision> precision, bool enabled)
    : device_type_(device_type) {
  // The precision in force, logged once when mixed precision is first used (the logger is not
  // created during static initialisation, so MANTISSA_LOG_LEVEL set by the program still counts).
  static const bool logged = [] {
    log().info("float32 matmul precision: {}; autocast defaults: float16 on cuda, bfloat16 on cpu",
               get_float32_matmul_precision() == MatmulPrecision::High ? "high (TF32 allowed)"
                                                                       : "highest (full float32)");
    return true;
  }();
  (void)logged;
  auto& s = autocast_state::current();
  auto& d = s.device[static_cast<int>(device_type)];
  saved_ = d;
  const Precision p = precision.value_or(default_precision(device_type));
  d.enabled = enabled && p.kind() != Precision::Float32;
  d.tf32 = p.kind() == Precision::TF32;
  d.dtype = p.dtype();
  ++s.depth;
  refresh_any_cast(s);
}

autocast::~autocast() {
  auto& s = autocast_state::current();
  s.device[static_cast<int>(device_type_)] = saved_;
  if (--s.depth == 0) clear_autocast_cache();
  refresh_any_cast(s);
}

bool is_autocast_enabled(DeviceType t) {
  return autocast_state::current().device[static_cast<int>(t)].enabled;
}

Precision current_precision(DeviceType t) {
  const auto& d = autocast_state::current().device[static_cast<int>(t)];
  if (!d.enabled) return Precision::Float32;
  if (d.tf32) return Precision::TF32;
  return d.dtype;
}

void clear_autocast_cache() { autograd::clear_autocast_cache(); }
size_t autocast_cache_size() { return autograd::autocast_cache_size(); }

}  // namespace mantissa::amp
