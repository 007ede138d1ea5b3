// Op determinism with gradient shards (lockstep/core/config.h, (b)): the global batch cut into
// S fixed shards whose gradients are summed in one fixed order makes 1 replica x B give the
// bytes of 2 mirrored replicas x B/2, with dropout and augmentation, tail batches, several
// steps per execution and BatchNormalization; replica counts the shards cannot follow are
// refused. (2 workers x B/2: MultiWorker.DeterministicShards* in
// tests/distribute/strategy_multiworker_test.cpp.)
#include <gtest/gtest.h>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ds = lockstep::distribute;
using lockstep::test_util::error_of;
using lockstep::test_util::quadrant_images;

namespace {

// One thread per shard everywhere: the single replica's programs and each mirrored replica's
// (bits are promised for a fixed thread count per shard only).
class DeterminismShards : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = num_threads();
    set_num_threads(1);
  }
  void TearDown() override {
    config::disable_op_determinism();
    set_num_threads(threads_);
  }
  int threads_ = 0;
};

// Conv, dense, dropout, two augmentation layers and (optionally) a BatchNormalization.
Model small_cnn(uint64_t seed, bool batch_norm = false, int steps_per_execution = 1,
                bool synchronized = false) {
  set_random_seed(seed);
  reset_layer_names();
  using namespace layers;
  Model m = batch_norm ? Sequential({Input({8, 8, 2}), RandomFlip("horizontal", 3),
                                     RandomRotation(0.05), Conv2D(4, 3, {.activation = "relu"}),
                                     BatchNormalization({.synchronized = synchronized}),
                                     MaxPooling2D({2, 2}), Flatten(), Dropout(0.3, 5),
                                     Dense(16, {.activation = "relu"}), Dropout(0.2, 6), Dense(3)})
                       : Sequential({Input({8, 8, 2}), RandomFlip("horizontal", 3),
                                     RandomRotation(0.05), Conv2D(4, 3, {.activation = "relu"}),
                                     MaxPooling2D({2, 2}), Flatten(), Dropout(0.3, 5),
                                     Dense(16, {.activation = "relu"}), Dropout(0.2, 6), Dense(3)});
  m.compile({.optimizer = optimizers::Adam(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"},
             .steps_per_execution = steps_per_execution});
  return m;
}

using Bytes = std::vector<unsigned char>;
// Every weight (BatchNormalization's statistics too) and optimizer variable, as raw bytes.
std::vector<Bytes> state_bytes(Model& m) {
  std::vector<Bytes> bytes;
  auto add = [&](const Tensor& t) {
    Tensor c = t.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.raw());
    bytes.emplace_back(p, p + c.nbytes());
  };
  for (const Tensor& w : m.get_weights()) add(w);
  for (auto& v : m.compile_config().optimizer->variables()) add(v->value);
  return bytes;
}

struct Trained {
  std::vector<Bytes> state;
  History history;
  std::vector<Tensor> weights;
};

struct Setup {
  int shards = 2;
  int replicas = 1;  // 1: no strategy; else MirroredStrategy with one thread per replica
  int samples = 70;  // 16-row batches and a 6-row tail (uneven shards)
  bool batch_norm = false;
  int steps_per_execution = 1;
};

Trained train(const Setup& s) {
  config::enable_op_determinism({.shards = s.shards});
  auto [x, y] = quadrant_images(s.samples, 5);
  Model m = [&] {
    if (s.replicas == 1) return small_cnn(3, s.batch_norm, s.steps_per_execution);
    std::vector<std::string> devices;
    for (int r = 0; r < s.replicas; ++r) devices.push_back("cpu:" + std::to_string(r));
    auto strategy = ds::MirroredStrategy(devices, {.threads_per_replica = 1});
    auto scope = strategy.scope();
    return small_cnn(3, s.batch_norm, s.steps_per_execution);
  }();
  History h = m.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .seed = 2});
  return {state_bytes(m), h, m.get_weights()};
}

void expect_same_bytes(const Trained& a, const Trained& b) {
  ASSERT_EQ(a.state.size(), b.state.size());
  for (size_t i = 0; i < a.state.size(); ++i)
    EXPECT_TRUE(a.state[i] == b.state[i]) << "variable " << i;
}

}  // namespace

TEST_F(DeterminismShards, OneReplicaMatchesTwoReplicasByteForByte) {
  const Trained one = train({.shards = 2, .replicas = 1});
  const Trained two = train({.shards = 2, .replicas = 2});
  expect_same_bytes(one, two);
  // The comparison can fail: without shards, 1 replica x B sums its gradient differently.
  const Trained unsharded = train({.shards = 0, .replicas = 1});
  EXPECT_NE(unsharded.state, one.state);
  // ... by float rounding only; loss and metrics are the unsharded ones to rounding.
  EXPECT_LT(test_util::max_abs_diff(unsharded.weights, one.weights), 2e-5f);
  for (const char* key : {"loss", "accuracy"}) {
    SCOPED_TRACE(key);
    const auto &a = one.history.history.at(key), &b = unsharded.history.history.at(key);
    ASSERT_EQ(a.size(), 2u);
    ASSERT_EQ(b.size(), 2u);
    for (size_t e = 0; e < a.size(); ++e) EXPECT_NEAR(a[e], b[e], 1e-5);
  }
  // The logged loss is a metric whose per-shard and per-replica accumulators are combined in
  // different orders (the promise is about the weights, compared byte for byte above): equal
  // to float rounding (an optimised build gives equal values; -O1 under ASan differs by 1 ulp).
  for (size_t e = 0; e < 2; ++e)
    EXPECT_NEAR(one.history.history.at("loss")[e], two.history.history.at("loss")[e], 1e-6);
  std::printf("[ determinism ] S=2, 1 x 16 vs unsharded 1 x 16: max weight difference %.3g\n",
              double(test_util::max_abs_diff(unsharded.weights, one.weights)));
}

TEST_F(DeterminismShards, FourShardsOnOneOrTwoReplicas) {
  const Trained one = train({.shards = 4, .replicas = 1});
  expect_same_bytes(one, train({.shards = 4, .replicas = 2}));
  // Another shard count is another sum.
  EXPECT_NE(one.state, train({.shards = 2, .replicas = 1}).state);
}

TEST_F(DeterminismShards, StepsPerExecutionKeepTheBytes) {
  const Trained one = train({.shards = 2, .replicas = 1});
  expect_same_bytes(one, train({.shards = 2, .replicas = 1, .steps_per_execution = 3}));
  expect_same_bytes(one, train({.shards = 2, .replicas = 2, .steps_per_execution = 3}));
}

// BatchNormalization normalises each shard with its own statistics, as each replica does under
// MirroredStrategy; the moving statistics are averaged over the shards after each epoch.
TEST_F(DeterminismShards, BatchNormStatisticsArePerShard) {
  const Trained one = train({.shards = 2, .replicas = 1, .batch_norm = true});
  expect_same_bytes(one, train({.shards = 2, .replicas = 2, .batch_norm = true}));
}

TEST_F(DeterminismShards, ShardCountsTheReplicasCannotFollowAreRefused) {
  auto msg = error_of([] { train({.shards = 3, .replicas = 2, .samples = 32}); });
  EXPECT_NE(msg.find("3 gradient shards (op determinism, lockstep/core/config.h) cannot be split "
                     "across 2 replicas in sync"),
            std::string::npos)
      << msg;
  msg = error_of([] { train({.shards = 8, .replicas = 4, .samples = 32}); });
  EXPECT_NE(msg.find("8 gradient shards with 4 replicas in sync: a replica can run several "
                     "shards only with 1 or 2 replicas"),
            std::string::npos)
      << msg;
  // As many shards as replicas is today's structure, for any count.
  EXPECT_EQ(error_of([] { train({.shards = 4, .replicas = 4, .samples = 32}); }), "");
  // Synchronized BatchNormalization needs every shard's statistics at once.
  msg = error_of([] {
    config::enable_op_determinism({.shards = 2});
    auto [x, y] = quadrant_images(32, 5);
    Model m = small_cnn(3, true, 1, /*synchronized=*/true);
    m.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0});
  });
  EXPECT_NE(msg.find("BatchNormalization(synchronized=true) cannot run with gradient shards"),
            std::string::npos)
      << msg;
  msg = error_of([] { config::enable_op_determinism({.shards = 5000}); });
  EXPECT_NE(msg.find("shards must be in 0..1024, got 5000"), std::string::npos) << msg;
}
