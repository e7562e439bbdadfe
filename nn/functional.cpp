#include "nn/functional.h"

namespace mantissa::nn {

Reduction parse_reduction(std::string_view name) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  MT_THROW("invalid reduction '", name, "' (expected none, mean or sum)");
}

}  // namespace mantissa::nn
