#include "nn/functional.h"

namespace mantissa::nn {

Reduction parse_reduction(std::string_view name) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  MT_THROW("invalid reduction '", name, "' (expected none, mean or sum)");
}

KlDivReduction parse_kl_div_reduction(std::string_view name) {
  if (name == "none") return KlDivReduction::None;
  if (name == "batchmean") return KlDivReduction::BatchMean;
  if (name == "sum") return KlDivReduction::Sum;
  if (name == "mean") return KlDivReduction::Mean;
  MT_THROW("invalid kl_div reduction '", name, "' (expected none, batchmean, sum or mean)");
}

}  // namespace mantissa::nn
