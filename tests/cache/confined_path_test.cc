#include "cache/confined_path.h"

#include <gtest/gtest.h>

#include <string>

namespace shardlm {
namespace {

namespace fs = std::filesystem;

fs::path Confined(const fs::path& folder, std::string_view name) {
  auto r = ConfinedPath(folder, name);
  EXPECT_TRUE(r.ok()) << name << ": " << r.status().message();
  return r.ok() ? r.value() : fs::path();
}

TEST(ConfinedPath, PlainNamesStayInTheFolder) {
  const fs::path folder = "cache";
  EXPECT_EQ(Confined(folder, "chat1"), folder / "chat1");
  EXPECT_EQ(Confined(folder, "chat 1.bin"), folder / "chat 1.bin");
  EXPECT_EQ(Confined(folder, "a..b"), folder / "a..b");
  EXPECT_EQ(Confined(folder, "Ünïcode"), folder / "Ünïcode");
  EXPECT_TRUE(ConfinedPath(folder, std::string(kMaxUserFilenameBytes, 'x')).ok());
}

TEST(ConfinedPath, RejectsEverythingThatCouldLeave) {
  const fs::path folder = "cache";
  const std::string too_long(kMaxUserFilenameBytes + 1, 'x');
  for (const std::string& bad :
       {std::string(""), std::string("/etc/passwd"), std::string(".."), std::string("."),
        std::string("../x"), std::string("a/b"), std::string("a\\b"), std::string("..\\x"),
        std::string(".hidden"), std::string("a\nb"), std::string("a\tb"), std::string("a\x7f"),
        std::string("a\0b", 3), too_long}) {
    auto r = ConfinedPath(folder, bad);
    ASSERT_FALSE(r.ok()) << "accepted '" << bad << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace shardlm
