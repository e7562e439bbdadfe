// Small text helpers shared by the runner and the CLI, so messages format shapes and engine
// errors the same way everywhere.
#pragma once

#include <sstream>
#include <string>

#include "engine/shape.h"

namespace mantissa::runner {

// "[2, 3]", as the engine prints shapes in its errors.
inline std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// The first line of a message (engine errors may carry more), for one-line config errors.
inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace mantissa::runner
