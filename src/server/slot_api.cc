// Slots API: request parsing, the folder rule, engine calls and answers (see slot_api.h).
#include "server/slot_api.h"

#include <charconv>
#include <chrono>

#include "base/elapsed.h"
#include "cache/confined_path.h"
#include "cache/private_folder.h"
#include "server/completion_session.h"

namespace shardlm::server {
namespace {

using Clock = std::chrono::steady_clock;

Result<SlotAction> ParseAction(std::string_view action) {
  if (action == "save") return SlotAction::kSave;
  if (action == "restore") return SlotAction::kRestore;
  if (action == "erase") return SlotAction::kErase;
  if (action.empty()) return InvalidArgument("missing ?action= (save, restore or erase)");
  return InvalidArgument("unknown action '{}' (save, restore or erase)", action);
}

Result<int32_t> ParseSlotId(std::string_view id) {
  int32_t value = -1;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
  if (id.empty() || id[0] < '0' || id[0] > '9' || ec != std::errc() ||
      end != id.data() + id.size()) {
    return InvalidArgument("slot id '{}' is not a non-negative integer", id);
  }
  return value;
}

ApiError SlotError(const Status& status) {
  ApiError e = ErrorFromStatus(status);
  switch (status.code()) {
    case StatusCode::kNotFound:
      e.param = "filename";
      e.code = "file_not_found";
      break;
    case StatusCode::kInvalidData:
      e.param = "filename";
      e.code = "invalid_slot_file";
      break;
    case StatusCode::kConflict:
      e.param = "id_slot";
      e.code = "slot_busy";
      break;
    case StatusCode::kResourceExhausted:  // another save or restore: retry after a while
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "slot_io_busy";
      break;
    case StatusCode::kQuotaExceeded:  // the slot folder's budget: erase files or raise it
      e.http_status = 507;
      e.type = "server_error";
      e.param = "filename";
      e.code = "insufficient_storage";
      break;
    default:
      break;
  }
  return e;
}

// A slot folder the server may not use (another user's, not a folder, not creatable): the
// operator's to fix, so a 500 whose message says how.
ApiError FolderError(const Status& status, const std::function<void(const std::string&)>& log) {
  if (log) log(status.message());
  ApiError e = ErrorFromStatus(status);
  e.http_status = 500;
  e.type = "server_error";
  e.code = "slot_folder_unusable";
  return e;
}

ApiError RequestError(int http_status, std::string message, std::string param,
                      std::string code = "") {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::variant<Json, ApiError> SaveOrRestore(Engine& engine, const std::filesystem::path& file,
                                           const SlotActionRequest& r,
                                           const std::function<void(const std::string&)>& log) {
  const Clock::time_point start = Clock::now();
  if (r.action == SlotAction::kSave) {
    // The folder may be created by the first save (slot_api.h), and is checked at every use.
    const Status folder = EnsurePrivateFolder(file.parent_path(), "slot folder");
    if (!folder.ok()) return FolderError(folder, log);
    Result<SlotSaveResult> saved = engine.SaveSlot(r.id_slot, file);
    if (!saved.ok()) return SlotError(saved.status());
    const double ms = MsSince(start);
    if (log) {
      log(fmt::format("slot {} saved to '{}': {} tokens, {} bytes, {:.1f} ms", r.id_slot,
                      r.filename, saved->n_saved, saved->n_written, ms));
    }
    return Json{{"id_slot", r.id_slot},
                {"filename", r.filename},
                {"n_saved", saved->n_saved},
                {"n_written", saved->n_written},
                {"timings", {{"save_ms", ms}}}};
  }
  const Status folder = CheckPrivateFolder(file.parent_path(), "slot folder");
  if (!folder.ok() && folder.code() != StatusCode::kNotFound) return FolderError(folder, log);
  Result<SlotRestoreResult> restored = engine.RestoreSlot(r.id_slot, file);
  if (!restored.ok()) return SlotError(restored.status());
  const double ms = MsSince(start);
  if (log) {
    log(fmt::format("slot {} restored from '{}': {} tokens, {} bytes, {:.1f} ms", r.id_slot,
                    r.filename, restored->n_restored, restored->n_read, ms));
  }
  return Json{{"id_slot", r.id_slot},
              {"filename", r.filename},
              {"n_restored", restored->n_restored},
              {"n_read", restored->n_read},
              {"timings", {{"restore_ms", ms}}}};
}

}  // namespace

Result<SlotActionRequest> SlotActionRequestFrom(std::string_view id, std::string_view action,
                                                const std::string& body, std::string* param) {
  SlotActionRequest r;
  std::string ignored;
  std::string& p = param ? *param : ignored;
  p = "id_slot";
  SHARDLM_ASSIGN_OR_RETURN(r.id_slot, ParseSlotId(id));
  p = "action";
  SHARDLM_ASSIGN_OR_RETURN(r.action, ParseAction(action));
  p = "";
  if (r.action == SlotAction::kErase && body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return r;
  }
  SHARDLM_ASSIGN_OR_RETURN(Json j, ParseBody(body));
  if (r.action == SlotAction::kErase) return r;
  p = "filename";
  auto filename = j.find("filename");
  if (filename == j.end() || !filename->is_string()) {
    return InvalidArgument("{} needs \"filename\": a file name in the slot folder",
                           r.action == SlotAction::kSave ? "save" : "restore");
  }
  r.filename = filename->get<std::string>();
  p = "";
  return r;
}

std::variant<Json, ApiError> RunSlotAction(Engine& engine, const std::filesystem::path& slot_dir,
                                           const SlotActionRequest& r,
                                           const std::function<void(const std::string&)>& log) {
  const int32_t n_slots = engine.info().n_parallel;
  if (r.id_slot >= n_slots) {
    return RequestError(
        404, fmt::format("slot {} does not exist (slots are 0 to {})", r.id_slot, n_slots - 1),
        "id_slot", "slot_not_found");
  }
  if (r.action == SlotAction::kErase) {
    Result<int32_t> erased = engine.EraseSlot(r.id_slot);
    if (!erased.ok()) return SlotError(erased.status());
    return Json{{"id_slot", r.id_slot}, {"n_erased", *erased}};
  }
  if (slot_dir.empty()) {
    return RequestError(400,
                        "saving and restoring slots is off: start the server with "
                        "--slot-save-path DIR (or --kv-cache-dir DIR, which keeps slot files "
                        "in DIR/slots)",
                        "action", "slot_save_disabled");
  }
  Result<std::filesystem::path> file = ConfinedPath(slot_dir, r.filename);
  if (!file.ok()) return RequestError(400, file.status().message(), "filename");
  return SaveOrRestore(engine, *file, r, log);
}

Json SlotsJSON(const std::vector<SlotInfo>& slots, int32_t n_ctx) {
  Json out = Json::array();
  for (const SlotInfo& slot : slots) {
    out.push_back(Json{{"id", slot.id},
                       {"n_ctx", n_ctx},
                       {"is_processing", slot.state != SlotState::kIdle},
                       {"state", SlotStateName(slot.state)},
                       {"n_tokens", slot.n_tokens}});
  }
  return out;
}

}  // namespace shardlm::server
