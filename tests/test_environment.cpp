// Every test starts from the process's initial model-building state, also when many run in one
// process: the ASan tree runs each gtest shard as one process (tests/run_gtest_shard.sh), while
// the release tree runs most tests one per process. Layer names seed the weight initialisers
// (unique_layer_name counts per process), so without this a test's weights would depend on
// which tests ran before it in its shard.
#include <gtest/gtest.h>

#include "lockstep/distribute/distribution.h"
#include "lockstep/nn/layer.h"
#include "lockstep/nn/mixed_precision.h"

namespace {

// layer.cpp's g_seed is constant-initialised, so this reads its initial value.
const uint64_t initial_seed = lockstep::random_seed();

class ResetGlobalState : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo&) override {
    lockstep::set_random_seed(initial_seed);
    lockstep::reset_layer_names();
    lockstep::mixed_precision::set_global_policy("float32");
    lockstep::distribution::clear_distribution();
  }
};

// Registered before gtest_main's RUN_ALL_TESTS: static initialisation runs first.
const bool registered = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new ResetGlobalState);
  return true;
}();

}  // namespace
