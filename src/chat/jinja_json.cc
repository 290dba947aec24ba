// Python json.dumps() of a jinja::Value: what transformers' tojson override prints.
//
// Goals: identical bytes to json.dumps(x, ensure_ascii, indent, separators, sort_keys) for
// the values chat templates hold (insertion-ordered dicts, ints vs floats, non-ASCII text).
// Non-goals: allow_nan=False, custom encoders.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/jinja_strings.h"
#include "chat/jinja_value.h"

namespace shardlm::jinja {
namespace {

void AppendEscapedCodePoint(uint32_t cp, std::string& out) {
  char buf[16];
  if (cp >= 0x10000) {
    cp -= 0x10000;
    std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
  } else {
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
  }
  out += buf;
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t start = i;
      uint32_t cp = DecodeUtf8(s, i);
      if (ensure_ascii) {
        AppendEscapedCodePoint(cp, out);
      } else {
        out.append(s, start, i - start);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          AppendEscapedCodePoint(c, out);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string JsonFloat(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return FormatFloat(f);
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& options) : options_(options) {}

  void Write(const Value& v, int depth, std::string& out) {
    if (depth > kMaxDepth) Fail("tojson: nesting too deep");
    if (out.size() > options_.max_bytes) {
      Fail("tojson: the output grew past " + std::to_string(options_.max_bytes) + " bytes");
    }
    using K = Value::Kind;
    switch (v.kind()) {
      case K::kNone:
        out += "null";
        return;
      case K::kBool:
        out += v.AsBool() ? "true" : "false";
        return;
      case K::kInt:
        out += std::to_string(v.AsInt());
        return;
      case K::kFloat:
        out += JsonFloat(v.AsDouble());
        return;
      case K::kString:
        AppendJsonString(v.AsString(), options_.ensure_ascii, out);
        return;
      case K::kList:
        WriteList(v.AsList(), depth, out);
        return;
      case K::kDict:
        if (!v.AsDict().is_namespace) {
          WriteDict(v.AsDict(), depth, out);
          return;
        }
        break;
      default:
        break;
    }
    Fail("Object of type " + v.TypeName() + " is not JSON serializable");
  }

 private:
  // Python's json module recurses too; this bound keeps hostile input off the C++ stack.
  static constexpr int kMaxDepth = 500;

  void Newline(int depth, std::string& out) {
    out += '\n';
    for (int i = 0; i < depth; ++i) out += options_.indent;
  }

  void Separator(bool first, int depth, std::string& out) {
    if (!first) out += options_.item_separator;
    if (options_.has_indent) Newline(depth, out);
  }

  void WriteList(const ValueList& items, int depth, std::string& out) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      Separator(i == 0, depth + 1, out);
      Write(items[i], depth + 1, out);
    }
    if (options_.has_indent) Newline(depth, out);
    out += ']';
  }

  void WriteDict(const ValueDict& dict, int depth, std::string& out) {
    if (dict.items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : dict.items) entries.push_back(&e);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](auto* a, auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      Separator(i == 0, depth + 1, out);
      AppendJsonString(entries[i]->first, options_.ensure_ascii, out);
      out += options_.key_separator;
      Write(entries[i]->second, depth + 1, out);
    }
    if (options_.has_indent) Newline(depth, out);
    out += '}';
  }

  const JsonOptions& options_;
};

}  // namespace

std::string ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonWriter(options).Write(v, 0, out);
  return out;
}

}  // namespace shardlm::jinja
