// Slots API, llama.cpp's shape: `GET /slots` (one object per slot) and
// `POST /slots/{id}?action=save|restore|erase` with `{"filename": "..."}` for save and
// restore (engine.h "Slots").
//
// Answers: save {"id_slot", "filename", "n_saved", "n_written", "timings": {"save_ms"}},
// restore {"id_slot", "filename", "n_restored", "n_read", "timings": {"restore_ms"}}, erase
// {"id_slot", "n_erased"}. Errors (OpenAI's error object, `param` naming the culprit): 400
// for an id that is not an integer, a missing or unknown action, a missing filename, a file
// name that could leave the slot folder (confined_path.h: "../x", "/etc/x", "a/b", "",
// ".x"), a corrupt, truncated or foreign file (code invalid_slot_file), or save/restore
// without a slot folder (the message names --slot-save-path); 404 for an unknown slot (code
// slot_not_found) or a missing file (code file_not_found); 409 for a slot that is busy
// (code slot_busy), answered before the file is opened; 429 with Retry-After when another
// save or restore still runs after the engine's bounded wait (code slot_io_busy: one runs
// at a time); 507 when a save would take the folder's slot files past --slot-save-budget
// (code insufficient_storage: nothing is evicted, the user erases files or raises the
// budget); 503 when a stage is down or too few KV pages are free for a restore; 500 (code
// slot_folder_unusable, also logged) when the slot folder is another user's or cannot be
// made.
//
// The slot folder is private (private_folder.h): a save creates it 0700 with its parents
// when missing, and both save and restore refuse one owned by another user, every time
// (the slots subfolder of --kv-cache-dir is made lazily, so the server start cannot check
// it).
//
// Goals: every file a client names stays inside the configured folder; typed parsing at the
// boundary; no HTTP here (http_server.cc routes to it).
// Non-goals: the file format (cache/slot_file.h), what the engine does with the slot.
//
// Thread safety: free functions; the engine's slot methods are thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "server/openai_types.h"

namespace shardlm::server {

enum class SlotAction { kSave, kRestore, kErase, kSentinel };

struct SlotActionRequest {
  int32_t id_slot = 0;
  SlotAction action = SlotAction::kSave;
  std::string filename;  // save and restore: as the client sent it (not yet confined)
};

// From the path's id, the `action` query value and the body (may be empty for erase). A
// parse error names the offending parameter in `*param`.
Result<SlotActionRequest> SlotActionRequestFrom(std::string_view id, std::string_view action,
                                                const std::string& body, std::string* param);

// Runs a parsed request on the engine: the answer, or the error to send. `slot_dir` is the
// slot folder ("" when save and restore are off), created privately with its parents by a
// save when missing. `log` gets one line per action done, and the folder errors.
std::variant<Json, ApiError> RunSlotAction(Engine& engine, const std::filesystem::path& slot_dir,
                                           const SlotActionRequest& request,
                                           const std::function<void(const std::string&)>& log);

// GET /slots: [{"id", "n_ctx", "is_processing", "state", "n_tokens"}, ...].
Json SlotsJSON(const std::vector<SlotInfo>& slots, int32_t n_ctx);

}  // namespace shardlm::server
