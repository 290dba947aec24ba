// JSON of GET /props and of the placement. See props.h.
#include "server/props.h"

namespace shardlm::server {

Json StagesJSON(const std::vector<StageInfo>& stages) {
  Json out = Json::array();
  for (const StageInfo& s : stages) {
    out.push_back(Json{{"index", s.index},
                       {"layers", Json::array({s.layers.begin, s.layers.end})},
                       {"device", s.device},
                       {"remote", s.remote},
                       {"threads", s.threads},
                       {"weight_bytes", s.weight_bytes},
                       {"kv_bytes", s.kv_bytes},
                       {"first", s.first},
                       {"last", s.last}});
  }
  return out;
}

Json PropsJSON(const EngineInfo& info) {
  return Json{{"model", info.model_name},
              {"architecture", info.architecture},
              {"n_ctx", info.n_ctx},
              {"n_vocab", info.n_vocab},
              {"n_parallel", info.n_parallel},
              {"total_slots", info.n_parallel},  // llama.cpp's name for the same figure
              {"stages", StagesJSON(info.stages)},
              {"kv_pool", info.kv_pool == 0 ? Json(nullptr)
                                            : Json{{"positions", info.kv_pool},
                                                   {"tier", info.kv_tier},
                                                   {"select", info.kv_select},
                                                   {"sink", info.kv_sink},
                                                   {"tail", info.kv_tail},
                                                   {"reselect", info.kv_reselect}}}};
}

}  // namespace shardlm::server
