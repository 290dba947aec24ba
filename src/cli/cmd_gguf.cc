// `shardlm gguf info FILE [--json]`: what a GGUF file holds, without loading the model.
// Also registers `gguf synth` (cmd_gguf_synth.cc).
//
// Goals: file facts (version, size, fingerprint), every metadata key with long arrays and
// strings abbreviated (a 151936-token vocab prints as its type and length), the tokenizer in
// one line, a tensor table and a per-type summary; --json gives the same as one object.
// Non-goals: validating that an architecture is complete (model/ does that at load time).
#include <fmt/ranges.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "gguf/fingerprint.h"
#include "gguf/gguf_file.h"

namespace shardlm::cli {
namespace {

// Arrays up to this length print inline; longer ones as type and length.
constexpr size_t kInlineArray = 8;
// Strings longer than this (chat templates) are cut in text output.
constexpr size_t kInlineString = 72;

struct InfoFlags {
  std::string path;
  bool json = false;
};

std::string Shape(const std::vector<int64_t>& ne) {
  return fmt::format("[{}]", fmt::join(ne, ", "));
}

std::string TypeName(GgmlType type) { return GgmlTypeName(static_cast<uint32_t>(type)); }

// A JSON-style quoted string; invalid UTF-8 is replaced, never thrown on.
std::string Quoted(std::string_view s) {
  auto quote = [](std::string_view x) {
    return nlohmann::json(std::string(x))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (s.size() <= kInlineString) return quote(s);
  return quote(s.substr(0, kInlineString)) + fmt::format("... ({} bytes)", s.size());
}

std::string ScalarText(const GgufValue& v) {
  if (auto* u = std::get_if<uint64_t>(&v.scalar)) {
    if (v.type == GgufValueType::kBool) return *u ? "true" : "false";
    return std::to_string(*u);
  }
  if (auto* i = std::get_if<int64_t>(&v.scalar)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v.scalar)) return fmt::format("{}", *d);
  if (auto* s = std::get_if<std::string_view>(&v.scalar)) return Quoted(*s);
  return "?";
}

std::string ValueText(const GgufValue& v) {
  if (v.type != GgufValueType::kArray) return ScalarText(v);
  std::string elem(GgufValueTypeName(v.array_type));
  if (v.array_size > kInlineArray) return fmt::format("[{} x {}]", elem, v.array_size);
  std::vector<std::string> items;
  for (int64_t x : v.ints) items.push_back(std::to_string(x));
  for (double x : v.floats) items.push_back(fmt::format("{}", x));
  for (std::string_view s : v.strings) items.push_back(Quoted(s));
  return fmt::format("[{}]", fmt::join(items, ", "));
}

nlohmann::json ValueJson(const GgufValue& v) {
  if (v.type != GgufValueType::kArray) {
    if (auto* u = std::get_if<uint64_t>(&v.scalar)) {
      return v.type == GgufValueType::kBool ? nlohmann::json(*u != 0) : nlohmann::json(*u);
    }
    if (auto* i = std::get_if<int64_t>(&v.scalar)) return *i;
    if (auto* d = std::get_if<double>(&v.scalar)) return *d;
    return std::string(std::get<std::string_view>(v.scalar));
  }
  nlohmann::json out = {
      {"type", "array"}, {"elem_type", GgufValueTypeName(v.array_type)}, {"length", v.array_size}};
  if (v.array_size <= kInlineArray) {
    nlohmann::json values = nlohmann::json::array();
    for (int64_t x : v.ints) values.push_back(x);
    for (double x : v.floats) values.push_back(x);
    for (std::string_view s : v.strings) values.push_back(std::string(s));
    out["values"] = values;
  }
  return out;
}

struct Summary {
  std::map<std::string, int> per_type;
  uint64_t total_bytes = 0;
  int64_t n_params = 0;
};

Summary Summarize(const GgufFile& f) {
  Summary s;
  for (const GgufTensorInfo& t : f.tensors()) {
    ++s.per_type[TypeName(t.type)];
    s.total_bytes += t.n_bytes;
    s.n_params += t.n_elements();
  }
  return s;
}

// Tokenizer facts in one struct, from whatever keys are present.
struct TokenizerInfo {
  std::string model = "-";
  std::string pre = "-";
  uint64_t n_vocab = 0;
  uint64_t n_merges = 0;
};

TokenizerInfo Tokenizer(const GgufFile& f) {
  TokenizerInfo t;
  if (auto m = f.GetString("tokenizer.ggml.model"); m.ok()) t.model = std::string(m.value());
  if (auto p = f.GetString("tokenizer.ggml.pre"); p.ok()) t.pre = std::string(p.value());
  if (const GgufValue* v = f.Find("tokenizer.ggml.tokens")) t.n_vocab = v->array_size;
  if (const GgufValue* v = f.Find("tokenizer.ggml.merges")) t.n_merges = v->array_size;
  return t;
}

std::string Architecture(const GgufFile& f) {
  auto arch = f.GetString("general.architecture");
  return arch.ok() ? std::string(arch.value()) : "-";
}

void PrintText(const GgufFile& f) {
  Summary s = Summarize(f);
  TokenizerInfo tok = Tokenizer(f);
  fmt::print("file: {}\nversion: {}\nsize: {} bytes ({:.2f} MiB)\nfingerprint: {}\n", f.name(),
             f.version(), f.file_size(), static_cast<double>(f.file_size()) / (1 << 20),
             ModelFingerprint(f).ToHex());
  fmt::print("architecture: {}\n", Architecture(f));
  fmt::print("tokenizer: model {}, pre {}, {} tokens, {} merges\n", tok.model, tok.pre, tok.n_vocab,
             tok.n_merges);
  fmt::print("metadata ({} keys):\n", f.metadata().size());
  for (const GgufKeyValue& kv : f.metadata()) {
    fmt::print("  {:<44} {:<8} {}\n", kv.key, GgufValueTypeName(kv.value.type),
               ValueText(kv.value));
  }
  fmt::print("tensors ({}):\n  {:<40} {:<6} {:<22} {:>12}\n", f.tensors().size(), "name", "type",
             "shape", "bytes");
  for (const GgufTensorInfo& t : f.tensors()) {
    fmt::print("  {:<40} {:<6} {:<22} {:>12}\n", t.name, TypeName(t.type), Shape(t.ne), t.n_bytes);
  }
  std::vector<std::string> counts;
  for (const auto& [type, n] : s.per_type) counts.push_back(fmt::format("{}: {}", type, n));
  if (counts.empty()) counts.push_back("no tensors");
  fmt::print("summary: {}; {} tensor bytes ({:.2f} MiB); {} parameters ({:.3f} B)\n",
             fmt::join(counts, ", "), s.total_bytes, static_cast<double>(s.total_bytes) / (1 << 20),
             s.n_params, static_cast<double>(s.n_params) / 1e9);
}

nlohmann::json InfoJson(const GgufFile& f) {
  Summary s = Summarize(f);
  TokenizerInfo tok = Tokenizer(f);
  nlohmann::json metadata = nlohmann::json::object();
  for (const GgufKeyValue& kv : f.metadata()) metadata[std::string(kv.key)] = ValueJson(kv.value);
  nlohmann::json tensors = nlohmann::json::array();
  for (const GgufTensorInfo& t : f.tensors()) {
    tensors.push_back({{"name", std::string(t.name)},
                       {"type", TypeName(t.type)},
                       {"ne", t.ne},
                       {"bytes", t.n_bytes},
                       {"offset", t.offset}});
  }
  return {
      {"file", f.name()},
      {"version", f.version()},
      {"size_bytes", f.file_size()},
      {"fingerprint", ModelFingerprint(f).ToHex()},
      {"architecture", Architecture(f)},
      {"alignment", f.alignment()},
      {"data_offset", f.data_offset()},
      {"tokenizer",
       {{"model", tok.model},
        {"pre", tok.pre},
        {"n_vocab", tok.n_vocab},
        {"n_merges", tok.n_merges}}},
      {"metadata", metadata},
      {"tensors", tensors},
      {"summary",
       {{"tensor_types", s.per_type}, {"total_bytes", s.total_bytes}, {"n_params", s.n_params}}}};
}

Status RunInfo(const InfoFlags& flags) {
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(flags.path));
  if (flags.json) {
    // Invalid UTF-8 in a key or token must not abort the dump: replace it.
    std::string out = InfoJson(*file).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
  } else {
    PrintText(*file);
  }
  return Status::Ok();
}

}  // namespace

void AddGgufCommand(CLI::App& app, Action& action) {
  CLI::App* gguf = app.add_subcommand("gguf", "Inspect or synthesize GGUF files");
  gguf->require_subcommand(1);
  auto flags = std::make_shared<InfoFlags>();
  CLI::App* info = gguf->add_subcommand("info", "Print a GGUF file's metadata and tensors");
  info->add_option("file", flags->path, "GGUF file")->required();
  info->add_flag("--json", flags->json, "One JSON object instead of text");
  info->callback([flags, &action] { action = [flags] { return RunInfo(*flags); }; });
  AddGgufSynthCommand(*gguf, action);
}

}  // namespace shardlm::cli
