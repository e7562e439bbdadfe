#include "engine/graph_capture.h"

#include "engine/backend_hooks.h"

namespace mantissa::detail {
namespace {

thread_local CaptureProbe* tls_probe = nullptr;
thread_local bool tls_emulated = false;

std::string describe(Device device, Uncapturable kind, const char* what) {
  switch (kind) {
    case Uncapturable::HostRead:
      return str_cat(what, " on ", device.str(),
                     " reads on the host, which waits for the device: a CUDA graph cannot capture "
                     "it (move host reads such as item(), to(cpu) or printing outside the "
                     "captured region)");
    case Uncapturable::RandomDraw:
      break;
  }
  return str_cat(what, " on ", device.str(),
                 " draws random numbers: a CUDA graph would fix their seed and offset, so every "
                 "replay would draw the same ones (set its probability to 0, or run it eagerly)");
}

bool capturing(Device device) {
  if (tls_emulated) return true;
  if (!device.is_cuda()) return false;
  const CudaHooks* hooks = cuda_hooks();
  return hooks != nullptr && hooks->is_capturing(device.index());
}

}  // namespace

void not_capturable(Device device, Uncapturable kind, const char* what) {
  if (tls_probe == nullptr && !tls_emulated && !device.is_cuda()) return;  // the common case
  if (capturing(device)) throw GraphCaptureError(describe(device, kind, what));
  for (CaptureProbe* p = tls_probe; p != nullptr; p = p->outer_)
    if (p->first_.empty()) p->first_ = describe(device, kind, what);
}

CaptureProbe::CaptureProbe() : outer_(tls_probe) { tls_probe = this; }
CaptureProbe::~CaptureProbe() { tls_probe = outer_; }

EmulatedCapture::EmulatedCapture() : outer_(tls_emulated) { tls_emulated = true; }
EmulatedCapture::~EmulatedCapture() { tls_emulated = outer_; }

}  // namespace mantissa::detail
