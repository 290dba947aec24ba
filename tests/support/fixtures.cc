#include "support/fixtures.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace shardlm::testing {

std::string FixturesDir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("SHARDLM_FIXTURES"); env && fs::is_directory(env)) return env;
  fs::path dir = fs::path(SHARDLM_SOURCE_DIR) / ".." / "shared" / "fixtures";
  if (fs::is_directory(dir)) return fs::canonical(dir).string();
  return "";
}

std::string FixturePath(const std::string& name) {
  std::string dir = FixturesDir();
  return dir.empty() ? "" : dir + "/" + name;
}

bool UnderCi() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

std::vector<float> ReadF32File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  in.seekg(0, std::ios::end);
  size_t size = static_cast<size_t>(in.tellg());
  in.seekg(0);
  std::vector<float> values(size / sizeof(float));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(size));
  return values;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json ReadJsonFile(const std::string& path) {
  return nlohmann::json::parse(ReadTextFile(path));
}

const std::vector<std::string>& ModelsOfArchitecturesToCome() {
  static const std::vector<std::string> models = {"laguna-tiny.gguf", "qwen3moe-tiny.gguf",
                                                  "qwen3moe-tiny-q4_k_m.gguf"};
  return models;
}

namespace {
bool Listed(const std::vector<std::string>& list, const std::string& model) {
  return std::find(list.begin(), list.end(), model) != list.end();
}
}  // namespace

bool EngineCannotRunYet(const std::string& model_file) {
  return Listed(ModelsOfArchitecturesToCome(), model_file);
}

std::vector<nlohmann::json> RunnableGoldenEntries() {
  std::vector<nlohmann::json> entries;
  if (FixturesDir().empty()) return entries;
  const nlohmann::json golden = ReadJsonFile(FixturePath("golden.json"));
  for (const nlohmann::json& e : golden["entries"]) {
    const std::string arch = e["arch"];
    if ((arch == "llama" || arch == "qwen3" || arch == "gemma3" || arch == "qwen35" ||
         arch == "gemma4") &&
        !EngineCannotRunYet(e["model"])) {
      entries.push_back(e);
    }
  }
  return entries;
}

nlohmann::json GoldenEntry(const std::string& id) {
  const nlohmann::json golden = ReadJsonFile(FixturePath("golden.json"));
  for (const nlohmann::json& e : golden["entries"]) {
    if (e["id"] == id) return e;
  }
  ADD_FAILURE() << "no golden entry " << id;
  return nullptr;
}

std::string FixtureTestName(const std::string& name) {
  std::string out = name.substr(0, name.find(".gguf"));
  std::replace_if(
      out.begin(), out.end(), [](char c) { return !std::isalnum(c); }, '_');
  return out;
}

std::tm FixtureClock() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 22;
  std::time_t t = timegm(&tm);
  gmtime_r(&t, &tm);  // fills tm_wday / tm_yday
  return tm;
}

std::optional<std::string> OptionalToken(const nlohmann::json& token) {
  if (token.is_null()) return std::nullopt;
  return token.get<std::string>();
}

std::string ShardlmBinary() { return SHARDLM_BINARY; }

bool BinaryBuilt() { return std::filesystem::exists(ShardlmBinary()); }

}  // namespace shardlm::testing
