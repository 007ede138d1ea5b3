// Shared by the `lockstep` command-line tests (tests/tools/cli_test.cpp, cli_hardening_test.cpp).
#pragma once
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

}  // namespace lockstep::cli_test
