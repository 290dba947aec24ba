#include "support/fixtures.h"

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

std::string ShardlmBinary() { return SHARDLM_BINARY; }

bool BinaryBuilt() { return std::filesystem::exists(ShardlmBinary()); }

}  // namespace shardlm::testing
