#include "engine/environment.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/logging.h"

namespace mantissa::detail {

int env_word(const char* name, std::initializer_list<const char*> words) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return 0;
  int index = 0;
  for (const char* w : words) {
    if (std::strcmp(env, w) == 0) return index;
    ++index;
  }
  // "a or b", "a, b or c"
  std::string expected;
  index = 0;
  for (const char* w : words) {
    if (index > 0) expected += index + 1 == static_cast<int>(words.size()) ? " or " : ", ";
    expected += w;
    ++index;
  }
  log().warn("ignoring {}='{}' (expected {})", name, env, expected);
  return 0;
}

}  // namespace mantissa::detail
