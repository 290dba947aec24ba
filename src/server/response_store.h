// ResponseStore: the Responses API's memory of recent responses, so that a client may point
// at earlier output instead of sending it again: `previous_response_id` (the conversation up
// to and including that response) and `item_reference` input items (one earlier item by id).
// The Vercel AI SDK's OpenAI provider sends item references for every earlier assistant item
// unless told `store: false`, so its tool loops need this.
//
// What a response keeps: the input items it was given (references resolved, so a chain never
// needs to look further than its own links) and the items it output, plus the id of the
// response it continued. Items with an id are indexed by it.
//
// Goals: bounded memory (a byte budget over the stored items; the oldest responses go
// first); a lookup that misses says so, and the caller answers 400 naming what it pointed at.
// Non-goals: surviving a restart, GET/DELETE of stored responses, conversations objects.
//
// Thread safety: every method may be called from any handler thread (one mutex).
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "server/openai_types.h"

namespace shardlm::server {

class ResponseStore {
 public:
  // A conversation of a few hundred thousand tokens is a few megabytes of items; 64 MiB keeps
  // the recent turns of many of them, and is small beside a model's weights and KV pages.
  static constexpr size_t kDefaultBudgetBytes = size_t{64} << 20;
  // The longest chain of previous_response_id links walked: far beyond any real conversation's
  // turns, and it bounds the work a lookup can cost.
  static constexpr int kMaxChainLength = 100000;

  explicit ResponseStore(size_t budget_bytes = kDefaultBudgetBytes);

  // Records a finished response (`input` and `output` are arrays of items). A response larger
  // than the whole budget is not kept.
  void Put(const std::string& response_id, const std::string& previous_response_id,
           const Json& input, const Json& output);
  // The conversation that ends with `response_id`: every input and output item of its chain,
  // oldest first. kNotFound when it, or a response it continued, is not (or no longer) kept.
  Result<Json> Conversation(const std::string& response_id) const;
  // One stored item by its id.
  std::optional<Json> Item(const std::string& item_id) const;

  size_t bytes() const;
  size_t responses() const;

 private:
  struct Stored {
    std::string previous;
    Json input;
    Json output;
    size_t bytes = 0;
  };
  void IndexItems(const Json& items, const std::string& response_id);
  void EvictOldestLocked();

  const size_t budget_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Stored> responses_;
  std::deque<std::string> order_;  // response ids, oldest first
  // Item id → the response that holds it (the item is found in that response's items).
  std::unordered_map<std::string, std::string> item_owner_;
  size_t bytes_ = 0;
};

}  // namespace shardlm::server
