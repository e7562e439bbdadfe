// Where a config's relative file paths (data files, val_path, MNIST's images and labels,
// model.init_from) are looked for: from the working directory first, then beside the config file.
#pragma once

#include <string>
#include <vector>

#include "runner/config/config.h"

namespace mantissa::runner {

// Rewrites each relative file path of `config` that names no file from the working directory but
// does name one beside the config file (`config.source`'s directory) to that file's path, so that
// the run, its resolved.yaml and a resume all read it. Does nothing for the built-in config.
void locate_files_beside_config(Config& config);

// The places a relative `path` was looked for, for the "file not found" error: the working
// directory's, and beside the config file when the config came from one. Absolute paths: itself.
std::vector<std::string> places_tried(const Config& config, const std::string& path);

}  // namespace mantissa::runner
