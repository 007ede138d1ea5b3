// Process-wide switches: op determinism and the conv algorithm (lockstep/core/config.h).
#include "lockstep/core/config.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lockstep/core/env.h"
#include "lockstep/core/error.h"
#include "lockstep/core/parse.h"

namespace lockstep::config {

namespace {

std::atomic<bool>& determinism() {
  static std::atomic<bool> enabled{env::flag(env::deterministic) ||
                                   env::flag(env::tf_deterministic_ops)};
  return enabled;
}

// The gradient shards: LOCKSTEP_DETERMINISTIC_SHARDS until enable_op_determinism sets them.
// Read on first use (not at start-up), so a bad value is an error fit can report.
std::atomic<int>& shards() {
  static std::atomic<int> value{-1};  // -1: not read yet
  return value;
}

int environment_shards() {
  auto v = env::text(env::deterministic_shards);
  return v ? int(parse_int("LOCKSTEP_DETERMINISTIC_SHARDS", *v, 0, kMaxGradientShards)) : 0;
}

}  // namespace

void enable_op_determinism() { enable_op_determinism(DeterminismOptions{}); }

void enable_op_determinism(const DeterminismOptions& options) {
  const int n = options.shards ? *options.shards : environment_shards();
  LS_CHECK(n >= 0 && n <= kMaxGradientShards,
           "enable_op_determinism: DeterminismOptions::shards must be in 0..", kMaxGradientShards,
           ", got ", n);
  shards().store(n);
  determinism().store(true);
}

void disable_op_determinism() { determinism().store(false); }
bool op_determinism_enabled() { return determinism().load(std::memory_order_relaxed); }

int op_determinism_shards() {
  int n = shards().load();
  if (n < 0) {
    n = environment_shards();
    shards().store(n);
  }
  return n;
}

namespace {
std::atomic<int>& conv_algorithm_value() {
  static std::atomic<int> value{-1};  // -1: LOCKSTEP_CONV_ALGORITHM not read yet
  return value;
}
}  // namespace

void set_conv_algorithm(ConvAlgorithm algorithm) { conv_algorithm_value().store(int(algorithm)); }

ConvAlgorithm conv_algorithm() {
  int v = conv_algorithm_value().load();
  if (v < 0) {
    const std::string s = env::text_or_empty(env::conv_algorithm);
    LS_CHECK(s.empty() || s == "auto" || s == "winograd" || s == "direct",
             "LOCKSTEP_CONV_ALGORITHM must be auto, winograd or direct, got '", s, "'");
    v = int(s == "winograd" ? ConvAlgorithm::kWinograd
            : s == "direct" ? ConvAlgorithm::kDirect
                            : ConvAlgorithm::kAuto);
    conv_algorithm_value().store(v);
  }
  return ConvAlgorithm(v);
}

namespace {
std::atomic<int>& thread_replicas_value() {
  static std::atomic<int> value{-1};  // -1: LOCKSTEP_TRAIN_THREAD_REPLICAS not read yet
  return value;
}
}  // namespace

void set_thread_replicas(int replicas) {
  LS_CHECK(replicas >= 0 && replicas <= 1024,
           "set_thread_replicas: replicas must be 0 (auto), 1 (off) or 2..1024, got ", replicas);
  thread_replicas_value().store(replicas);
}

int thread_replicas() {
  int v = thread_replicas_value().load();
  if (v < 0) {
    const std::string s = env::text_or_empty(env::train_thread_replicas);
    char* end = nullptr;
    const long n = s.empty() ? 0 : std::strtol(s.c_str(), &end, 10);
    LS_CHECK(s.empty() || (*end == '\0' && n >= 0 && n <= 1024),
             "LOCKSTEP_TRAIN_THREAD_REPLICAS must be 0 (auto), 1 (off) or a replica count up to "
             "1024, got '",
             s, "'");
    v = int(n);
    thread_replicas_value().store(v);
  }
  return v;
}

}  // namespace lockstep::config
