// Every example program (examples/*.cpp, docs/examples/*.cpp) answers --help with its usage and
// exit status 0, and refuses an unknown flag with status 2, without side effects: nothing is
// created in its working folder and nothing trains (extending and mixed_precision aborted on an
// uncaught lockstep::Error, save_and_load and deterministic made a folder named --help and
// trained, quickstart trained). Runs the binaries next to the test binary; a program that is
// not built is listed and skipped.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace fs = std::filesystem;

namespace {

// The example programs' binaries (build/bin/NAME; examples/lockstep.cpp is bin/lockstep).
std::vector<std::string> example_names() {
  std::vector<std::string> names;
  for (const char* folder : {"examples", "docs/examples"})
    for (const auto& e : fs::directory_iterator(fs::path(LOCKSTEP_SOURCE_DIR) / folder))
      if (e.path().extension() == ".cpp") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Run {
  int status = -1;
  std::string output;
};

// Runs `bin args` in `cwd` with no data to find (so a program that goes on to train fails fast
// instead), bounded to 60 s.
Run run_in(const fs::path& cwd, const std::string& bin, const std::string& args) {
  const std::string cmd = "cd '" + cwd.string() +
                          "' && LOCKSTEP_FASHION_MNIST_DIR=/nonexistent/lockstep-help-test "
                          "timeout 60 '" +
                          bin + "' " + args + " 2>&1 </dev/null";
  Run r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, k);
  const int s = ::pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
  return r;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// Runs every built example with `args` in a fresh empty folder; checks the status, the output
// (`expect` in it) and that the folder stays empty. Returns how many ran.
int check_every_example(const std::string& args, int status, const std::string& expect) {
  int ran = 0;
  for (const std::string& name : example_names()) {
    const fs::path bin = fs::path(LOCKSTEP_BINARY_DIR) / "bin" / name;
    if (!fs::exists(bin)) {
      std::printf("[  NOTE    ] bin/%s not built; skipped\n", name.c_str());
      continue;
    }
    const fs::path cwd = lockstep::test_util::temp_dir("example_help_" + name, /*fresh=*/true);
    const Run r = run_in(cwd, bin.string(), args);
    EXPECT_EQ(r.status, status) << name << " " << args << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << name << " " << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << name << "\n" << r.output;
    EXPECT_EQ(entries(cwd), std::vector<std::string>{})
        << name << " " << args << " created files in its working folder";
    fs::remove_all(cwd);
    ++ran;
  }
  return ran;
}

}  // namespace

TEST(ExampleHelp, EveryExampleAnswersHelpWithItsUsageAndDoesNothingElse) {
  if (check_every_example("--help", 0, "usage") == 0) GTEST_SKIP() << "no example is built";
  check_every_example("-h", 0, "usage");
}

TEST(ExampleHelp, EveryExampleRefusesAnUnknownFlag) {
  if (check_every_example("--no-such-flag 1", 2, "--no-such-flag") == 0)
    GTEST_SKIP() << "no example is built";
}
