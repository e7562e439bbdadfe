// The ops' bodies, name_op(...): one declaration per entry of the op list (engine/ops.def),
// with the public function's parameters. Each is defined in the autograd/ops/ file of its
// section; autograd/op_entries.cpp calls it from the public entry after autocast. Internal to
// autograd.
#pragma once

#include "autograd/functions.h"

namespace mantissa {

#define MT_SIG(name, ret, params, args) ret name##_op params;
#include "engine/ops.def"

}  // namespace mantissa
