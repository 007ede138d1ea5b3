// Helpers shared by the test files (tests/ is on the test target's include path):
//   #include "test_util.h"
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "lockstep/core/error.h"

namespace lockstep::test_util {

// True in the ASan/UBSan and TSan builds. Tests that measure resident memory or run with a
// tiny descriptor limit skip there (the sanitizers' shadow memory, allocator and runtime
// change exactly what they measure); the release suite runs them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// Runs f and returns the message of the lockstep::Error it throws, or "" when it throws
// nothing. Other exception types propagate (a test that expects a lockstep::Error should fail
// loudly on anything else).
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A directory for this test process under the system temp dir: <tmp>/lockstep_<tag>_<pid>.
// Created if missing; with fresh = true any previous content is removed first.
inline std::filesystem::path temp_dir(const std::string& tag, bool fresh = false) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("lockstep_" + tag + "_" + std::to_string(::getpid()));
  if (fresh) fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The whole content of a file ("" when it cannot be opened).
inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace lockstep::test_util
