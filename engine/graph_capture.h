// What a CUDA graph cannot hold, named the same way on every device.
//
// A captured graph replays the kernels it recorded with the arguments they had, and the capture
// itself must never wait for the device. Two kinds of work break that: a read of a value on the
// host (item(), a copy to the CPU, printing, synchronising), which would wait; and a draw of
// random numbers, whose Philox seed and offset are kernel arguments and would be replayed
// unchanged, giving every replay the same dropout mask. The places that do either call
// not_capturable(). Inside a real capture on a CUDA device that throws GraphCaptureError; under a
// CaptureProbe (on any device) it records the first such place instead, so that a training step
// can be vetted during an eager warm-up and refused with its reason before any capture starts
// (runner::Trainer's cuda_graphs). Index checks do not read the host under a capture: the CUDA
// kernels then leave a bad index in a device flag that the next host read reports.
#pragma once

#include <string>

#include "engine/device.h"
#include "engine/error.h"

namespace mantissa {

// Thrown where a capture meets work that a CUDA graph cannot hold.
class GraphCaptureError : public Error {
 public:
  explicit GraphCaptureError(const std::string& what) : Error(what) {}
};

namespace detail {

enum class Uncapturable {
  HostRead,    // waits for the device: item(), a copy to the CPU, printing, synchronize
  RandomDraw,  // random numbers: their seed and offset would be fixed in the graph
};
// `what` (e.g. "item()") is about to do `kind` of work on `device`.
void not_capturable(Device device, Uncapturable kind, const char* what);

// While alive, not_capturable() on this thread records the first `what` (with its device)
// instead of doing nothing. Probes nest; each records what happened within it.
class CaptureProbe {
 public:
  CaptureProbe();
  ~CaptureProbe();
  CaptureProbe(const CaptureProbe&) = delete;
  CaptureProbe& operator=(const CaptureProbe&) = delete;
  // "" when nothing uncapturable ran; else e.g. "item() on cuda:0".
  const std::string& first() const { return first_; }

 private:
  friend void not_capturable(Device device, Uncapturable kind, const char* what);
  std::string first_;
  CaptureProbe* outer_;
};

// While alive, this thread behaves as if a CUDA graph were being captured on any device (the CPU
// included): not_capturable() throws GraphCaptureError. A test seam: it lets a CPU test drive the
// refusal path that a real capture takes on a GPU.
class EmulatedCapture {
 public:
  EmulatedCapture();
  ~EmulatedCapture();
  EmulatedCapture(const EmulatedCapture&) = delete;
  EmulatedCapture& operator=(const EmulatedCapture&) = delete;

 private:
  bool outer_;
};

}  // namespace detail
}  // namespace mantissa
