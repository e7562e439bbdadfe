// mantissa::Error and the check macros. Messages are built only when a check fails, so checks
// on the hot path cost one branch.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mantissa {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
[[noreturn]] void throw_error(const std::string& message);
[[noreturn]] void throw_internal(const char* cond, const char* file, int line,
                                 const std::string& message);
}  // namespace detail

}  // namespace mantissa

// MT_CHECK(cond, "mm: expected ...", a.shape(), ...): user-facing error with the values shown.
#define MT_CHECK(cond, ...)                                                      \
  do {                                                                           \
    if (!(cond)) [[unlikely]] {                                                  \
      ::mantissa::detail::throw_error(::mantissa::detail::str_cat(__VA_ARGS__)); \
    }                                                                            \
  } while (0)

#define MT_THROW(...) ::mantissa::detail::throw_error(::mantissa::detail::str_cat(__VA_ARGS__))

// MT_ASSERT: an internal invariant; a failure is a mantissa bug, reported with file:line.
#define MT_ASSERT(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      ::mantissa::detail::throw_internal(#cond, __FILE__, __LINE__,                 \
                                         ::mantissa::detail::str_cat(__VA_ARGS__)); \
    }                                                                               \
  } while (0)
