// Peak dense FLOP/s of a GPU for the precision a run computes in, the denominator of model FLOPs
// utilisation (MFU = model FLOPs per token × tokens/s / peak). The table holds the vendors'
// datasheet numbers for data-centre GPUs (dense, without sparsity); a device it does not know has
// no peak, and its MFU is then left out unless the run gives one (`peak_tflops`).
#pragma once

#include <optional>
#include <string_view>

#include "amp/autocast.h"
#include "engine/device.h"

namespace mantissa::runner {

// By the device's name as CUDA reports it ("NVIDIA H100 80GB HBM3"); nullopt when unknown.
std::optional<double> gpu_peak_flops(std::string_view device_name, amp::Precision precision);

// The peak of `device` (a CUDA device, queried); nullopt for the CPU or an unknown GPU.
std::optional<double> device_peak_flops(Device device, amp::Precision precision);

}  // namespace mantissa::runner
