// The CUDA kernels convert values with the CPU's function (engine/convert.h), so casts, fills
// and reductions that store into another dtype give the same bits on both devices.
#pragma once

#include "engine/convert.h"
