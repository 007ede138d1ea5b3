// The environment registry (lockstep/core/env.h): switches are read one way (a flag's spellings,
// its declared default, an error naming a bad value), src/ reads the environment only through
// the registry and names no undeclared LOCKSTEP_ variable, and docs/cli.md lists every switch.
#include "lockstep/core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <set>

#include "../architecture/source_scan.h"
#include "lockstep/core/error.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = LOCKSTEP_SOURCE_DIR;

// A flag reads the usual spellings; unset or empty gives its declared default (strict_kernels:
// off, fuse: on); LOCKSTEP_STRICT_KERNELS=false means off (it meant on when each flag was parsed
// by hand), and a value that is no switch is an error naming the variable.
TEST(EnvRegistry, FlagsReadTheUsualSpellingsAndTheirDeclaredDefault) {
  const char* name = "LOCKSTEP_STRICT_KERNELS";
  ASSERT_STREQ(env::decl(env::strict_kernels.sw).name, name);
  unsetenv(name);
  unsetenv("LOCKSTEP_FUSE");
  EXPECT_FALSE(env::flag(env::strict_kernels));
  EXPECT_FALSE(env::flag_if_set(env::strict_kernels).has_value());
  EXPECT_TRUE(env::flag(env::fuse));
  for (const char* on : {"1", "true", "TRUE", "on", "yes"}) {
    setenv(name, on, 1);
    EXPECT_TRUE(env::flag(env::strict_kernels)) << on;
  }
  for (const char* off : {"0", "false", "False", "off", "no"}) {
    setenv(name, off, 1);
    EXPECT_FALSE(env::flag(env::strict_kernels)) << off;
    EXPECT_EQ(env::flag_if_set(env::strict_kernels), std::optional<bool>(false)) << off;
  }
  setenv(name, "", 1);
  EXPECT_FALSE(env::flag(env::strict_kernels));
  setenv(name, "maybe", 1);
  try {
    env::flag(env::strict_kernels);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0/false/off/no"), std::string::npos) << e.what();
  }
  unsetenv(name);
}

TEST(EnvRegistry, ValuesAreTheTextOrNothing) {
  const char* name = env::decl(env::predict_tile.sw).name;
  unsetenv(name);
  EXPECT_FALSE(env::text(env::predict_tile).has_value());
  setenv(name, "", 1);
  EXPECT_FALSE(env::text(env::predict_tile).has_value());
  setenv(name, "64", 1);
  EXPECT_EQ(env::text(env::predict_tile), std::optional<std::string>("64"));
  unsetenv(name);
}

TEST(EnvRegistry, EveryDeclarationIsWellFormedAndUnique) {
  std::set<std::string> names;
  for (size_t i = 0; i < env::switches().size(); ++i) {
    const env::Decl& d = env::switches()[i];
    EXPECT_EQ(size_t(d.sw), i) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << d.name << " declared twice";
    EXPECT_TRUE(*d.doc && *d.area) << d.name;
    if (d.kind == env::Kind::flag) {  // a flag's default must itself be a switch value
      EXPECT_TRUE(std::string(d.fallback) == "0" || std::string(d.fallback) == "1") << d.name;
    }
  }
}

// What the scan flags in one line of code: a getenv call, or a LOCKSTEP_ variable named in a
// string literal that the registry does not declare.
std::vector<std::string> findings(const std::string& rel, const std::string& code) {
  static const std::regex literal("\"(LOCKSTEP_[A-Z0-9_]+)\"");
  static const std::set<std::string> declared = [] {
    std::set<std::string> s;
    for (const env::Decl& d : env::switches()) s.insert(d.name);
    return s;
  }();
  std::vector<std::string> out;
  if (rel != "src/core/env.cpp" && code.find("getenv") != std::string::npos)
    out.push_back("reads the environment with getenv: use lockstep/core/env.h");
  for (std::sregex_iterator it(code.begin(), code.end(), literal), end; it != end; ++it)
    if (!declared.count((*it)[1].str()))
      out.push_back("names " + (*it)[1].str() + ", which lockstep/core/env.h does not declare");
  return out;
}

TEST(EnvRegistry, SourceReadsTheEnvironmentOnlyThroughTheRegistry) {
  // The scan itself catches the mutations it is there for.
  EXPECT_EQ(findings("src/ops/x.cpp", R"(const char* v = std::getenv("LOCKSTEP_FUSE");)").size(),
            1u);
  EXPECT_EQ(findings("src/ops/x.cpp", R"(parse_int("LOCKSTEP_NOT_DECLARED", v, 0, 1);)").size(),
            1u);
  EXPECT_TRUE(findings("src/ops/x.cpp", R"(env::flag(env::fuse);)").empty());
  std::vector<std::string> bad;
  source_scan::for_each_code_line(kRoot, [&](const std::string& rel, const std::string& where,
                                             const std::string& code, const std::string&) {
    for (const std::string& f : findings(rel, code)) bad.push_back(where + f);
  });
  EXPECT_TRUE(bad.empty()) << source_scan::joined(bad);
}

// docs/cli.md's table between the markers is env::docs_table(); LOCKSTEP_UPDATE_DOCS=1 rewrites
// it (as for docs/ops.md).
TEST(EnvRegistry, DocsListEverySwitch) {
  const fs::path path = kRoot / "docs" / "cli.md";
  const std::string begin = "<!-- env-switches:begin (generated from lockstep/core/env.h) -->\n";
  const std::string end = "<!-- env-switches:end -->";
  std::string text = source_scan::read(path);
  const size_t a = text.find(begin), b = text.find(end);
  ASSERT_TRUE(a != std::string::npos && b != std::string::npos && a < b)
      << path << " lacks the markers " << begin << " and " << end;
  const std::string want = env::docs_table();
  const std::string have = text.substr(a + begin.size(), b - a - begin.size());
  const char* update = std::getenv("LOCKSTEP_UPDATE_DOCS");
  if (update && std::string(update) == "1" && have != want) {
    text.replace(a + begin.size(), b - a - begin.size(), want);
    source_scan::write(path, text);
    return;
  }
  EXPECT_EQ(have, want) << "docs/cli.md's switch table is stale: run LOCKSTEP_UPDATE_DOCS=1 "
                           "ctest -R EnvRegistry.DocsListEverySwitch";
}

}  // namespace
}  // namespace lockstep
