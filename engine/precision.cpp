#include "engine/precision.h"

#include <atomic>

#include "engine/error.h"
#include "engine/logging.h"

namespace mantissa {
namespace {
std::atomic<MatmulPrecision> global_precision{MatmulPrecision::Highest};
}

void set_float32_matmul_precision(std::string_view p) {
  if (p == "highest") {
    set_float32_matmul_precision(MatmulPrecision::Highest);
  } else if (p == "high" || p == "medium") {
    set_float32_matmul_precision(MatmulPrecision::High);
  } else {
    MT_THROW("set_float32_matmul_precision: invalid precision '", p,
             "' (expected highest, high or medium)");
  }
}
void set_float32_matmul_precision(MatmulPrecision p) {
  if (global_precision.exchange(p) != p) {
    log().info("float32 matmul precision set to {}",
               p == MatmulPrecision::High ? "high (TF32 allowed)" : "highest (full float32)");
  }
}
MatmulPrecision get_float32_matmul_precision() { return global_precision.load(); }

namespace autocast_state {
ThreadState& current() {
  // Read by every op (autocast check); the library's TLS model is set in CMakeLists.txt.
  thread_local ThreadState state;
  return state;
}
}  // namespace autocast_state

MatmulPrecision effective_matmul_precision(DeviceType device) {
  const auto& d = autocast_state::current().device[static_cast<int>(device)];
  return d.enabled && d.tf32 ? MatmulPrecision::High : get_float32_matmul_precision();
}

}  // namespace mantissa
