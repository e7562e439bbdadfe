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

}  // namespace mantissa::nn
