// The JSON of a run's records (metrics.jsonl, summary.json): internal to their writers
// (runner/training/metrics.cpp, the Trainer's summary, the checkpoint's trainer state). NaN and
// infinite values are written as null.
#pragma once

#include "runner/files/json.h"
#include "runner/training/trainer.h"

namespace mantissa::runner {

Json step_metrics_json(const StepMetrics& m);  // one logged step
Json eval_metrics_json(const EvalMetrics& m);
Json summary_json(const TrainSummary& s);  // summary.json
// A first float8 saturation: summary.json's, and the checkpoint's trainer state's
// (runner/training/checkpoint_validation.cpp).
Json float8_saturation_json(const Float8Saturation& s);

}  // namespace mantissa::runner
