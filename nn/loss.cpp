#include "nn/loss.h"

namespace mantissa::nn {

std::string LossModule::extra_repr() const {
  switch (reduction) {
    case Reduction::None:
      return "reduction='none'";
    case Reduction::Sum:
      return "reduction='sum'";
    case Reduction::Mean:
      return "";
  }
  return "";
}

namespace {
std::string joined(std::string a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : a + ", " + b;
}
}  // namespace

std::string SmoothL1LossImpl::extra_repr() const {
  return joined(LossModule::extra_repr(), beta == 1.0 ? "" : "beta=" + detail::str_cat(beta));
}
std::string HuberLossImpl::extra_repr() const {
  return joined(LossModule::extra_repr(), delta == 1.0 ? "" : "delta=" + detail::str_cat(delta));
}
std::string KLDivLossImpl::extra_repr() const {
  const char* names[] = {"none", "batchmean", "sum", "mean"};
  std::string r = kl_reduction == KlDivReduction::Mean
                      ? ""
                      : std::string("reduction='") + names[static_cast<int>(kl_reduction)] + "'";
  return joined(r, log_target ? "log_target=True" : "");
}

}  // namespace mantissa::nn
