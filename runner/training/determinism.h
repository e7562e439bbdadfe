// What `deterministic: true` (TrainerOptions::deterministic) guarantees, and the check behind it.
//
// Guarantee: two runs with the same config, seed, build, machine and thread count produce
// bitwise-identical weights, losses and checkpoints. The data order, dropout masks and weight
// init come from seeded generators whose states are checkpointed, so this holds across resume.
//
// Why it holds, per device (docs/configs.md has the user-facing version):
// - CPU: every kernel is deterministic. Reductions fold fixed-size chunks in a fixed order, and
//   OpenMP threads only partition outputs, never one sum; matmuls go to the BLAS, which splits
//   its output (not the inner dimension) between threads. There is nothing to refuse.
// - CUDA: elementwise, reduction, pooling (a gather backward), layer norm and loss kernels sum in
//   a fixed order; the atomic adds (scatter_add/index_add) are reached only by a direct
//   gather/index_select backward, never by a module or loss (cross_entropy picks its target by
//   comparison). cuBLAS/cuBLASLt are bitwise reproducible on the same GPU model and toolkit
//   when one stream is used, which the Trainer does. cuDNN convolution is the exception: the
//   engine takes cuDNN's heuristic algorithm choice, and cuDNN offers non-deterministic
//   (atomic-add) backward algorithms for some shapes, which the engine does not filter out. So
//   conv2d on CUDA is refused under deterministic: true.
#pragma once

#include <string>
#include <vector>

#include "engine/device.h"
#include "nn/module.h"

namespace mantissa::runner {

// One line per part of `model` that may not be run-to-run deterministic on `device`, naming the
// module ("conv2d '0' (Conv2d) on cuda:0: ..."); empty when a run there is deterministic.
std::vector<std::string> nondeterministic_parts(nn::Module& model, Device device);

}  // namespace mantissa::runner
