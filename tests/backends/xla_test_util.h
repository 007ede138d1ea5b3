// Helpers of the XLA backend tests (tests/backends/xla_*_test.cpp): one PJRT client on the CPU
// plugin per test process (2 devices, for the replica tests), or the reason there is none.
// The tests build only with the LOCKSTEP_XLA compile definition (CMake found pjrt_c_api.h) and
// skip with the reason when the plugin cannot be loaded.
#pragma once
#include <cstdlib>
#ifdef LOCKSTEP_XLA
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backends/xla/pjrt_client.h"
#include "lockstep/core/error.h"

namespace lockstep::xla_test {

struct SharedClient {
  std::shared_ptr<xla::PjrtClient> client;
  std::string why_not;  // set when client is null
};

// The CPU plugin's client with 2 devices, created once.
inline const SharedClient& shared_client() {
  static const SharedClient c = [] {
    SharedClient s;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // Not yet run under the sanitizers: the plugin is a 259 MB uninstrumented library with its
    // own threads and JIT; the release build runs these tests.
    s.why_not =
        "sanitizer build: the PJRT plugin is not instrumented (the release suite runs this)";
    return s;
#endif
    try {
      // LOCKSTEP_XLA_TEST_PLUGIN: the op tests on another plugin ("cuda": bench/device_check.sh).
      // The CPU plugin is asked for 2 devices; another plugin for its default.
      const char* env = std::getenv("LOCKSTEP_XLA_TEST_PLUGIN");
      const std::string plugin = env && *env ? env : "cpu";
      s.client =
          xla::PjrtClient::create({.plugin = plugin, .device_count = plugin == "cpu" ? 2 : 0});
    } catch (const Error& e) {
      s.why_not = e.what();
    }
    return s;
  }();
  return c;
}

// In a test body: `auto client = XLA_CLIENT_OR_SKIP();` (skips the test without a plugin).
#define XLA_CLIENT_OR_SKIP()                                        \
  ::lockstep::xla_test::shared_client().client;                     \
  if (!::lockstep::xla_test::shared_client().client)                \
  GTEST_SKIP() << "no PJRT CPU plugin (run scripts/setup_xla.sh): " \
               << ::lockstep::xla_test::shared_client().why_not

}  // namespace lockstep::xla_test
#endif
