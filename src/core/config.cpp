// Process-wide switches: op determinism (lockstep/core/config.h).
#include "lockstep/core/config.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace lockstep::config {

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0;
}

std::atomic<bool>& determinism() {
  static std::atomic<bool> enabled{env_flag("LOCKSTEP_DETERMINISTIC") ||
                                   env_flag("TF_DETERMINISTIC_OPS")};
  return enabled;
}

}  // namespace

void enable_op_determinism() { determinism().store(true); }
void disable_op_determinism() { determinism().store(false); }
bool op_determinism_enabled() { return determinism().load(std::memory_order_relaxed); }

}  // namespace lockstep::config
