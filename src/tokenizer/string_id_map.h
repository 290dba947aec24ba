// StringIdMap: string_view -> int32 hash map with open addressing, for vocabularies.
//
// Goals: build a 150K-entry map in a few milliseconds and look keys up with one or two
// cache misses (slots are 8 bytes, no node per entry), since token and merge lookups
// dominate both loading and tokenizing. Keys are views: their bytes must outlive the map.
// Non-goals: erasing, iteration, general-purpose use.
//
// Thread safety: concurrent lookups are safe once building is done.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace shardlm::tokenizer_internal {

class StringIdMap {
 public:
  // Sizes the table for `n` keys (load factor <= 1/2).
  void Reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < 2 * n) capacity *= 2;
    slots_.assign(capacity, Slot{0, -1});
    entries_.reserve(n);
  }

  // Inserts key -> value unless the key is present; returns the value stored for the key.
  int32_t TryEmplace(std::string_view key, int32_t value) {
    if (2 * (entries_.size() + 1) > slots_.size()) Grow();
    const uint32_t hash = Hash(key);
    size_t i = hash & (slots_.size() - 1);
    for (; slots_[i].entry >= 0; i = (i + 1) & (slots_.size() - 1)) {
      const Entry& entry = entries_[slots_[i].entry];
      if (slots_[i].hash == hash && entry.key == key) return entry.value;
    }
    slots_[i] = Slot{hash, static_cast<int32_t>(entries_.size())};
    entries_.push_back(Entry{key, value});
    return value;
  }

  // The value of `key`, or -1.
  int32_t Find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint32_t hash = Hash(key);
    for (size_t i = hash & (slots_.size() - 1); slots_[i].entry >= 0;
         i = (i + 1) & (slots_.size() - 1)) {
      const Entry& entry = entries_[slots_[i].entry];
      if (slots_[i].hash == hash && entry.key == key) return entry.value;
    }
    return -1;
  }

  size_t size() const { return entries_.size(); }

 private:
  struct Slot {
    uint32_t hash;
    int32_t entry;  // index into entries_, -1 when empty
  };
  struct Entry {
    std::string_view key;
    int32_t value;
  };

  static uint32_t Hash(std::string_view key) {
    return static_cast<uint32_t>(std::hash<std::string_view>{}(key));
  }

  void Grow() {
    std::vector<Entry> entries = std::move(entries_);
    Reserve(entries.size() * 2 + 8);
    for (const Entry& entry : entries) TryEmplace(entry.key, entry.value);
  }

  std::vector<Slot> slots_;
  std::vector<Entry> entries_;
};

}  // namespace shardlm::tokenizer_internal
