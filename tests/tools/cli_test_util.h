// Shared by the `lockstep` command-line tests (tests/tools/cli_test.cpp, cli_hardening_test.cpp,
// cli_probe_test.cpp).
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace lockstep::cli_test {

// build/bin/lockstep, or "" when it is not built (the tests then skip).
inline std::string binary() {
  const std::string bin = std::string(LOCKSTEP_BINARY_DIR) + "/bin/lockstep";
  return std::filesystem::exists(bin) ? bin : "";
}

// One run of the tool: its exit status and its stdout and stderr together.
struct CliRun {
  int rc = -1;
  std::string out;
};

// Runs shell command `cmd` (its own redirections included) and returns its exit status (128 +
// the signal when one ended it) and its output.
inline CliRun run_shell(const std::string& cmd) {
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, k);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace lockstep::cli_test
