// Recent Responses API responses, kept in memory under a byte budget. See response_store.h.
#include "server/response_store.h"

#include <fmt/format.h>

#include <vector>

#include "server/output_formatter.h"

namespace shardlm::server {
namespace {

const std::string* ItemId(const Json& item) {
  if (!item.is_object()) return nullptr;
  auto id = item.find("id");
  if (id == item.end() || !id->is_string()) return nullptr;
  return &id->get_ref<const std::string&>();
}

}  // namespace

ResponseStore::ResponseStore(size_t budget_bytes) : budget_(budget_bytes) {}

void ResponseStore::Put(const std::string& response_id, const std::string& previous_response_id,
                        const Json& input, const Json& output) {
  Stored stored{previous_response_id, input, output, 0};
  stored.bytes = DumpJson(input).size() + DumpJson(output).size() + response_id.size();
  if (stored.bytes > budget_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (responses_.count(response_id)) return;  // ids are unique: a second Put changes nothing
  while (bytes_ + stored.bytes > budget_ && !order_.empty()) EvictOldestLocked();
  bytes_ += stored.bytes;
  order_.push_back(response_id);
  IndexItems(stored.input, response_id);
  IndexItems(stored.output, response_id);
  responses_.emplace(response_id, std::move(stored));
}

void ResponseStore::IndexItems(const Json& items, const std::string& response_id) {
  for (const Json& item : items) {
    if (const std::string* id = ItemId(item)) item_owner_[*id] = response_id;
  }
}

void ResponseStore::EvictOldestLocked() {
  const std::string id = order_.front();
  order_.pop_front();
  auto it = responses_.find(id);
  if (it == responses_.end()) return;
  for (const Json* items : {&it->second.input, &it->second.output}) {
    for (const Json& item : *items) {
      const std::string* item_id = ItemId(item);
      auto owner = item_id ? item_owner_.find(*item_id) : item_owner_.end();
      if (owner != item_owner_.end() && owner->second == id) item_owner_.erase(owner);
    }
  }
  bytes_ -= it->second.bytes;
  responses_.erase(it);
}

Result<Json> ResponseStore::Conversation(const std::string& response_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Stored*> chain;
  std::string id = response_id;
  while (!id.empty()) {
    auto it = responses_.find(id);
    if (it == responses_.end()) {
      return NotFound("no stored response '{}'{}", id,
                      id == response_id ? "" : fmt::format(" (which '{}' continued)", response_id));
    }
    if (chain.size() >= size_t{kMaxChainLength}) {
      return InvalidArgument("'{}' continues more than {} responses", response_id, kMaxChainLength);
    }
    chain.push_back(&it->second);
    id = it->second.previous;
  }
  Json items = Json::array();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    for (const Json& item : (*it)->input) items.push_back(item);
    for (const Json& item : (*it)->output) items.push_back(item);
  }
  return items;
}

std::optional<Json> ResponseStore::Item(const std::string& item_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto owner = item_owner_.find(item_id);
  if (owner == item_owner_.end()) return std::nullopt;
  const Stored& stored = responses_.at(owner->second);
  for (const Json* items : {&stored.output, &stored.input}) {
    for (const Json& item : *items) {
      const std::string* id = ItemId(item);
      if (id && *id == item_id) return item;
    }
  }
  return std::nullopt;
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ResponseStore::responses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return responses_.size();
}

}  // namespace shardlm::server
