// BuildStages implementation (see stage_factory.h).
#include "runtime/stage_factory.h"

namespace shardlm {

Result<std::vector<std::unique_ptr<Stage>>> BuildStages(const Model& model,
                                                        const std::string& model_path,
                                                        const PipelineOptions& options) {
  (void)model;
  (void)model_path;
  (void)options;
  return Unsupported("local and remote stages are not available in this build yet");
}

}  // namespace shardlm
