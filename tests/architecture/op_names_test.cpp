// What the compiler knows about an op lives in its declaration (OpDef), and code names ops
// through the op ids (lockstep::op::relu), never as strings. Two checks over the tree:
//  - src/graph's passes, executable, kernel program, memory planner and registries name no op at
//    all (neither an op id nor an op's name in a string): they read declarations. Only the IR
//    builder (graph.cpp: placeholders, variables, constants) and autodiff (gradient seeds and
//    sums) build concrete ops, through the ids;
//  - no file of src/ outside the declarations and kernels spells an op's name as a string where
//    an op is meant (g.add("relu", ...), n.op == op::relu); the IR takes OpIds, so such code no
//    longer compiles, and this check keeps the strings out of other calls too.
// Each check also runs on a fixture tree with one violation, to show it finds it.
#include <gtest/gtest.h>

#include <regex>

#include "architecture/source_scan.h"
#include "lockstep/graph/op_ids.h"

namespace fs = std::filesystem;
using lockstep::source_scan::joined;
using lockstep::source_scan::write;

namespace {

// Files of src/graph that must not name an op.
bool op_free_file(const std::string& s) {
  if (s.rfind("src/graph/", 0) != 0) return false;
  return s != "src/graph/graph.cpp" && s != "src/graph/autodiff.cpp";
}

std::string op_alternatives() {
  std::string alt;
  for (lockstep::OpId id : lockstep::kAllOpIds) alt += (alt.empty() ? "" : "|") + std::string(id);
  return alt;
}

// One message per violation: "path:line: what".
std::vector<std::string> op_name_violations(const fs::path& root) {
  const std::string alt = op_alternatives();
  const std::regex any_id(R"(\bop::\w+)");
  const std::regex op_string("\"(" + alt + ")\"");
  // A string where an op is meant: an op-taking call's first argument, or a comparison with .op.
  const std::regex op_use("\\b(add|add_multi|add_kernel|kernel|attrs_for)\\(\\s*\"(" + alt +
                          ")\"|\\bop\\s*[!=]=\\s*\"(" + alt + ")\"");
  std::vector<std::string> out;
  lockstep::source_scan::for_each_code_line(
      root, [&](const std::string& rel, const std::string& where, const std::string& code,
                const std::string& line) {
        if (op_free_file(rel) &&
            (std::regex_search(code, any_id) || std::regex_search(code, op_string)))
          out.push_back(where + "names an op in generic graph code: " + line);
        else if (std::regex_search(code, op_use))
          out.push_back(where + "an op's name as a string (use lockstep::op::<name>): " + line);
      });
  return out;
}

fs::path fixture(const std::string& name) {
  fs::path root = fs::temp_directory_path() / ("lockstep_op_names_" + name);
  fs::remove_all(root);
  write(root / "src/graph/passes/fine.cpp", "// reads OpDef::fusion\nint f() { return 0; }\n");
  write(root / "src/graph/graph.cpp", "Value v = add(op::input, {});\n");
  write(root / "src/losses/loss.cpp", "Value y = g.add(op::relu, {x});  // g.add(\"relu\")\n");
  return root;
}

}  // namespace

TEST(OpNames, TheTreeNamesOpsOnlyThroughIdsAndNeverInGenericGraphCode) {
  auto v = op_name_violations(LOCKSTEP_SOURCE_DIR);
  EXPECT_TRUE(v.empty()) << joined(v);
}

TEST(OpNames, AFixtureThatKeepsTheRulesPasses) {
  auto v = op_name_violations(fixture("clean"));
  EXPECT_TRUE(v.empty()) << joined(v);
}

TEST(OpNames, APassThatNamesAnOpFails) {
  fs::path root = fixture("pass");
  write(root / "src/graph/passes/bad.cpp", "if (n.op == op::relu) fuse();\n");
  auto v = op_name_violations(root);
  ASSERT_EQ(v.size(), 1u) << joined(v);
  EXPECT_NE(v[0].find("src/graph/passes/bad.cpp:1"), std::string::npos) << v[0];
  write(root / "src/graph/passes/bad.cpp", "static const char* k = \"conv2d\";\n");
  EXPECT_EQ(op_name_violations(root).size(), 1u);
}

TEST(OpNames, AnOpNameAsAStringFails) {
  fs::path root = fixture("string");
  write(root / "src/metrics/metric.cpp", "Value y = g.add(\"softmax\", {x});\n");
  auto v = op_name_violations(root);
  ASSERT_EQ(v.size(), 1u) << joined(v);
  EXPECT_NE(v[0].find("src/metrics/metric.cpp:1"), std::string::npos) << v[0];
}
