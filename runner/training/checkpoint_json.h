// A checkpoint's trainer state as the JSON of its metadata
// (runner/training/checkpoint_validation.cpp): internal to the checkpoint reader and writer.
#pragma once

#include <optional>
#include <string>

#include "runner/files/json.h"
#include "runner/training/checkpoint.h"

namespace mantissa::runner {

// null for nullopt; else an object with every field (NaN losses as null).
Json trainer_state_json(const std::optional<TrainerState>& state);
// The inverse. Refuses, naming `what` ("checkpoint '<path>'"), the field and its value: a trainer
// state that is neither null nor an object, one without step or loader, and a field of another
// kind than its member's. Missing fields keep their defaults; unknown ones are ignored.
std::optional<TrainerState> trainer_state_from_json(const std::string& what, JsonView j);

}  // namespace mantissa::runner
