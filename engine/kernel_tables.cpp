// The kernel tables' definitions: engine/kernel_tables.h, activation_kernel_tables.h,
// amp_kernel_tables.h and optimizer_kernel_tables.h expanded with MT_DEFINE_KERNEL_TABLES
// (engine/dispatch.h), so each table is written once, in its header.
#define MT_DEFINE_KERNEL_TABLES
#include "engine/kernel_tables.h"
#include "engine/activation_kernel_tables.h"
#include "engine/amp_kernel_tables.h"
#include "engine/optimizer_kernel_tables.h"

namespace mantissa {

namespace {
std::vector<KernelTableEntry>& table_list() {
  static std::vector<KernelTableEntry> list;
  return list;
}
}  // namespace

const std::vector<KernelTableEntry>& kernel_table_list() { return table_list(); }

namespace detail {
bool list_kernel_table(KernelTableEntry entry) {
  table_list().push_back(entry);
  return true;
}

void throw_no_kernel(const char* op, DeviceType device) {
  MT_THROW("op ", op, " has no kernel for device type ", device,
           device == DeviceType::CUDA && !cuda::is_compiled() ? " (this build has no CUDA)" : "");
}
void throw_not_implemented(const char* op, DType dtype, Device device) {
  MT_THROW("op ", op, " not implemented for dtype ", dtype, " on device ", device);
}
}  // namespace detail

}  // namespace mantissa
