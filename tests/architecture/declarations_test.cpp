// What a declaration says, the code may not say again in a string. Three checks over src/, each
// also run on a fixture tree with one violation to show it finds it:
//  - attribute keys: every key read with attr_i / attr_f / attr_b / attr_s / attr_ints /
//    attr_floats / attr_activation (n, "key") is declared by some op, so a misspelt key fails
//    here, not at run time in the one program that reads it;
//  - fused activations: no code reads the "activation" attribute as a string (attr_s(n,
//    "activation") == "relu"); it reads FusedActivation through attr_activation;
//  - backends: nothing outside src/backends asks which backend it is (cfg.backend == "cpu"); a
//    backend states its policy through the Backend interface.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "architecture/source_scan.h"
#include "lockstep/graph/op_registry.h"

namespace fs = std::filesystem;
using lockstep::source_scan::joined;
using lockstep::source_scan::write;

namespace {

std::set<std::string> declared_attribute_keys() {
  std::set<std::string> keys;
  for (const lockstep::OpDef* d : lockstep::OpRegistry::get().ops())
    for (const lockstep::AttrDecl& a : d->attrs) keys.insert(a.name);
  return keys;
}

// One message per violation: "path:line: what".
std::vector<std::string> declaration_violations(const fs::path& root) {
  const std::set<std::string> keys = declared_attribute_keys();
  const std::regex attr_read(
      R"re(\battr_(i|f|b|s|ints|floats|activation)\(\s*[\w.>\-\*\(\)\[\]]+\s*,\s*"(\w+)")re");
  const std::regex activation_string(R"re(\battr_s\([^;]*"(dw_)?activation"\))re");
  const std::regex backend_string(R"(\bbackend\s*[!=]=\s*")");
  std::vector<std::string> out;
  lockstep::source_scan::for_each_code_line(
      root, [&](const std::string& rel, const std::string& where, const std::string& code,
                const std::string& line) {
        for (auto it = std::sregex_iterator(code.begin(), code.end(), attr_read);
             it != std::sregex_iterator(); ++it)
          if (!keys.count((*it)[2]))
            out.push_back(where + "reads attribute '" + std::string((*it)[2]) +
                          "', which no op declares");
        if (std::regex_search(code, activation_string))
          out.push_back(where + "reads a fused activation as a string (use attr_activation)");
        if (rel.rfind("src/backends/", 0) != 0 && std::regex_search(code, backend_string))
          out.push_back(where +
                        "asks for a backend by name outside src/backends (ask the "
                        "Backend): " +
                        line);
      });
  return out;
}

fs::path fixture(const std::string& name) {
  fs::path root = fs::temp_directory_path() / ("lockstep_declarations_" + name);
  fs::remove_all(root);
  write(root / "src/ops/fine.cpp",
        "auto p = attr_s(n, \"padding\");\nauto a = attr_activation(n);\n"
        "if (cfg.backend_name.empty()) {}\n");
  write(root / "src/backends/cpu/fine.cpp", "if (options.backend == \"cpu\") {}\n");
  return root;
}

}  // namespace

TEST(Declarations, TheTreeReadsOnlyDeclaredFactsThroughTypedReads) {
  auto v = declaration_violations(LOCKSTEP_SOURCE_DIR);
  EXPECT_TRUE(v.empty()) << joined(v);
}

TEST(Declarations, AFixtureThatKeepsTheRulesPasses) {
  auto v = declaration_violations(fixture("clean"));
  EXPECT_TRUE(v.empty()) << joined(v);
}

TEST(Declarations, AMisspeltAttributeKeyFails) {
  fs::path root = fixture("key");
  write(root / "src/backends/cpu/conv.cpp", "const auto& p = attr_s(n, \"paddin\");\n");
  auto v = declaration_violations(root);
  ASSERT_EQ(v.size(), 1u) << joined(v);
  EXPECT_NE(v[0].find("src/backends/cpu/conv.cpp:1"), std::string::npos) << v[0];
  EXPECT_NE(v[0].find("'paddin'"), std::string::npos) << v[0];
}

TEST(Declarations, AnActivationComparedAsAStringFails) {
  fs::path root = fixture("activation");
  write(root / "src/backends/reference/pool.cpp",
        "const bool relu = attr_s(n, \"activation\") == \"relu\";\n");
  auto v = declaration_violations(root);
  ASSERT_EQ(v.size(), 1u) << joined(v);
  EXPECT_NE(v[0].find("attr_activation"), std::string::npos) << v[0];
}

TEST(Declarations, ABackendNamedInTrainFails) {
  fs::path root = fixture("backend");
  write(root / "src/trainers/program.cpp", "  const bool host = cfg.backend == \"cpu\";\n");
  auto v = declaration_violations(root);
  ASSERT_EQ(v.size(), 1u) << joined(v);
  EXPECT_NE(v[0].find("src/trainers/program.cpp:1"), std::string::npos) << v[0];
}
