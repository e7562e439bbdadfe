#include "engine/logging.h"

#include <cstdlib>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "engine/error.h"

namespace mantissa {
namespace {

spdlog::level::level_enum parse_level(std::string_view s) {
  const auto level = spdlog::level::from_str(std::string(s));
  // spdlog maps unknown names to "off"; only accept "off" when it was asked for.
  MT_CHECK(level != spdlog::level::off || s == "off", "unknown log level '", s,
           "' (expected trace, debug, info, warn, error, critical or off)");
  return level;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = std::make_shared<spdlog::logger>(
      "mantissa", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[mantissa] [%l] %v");
  logger->set_level(spdlog::level::warn);
  if (const char* env = std::getenv("MANTISSA_LOG_LEVEL")) {
    try {
      logger->set_level(parse_level(env));
    } catch (const Error& e) {
      logger->warn("ignoring MANTISSA_LOG_LEVEL: {}", e.what());
    }
  }
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(std::string_view level) { log().set_level(parse_level(level)); }
void set_log_level(spdlog::level::level_enum level) { log().set_level(level); }

}  // namespace mantissa
