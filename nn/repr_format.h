// How modules print their arguments in extra_repr(), in PyTorch's spelling: booleans as
// True/False, a pair as (h, w), and a pooling size that is square as one number (as PyTorch
// prints an int argument). For the nn .cpp files only.
#pragma once

#include <sstream>
#include <string>

#include "autograd/functions.h"

namespace mantissa::nn::repr {

inline const char* py_bool(bool b) { return b ? "True" : "False"; }
inline std::string pair(Size2 s) {
  std::ostringstream os;  // not string +: GCC 12 warns (-Wrestrict) on that falsely
  os << "(" << s.h << ", " << s.w << ")";
  return os.str();
}
inline std::string size(Size2 s) { return s.h == s.w ? std::to_string(s.h) : pair(s); }

}  // namespace mantissa::nn::repr
