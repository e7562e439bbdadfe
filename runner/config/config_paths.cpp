#include "runner/config/config_paths.h"

#include <filesystem>
#include <string_view>
#include <type_traits>
#include <variant>

namespace mantissa::runner {
namespace fs = std::filesystem;
namespace {

// The directory of the file the config came from; empty for the built-in config.
fs::path config_dir(const Config& config) {
  if (config.source.empty() || config.source.front() == '<') return {};
  return fs::path(config.source).parent_path();
}

template <typename F>
void each_file_path(Config& config, F&& f) {
  f(config.model.init_from);
  std::visit(
      [&](auto& options) {
        using O = std::decay_t<decltype(options)>;
        O::each(options, [&](const char* name, auto& field) {
          if constexpr (std::is_same_v<std::decay_t<decltype(field)>, std::string>) {
            const std::string_view n(name);
            if (n == "path" || n == "val_path" || n == "tokenizer" || n == "images" ||
                n == "labels")
              f(field);
          }
        });
      },
      config.data.options);
}

}  // namespace

void locate_files_beside_config(Config& config) {
  const fs::path dir = config_dir(config);
  if (dir.empty()) return;
  each_file_path(config, [&](std::string& path) {
    if (path.empty() || fs::path(path).is_absolute()) return;
    std::error_code ec;
    if (fs::exists(path, ec)) return;
    const fs::path beside = (dir / path).lexically_normal();
    if (fs::exists(beside, ec)) path = beside.string();
  });
}

std::vector<std::string> places_tried(const Config& config, const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (p.is_absolute()) return {path};
  const fs::path cwd = fs::current_path(ec);
  std::vector<std::string> out = {ec ? path : (cwd / p).lexically_normal().string()};
  const fs::path dir = config_dir(config);
  if (!dir.empty()) {
    const std::string beside = fs::absolute(dir / p, ec).lexically_normal().string();
    if (beside != out.front()) out.push_back(beside);
  }
  return out;
}

}  // namespace mantissa::runner
