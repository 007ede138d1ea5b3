// The layering the build promises (src/modules.txt) holds for every #include in src/ and
// include/, and the check catches an upward include and a private-header include.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "architecture/layering_check.h"

using namespace lockstep::testing;
namespace fs = std::filesystem;

TEST(Layering, TheTreeKeepsItsModuleDag) {
  auto violations = check_layering(LOCKSTEP_SOURCE_DIR);
  std::string all;
  for (auto& v : violations) all += v + "\n";
  EXPECT_TRUE(violations.empty()) << all;
}

TEST(Layering, ModulesAreDeclaredBottomUp) {
  ModuleGraph g = read_module_graph(std::string(LOCKSTEP_SOURCE_DIR) + "/src/modules.txt");
  ASSERT_GE(g.modules.size(), 10u);
  EXPECT_EQ(g.modules.front().name, "core");
  EXPECT_TRUE(g.reach.at("trainers").count("core"));
  EXPECT_TRUE(g.reach.at("trainers").count("nn"));
  EXPECT_FALSE(g.reach.at("nn").count("trainers"));
  // Keras's map: metrics build on losses; saving and callbacks sit above the Model they use.
  EXPECT_TRUE(g.reach.at("metrics").count("losses"));
  EXPECT_FALSE(g.reach.at("losses").count("metrics"));
  EXPECT_FALSE(g.reach.at("trainers").count("saving"));
  EXPECT_FALSE(g.reach.at("trainers").count("callbacks"));
  EXPECT_FALSE(g.reach.at("saving").count("callbacks"));
  EXPECT_FALSE(g.reach.at("io").count("nn"));
  EXPECT_FALSE(g.reach.at("backend_cpu").count("backend_reference"));
}

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

fs::path fixture_tree(const std::string& name) {
  fs::path root = fs::temp_directory_path() / ("lockstep_layering_" + name);
  fs::remove_all(root);
  write(root / "src/modules.txt", "# fixture\nbase  base  -\nmid   mid   base\ntop   top   mid\n");
  write(root / "include/lockstep/base/a.h", "#pragma once\n#include <vector>\n");
  write(root / "include/lockstep/mid/b.h", "#pragma once\n#include \"lockstep/base/a.h\"\n");
  write(root / "src/base/internal/shared.h", "#pragma once\n");
  write(root / "src/base/private.h", "#pragma once\n");
  write(root / "src/mid/b.cpp",
        "#include \"lockstep/mid/b.h\"\n#include \"base/internal/shared.h\"\n");
  write(root / "src/top/t.cpp", "#include \"lockstep/base/a.h\"\n#include \"lockstep/mid/b.h\"\n");
  return root;
}

}  // namespace

TEST(Layering, AFixtureThatKeepsTheRulesPasses) {
  EXPECT_TRUE(check_layering(fixture_tree("clean").string()).empty());
}

TEST(Layering, AnUpwardIncludeFails) {
  fs::path root = fixture_tree("upward");
  write(root / "src/base/x.cpp", "#include <string>\n\n#include \"lockstep/mid/b.h\"\n");
  auto v = check_layering(root.string());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("src/base/x.cpp:3: includes lockstep/mid/b.h: module base may not use mid"),
            std::string::npos)
      << v[0];
}

TEST(Layering, APublicHeaderIncludingUpwardFails) {
  fs::path root = fixture_tree("public_upward");
  write(root / "include/lockstep/base/c.h", "#pragma once\n#include \"lockstep/top/t.h\"\n");
  write(root / "include/lockstep/top/t.h", "#pragma once\n");
  auto v = check_layering(root.string());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("module base may not use top"), std::string::npos) << v[0];
}

TEST(Layering, AnotherModulesPrivateHeaderFails) {
  fs::path root = fixture_tree("private");
  write(root / "src/mid/c.cpp", "#include \"base/private.h\"\n");
  auto v = check_layering(root.string());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("a private header of module base"), std::string::npos) << v[0];
}

TEST(Layering, AFolderOutsideEveryModuleFails) {
  fs::path root = fixture_tree("stray");
  write(root / "src/stray/s.cpp", "int x;\n");
  auto v = check_layering(root.string());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("is in no module"), std::string::npos) << v[0];
}

TEST(Layering, ACycleInTheDeclarationFails) {
  fs::path root = fixture_tree("cycle");
  write(root / "src/modules.txt", "base base top\ntop top base\n");
  EXPECT_THROW(read_module_graph((root / "src/modules.txt").string()), std::runtime_error);
}
