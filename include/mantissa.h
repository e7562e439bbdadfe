// mantissa: a C++20 mixed-precision training engine. Include this one header.
#pragma once

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/factory.h"
#include "engine/generator.h"
#include "engine/half.h"
#include "engine/logging.h"
#include "engine/scalar.h"
#include "engine/shape.h"
#include "engine/tensor.h"
#include "autograd/function.h"
#include "autograd/functions.h"
#include "autograd/graph.h"
#include "autograd/node.h"
