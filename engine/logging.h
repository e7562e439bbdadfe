// Logging through spdlog. The level comes from MANTISSA_LOG_LEVEL (trace, debug, info, warn,
// error, critical, off; default warn) and can be changed with set_log_level().
#pragma once

#include <memory>
#include <string_view>

#include <spdlog/spdlog.h>

namespace mantissa {

// mantissa's logger ("mantissa"), created on first use.
spdlog::logger& log();
void set_log_level(std::string_view level);  // throws mantissa::Error on an unknown level
void set_log_level(spdlog::level::level_enum level);

}  // namespace mantissa
