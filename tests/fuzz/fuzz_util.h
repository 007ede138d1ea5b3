// Helpers for the libFuzzer targets of tests/fuzz. A target passes when the code under test
// returns or throws lockstep::Error (a clean, named failure); anything else — another exception
// type (it would reach std::terminate in a user's program), a crash, an ASan/UBSan report, a
// leak, an allocation over libFuzzer's -rss_limit_mb / -malloc_limit_mb — is a finding.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "lockstep/core/error.h"

namespace lockstep::fuzz {

// A per-process scratch file (the readers under test take paths). `suffix` picks the reader's
// mode (".gz": gzip). Rewritten on every input.
inline std::string write_scratch_file(const uint8_t* data, size_t size, const std::string& suffix) {
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/lockstep_fuzz_" +
                           std::to_string(::getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

// Runs f; a lockstep::Error is the expected way to refuse bad input.
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const lockstep::Error&) {
  }
}

}  // namespace lockstep::fuzz
