// A SAX handler that builds the value and stops at the first limit (see json_limits.h).
#include "server/json_limits.h"

#include <fmt/format.h>

#include <vector>

namespace shardlm::server {
namespace {

class LimitedBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  LimitedBuilder(std::string_view where, const JsonLimits& limits, JsonBudget& budget)
      : where_(where), limits_(limits), budget_(budget) {}

  bool null() { return Add(Json(nullptr)); }
  bool boolean(bool b) { return Add(Json(b)); }
  bool number_integer(number_integer_t n) { return Add(Json(n)); }
  bool number_unsigned(number_unsigned_t n) { return Add(Json(n)); }
  bool number_float(number_float_t f, const string_t&) { return Add(Json(f)); }
  bool string(string_t& s) { return Add(Json(std::move(s))); }
  bool binary(binary_t&) { return Fail("binary values are not JSON"); }
  bool start_object(std::size_t) { return Open(Json::object()); }
  bool start_array(std::size_t) { return Open(Json::array()); }
  bool key(string_t& k) {
    open_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's messages start with "[json.exception.parse_error.101] ": keep what follows.
    std::string_view what = e.what();
    if (const size_t p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
    error_ = Status(StatusCode::kInvalidData,
                    fmt::format("{}: not valid JSON at byte {} ({})", Name(), position, what));
    return false;
  }

  Result<Json> Take() {
    if (!error_.ok()) return error_;
    return std::move(root_);
  }

 private:
  // An open container: where it lives, and where its next value goes.
  struct Open_ {
    Json* value;
    std::string key;   // objects: the key of the value being read
    size_t index = 0;  // arrays: the index of the next value
  };

  // The path of the value being read: where_ then .key / [index] per open container; the
  // body's own name when that is empty.
  std::string Path() const {
    std::string path(where_);
    for (size_t i = 0; i < open_.size(); ++i) {
      const Open_& o = open_[i];
      if (o.value->is_object()) {
        path += (path.empty() ? "" : ".") + o.key;
      } else {
        // An outer array's current value was placed already; the top one's is next.
        path += fmt::format("[{}]", i + 1 < open_.size() ? o.index - 1 : o.index);
      }
    }
    if (path.empty() || path[0] == '[') path = Name() + path;
    return path;
  }

  std::string Name() const { return where_.empty() ? "the request body" : std::string(where_); }

  bool Fail(const std::string& message) {
    error_ = InvalidArgument("{}: {}", Path(), message);
    return false;
  }

  // Places `v` in the open container (or as the root); returns where it went.
  Json* Place(Json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Open_& top = open_.back();
    if (top.value->is_object()) return &((*top.value)[top.key] = std::move(v));
    top.value->push_back(std::move(v));
    ++top.index;
    return &top.value->back();
  }

  bool Count() {
    if (++budget_.values > limits_.max_values) {
      error_ = InvalidArgument(
          "{}: more than {} JSON values in one request (each costs memory to hold and to "
          "render)",
          Name(), limits_.max_values);
      return false;
    }
    return true;
  }

  bool Add(Json&& v) {
    if (!Count()) return false;
    Place(std::move(v));
    return true;
  }

  bool Open(Json&& container) {
    if (static_cast<int>(open_.size()) >= limits_.max_depth) {
      return Fail(fmt::format("nests deeper than {} levels", limits_.max_depth));
    }
    if (!Count()) return false;
    open_.push_back({Place(std::move(container)), {}, 0});
    return true;
  }

  bool Close() {
    open_.pop_back();
    return true;
  }

  std::string_view where_;
  const JsonLimits& limits_;
  JsonBudget& budget_;
  Json root_;
  std::vector<Open_> open_;
  Status error_;
};

}  // namespace

Result<Json> ParseJsonWithLimits(std::string_view text, std::string_view where,
                                 const JsonLimits& limits, JsonBudget* budget) {
  JsonBudget local;
  LimitedBuilder builder(where, limits, budget ? *budget : local);
  const bool ok = Json::sax_parse(text, &builder, nlohmann::detail::input_format_t::json,
                                  /*strict=*/true);
  Result<Json> out = builder.Take();
  if (ok && !out.ok()) return out.status();
  if (!ok && out.ok()) {
    return Status(StatusCode::kInvalidData,
                  fmt::format("{}: not valid JSON", where.empty() ? "the request body" : where));
  }
  return out;
}

}  // namespace shardlm::server
