#include "engine/error.h"

namespace mantissa::detail {

void throw_error(const std::string& message) { throw Error(message); }

void throw_internal(const char* cond, const char* file, int line, const std::string& message) {
  throw Error(str_cat("internal error at ", file, ":", line, ": ", cond, " failed",
                      message.empty() ? "" : ": ", message,
                      " (this is a bug in mantissa; please report it)"));
}

}  // namespace mantissa::detail
