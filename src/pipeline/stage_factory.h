// BuildStages: from a whole model and the `--devices` / `--layer-split` options to the
// ordered stages of a pipeline — placement (placement.h), then one LocalStage per cpu
// device and one RemoteStage per unix: device.
//
// Goals: one place that knows which Stage implementation serves which device kind; a
// single cpu stage covering every layer borrows the already loaded Model (no second
// binding, output identical to the unsplit engine); other local stages bind their own
// range from the model's file (a stage touches only its layers' bytes).
// Non-goals: running batches (pipeline.h), the placement arithmetic (placement.h).
//
// Thread safety: a free function. Lifetime: a borrowing stage references `model`, which
// must outlive the stages; owning stages keep the model's file alive.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "pipeline/pipeline.h"
#include "pipeline/stage.h"

namespace shardlm {

// Errors: bad placement (placement.h's messages), a model binding that lacks some layers,
// a stage that fails to load or (remote) to connect.
Result<std::vector<std::unique_ptr<Stage>>> BuildStages(const Model& model,
                                                        const PipelineOptions& options);

}  // namespace shardlm
