// MirroredStrategy / OneDeviceStrategy in one process: 1 replica x B vs 2 replicas x B/2 give
// the same weights and printed loss; errors for an indivisible batch; run/reduce; datasets;
// BackupAndRestore resumes to the same weights as an uninterrupted run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "lockstep/distribute/strategy.h"
#include "lockstep/io/checkpoint.h"
#include "lockstep/lockstep.h"
#include "lockstep/saving/checkpoint.h"
#include "test_util.h"

using namespace lockstep;
namespace ds = lockstep::distribute;

namespace {

Model cnn(uint64_t seed) {
  set_random_seed(seed);
  reset_layer_names();
  using namespace layers;
  return Sequential({Input({8, 8, 2}), Conv2D(4, 3, {.activation = "relu"}), MaxPooling2D({2, 2}),
                     Flatten(), Dense(16, {.activation = "relu"}), Dense(3)});
}

void compile(Model& m) {
  m.compile({.optimizer = optimizers::Adam(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
}

std::pair<Tensor, Tensor> make_data(int64_t n) {
  Tensor x = Tensor::empty(Shape{n, 8, 8, 2});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  Philox rng(11);
  for (int64_t i = 0; i < n; ++i) {
    int c = int(rng.next_u32() % 3);
    y.data<int32_t>()[i] = c;
    for (int k = 0; k < 128; ++k)
      x.data<float>()[i * 128 + k] = (k % 3 == c ? 0.7f : 0.f) + 0.3f * rng.uniform();
  }
  return {x, y};
}

float max_diff(const Model& a, const Model& b) {
  return test_util::max_abs_diff(a.get_weights(), b.get_weights());
}

using lockstep::test_util::error_of;

}  // namespace

TEST(StrategyMirrored, TwoReplicasMatchOneReplica) {
  auto [x, y] = make_data(72);  // batch 16: 4 full steps + a partial batch of 8 per epoch
  Model single = cnn(3);
  compile(single);
  auto h1 = single.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});

  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  EXPECT_EQ(strategy.num_replicas_in_sync(), 2);
  Model mirrored = [&] {
    auto scope = strategy.scope();
    Model m = cnn(3);
    compile(m);
    return m;
  }();
  auto h2 = mirrored.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
  EXPECT_EQ(h2.replicas, 2);
  EXPECT_LT(max_diff(single, mirrored), 2e-5f);
  // Loss and metrics are reduced as sum(total) / sum(count): same as the single replica's.
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(h1.history["loss"][e], h2.history["loss"][e], 1e-5);
    EXPECT_NEAR(h1.history["accuracy"][e], h2.history["accuracy"][e], 1e-6);
  }
  // Evaluate splits too, with the same result.
  EXPECT_NEAR(single.evaluate(x, y, {.verbose = 0})["loss"],
              mirrored.evaluate(x, y, {.verbose = 0})["loss"], 1e-5);
}

// BatchNormalization(synchronized=true): 2 replicas x B/2 normalise with the global batch's
// statistics, so they match 1 replica x B (weights, moving statistics, loss); unsynchronized
// BN (per-replica statistics) does not, which shows the comparison can fail. (No conv bias
// before BN, as usual: its gradient is pure rounding noise, which Adam would amplify.)
TEST(StrategyMirrored, SynchronizedBatchNormMatchesOneReplica) {
  auto make = [](bool sync) {
    set_random_seed(8);
    reset_layer_names();
    using namespace layers;
    Model m = Sequential({Input({8, 8, 2}), Conv2D(4, 3, {.use_bias = false}),
                          BatchNormalization({.synchronized = sync}), Activation("relu"),
                          MaxPooling2D({2, 2}), Flatten(), Dense(3)});
    compile(m);
    return m;
  };
  auto [x, y] = make_data(72);  // batch 16: 4 full steps + a partial batch of 8 (4 + 4)
  Model single = make(true);    // no strategy: plain batch statistics
  auto h1 = single.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  auto train = [&](bool sync) {
    auto scope = strategy.scope();
    Model m = make(sync);
    auto h = m.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
    return std::make_pair(std::move(m), std::move(h));
  };
  auto [synced, h2] = train(true);
  EXPECT_LT(max_diff(single, synced), 5e-5f);
  for (size_t e = 0; e < 2; ++e) EXPECT_NEAR(h1.history["loss"][e], h2.history["loss"][e], 1e-5);
  auto [unsynced, h3] = train(false);
  EXPECT_GT(max_diff(single, unsynced), 1e-3f);
  // Inference uses the (global) moving statistics: same predictions.
  EXPECT_NEAR(single.evaluate(x, y, {.verbose = 0})["loss"],
              synced.evaluate(x, y, {.verbose = 0})["loss"], 1e-4);
}

// predict splits each batch across the local replicas (uneven parts included) and puts the
// rows back in order: the same predictions as the plain model, from arrays and from a Dataset.
TEST(StrategyMirrored, PredictSplitsBatchesAcrossReplicas) {
  auto [x, y] = make_data(23);
  Model single = cnn(6);
  compile(single);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model mirrored = [&] {
    auto scope = strategy.scope();
    Model m = cnn(6);
    compile(m);
    return m;
  }();
  mirrored.set_weights(single.get_weights());
  auto close = [](const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    auto va = a.to_vector(), vb = b.to_vector();
    float d = 0;
    for (size_t i = 0; i < va.size(); ++i) d = std::max(d, std::fabs(va[i] - vb[i]));
    EXPECT_LT(d, 1e-5f);
  };
  Tensor ref = single.predict(x, 7);  // batches of 7, 7, 7, 2: parts of 4+3 and 1+1 rows
  close(mirrored.predict(x, 7), ref);
  close(mirrored.predict(data::Dataset::from_tensor_slices(x).batch(7)), ref);
  close(mirrored.predict(x, 1), ref);  // one row per batch: replica 0 alone
}

// A NaN input in replica 1's half of a batch: the count of bad replicas rides on the gradient
// all-reduce, so fit stops on that very step (replica 0's own loss is finite) and says so.
TEST(StrategyMirrored, NanOnOneReplicaStopsEveryReplicaOnThatStep) {
  auto [x, y] = make_data(64);
  x.data<float>()[(16 + 12) * 128 + 5] = std::nanf("");  // batch 2 (rows 16..31), replica 1
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model m = [&] {  // linear: a ReLU would turn the NaN pixel into 0
    auto scope = strategy.scope();
    set_random_seed(9);
    Model model = Sequential({layers::Input({8, 8, 2}), layers::Flatten(), layers::Dense(3)});
    compile(model);
    return model;
  }();
  auto h = m.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
  EXPECT_TRUE(h.stopped_on_nan);
  EXPECT_NE(h.stop_reason.find("at epoch 1, step 2 on 1 of 2 replicas"), std::string::npos)
      << h.stop_reason;
  EXPECT_EQ(h.samples, 32);  // two steps ran, then it stopped
}

TEST(StrategyMirrored, OneDeviceIsThePlainStep) {
  auto [x, y] = make_data(32);
  Model a = cnn(4);
  compile(a);
  a.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  auto one = ds::OneDeviceStrategy("cpu:0");
  Model b = cnn(4);
  {
    auto scope = one.scope();
    compile(b);
  }
  b.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_EQ(max_diff(a, b), 0.f);
}

TEST(StrategyMirrored, BucketsOverlapAndMatchOnePack) {
  auto [x, y] = make_data(32);
  auto one_pack = ds::MirroredStrategy({"cpu:0", "cpu:1"}, {.bytes_per_pack = 0});
  auto small = ds::MirroredStrategy({"cpu:0", "cpu:1"}, {.bytes_per_pack = 256});
  Model a = cnn(5), b = cnn(5);
  {
    auto s = one_pack.scope();
    compile(a);
  }
  {
    auto s = small.scope();
    compile(b);
  }
  a.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  auto h = b.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_EQ(max_diff(a, b), 0.f);  // bucketing changes when, not what, is summed
  EXPECT_GT(h.allreduce_seconds, 0.0);
}

TEST(StrategyMirrored, IndivisibleBatchIsAClearError) {
  auto [x, y] = make_data(30);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  auto scope = strategy.scope();
  Model m = cnn(1);
  compile(m);
  std::string msg = error_of([&] { m.fit(x, y, {.batch_size = 15, .verbose = 0}); });
  EXPECT_NE(msg.find("divisible by the 2 replicas"), std::string::npos) << msg;
  auto dataset = data::Dataset::from_tensor_slices(std::vector<data::Component>{x, y}).batch(15);
  msg = error_of([&] { strategy.distribute_dataset(dataset); });
  EXPECT_NE(msg.find("not divisible"), std::string::npos) << msg;
  ds::InputContext ctx{1, 0, 2};
  EXPECT_EQ(ctx.get_per_replica_batch_size(64), 32);
  EXPECT_THROW(ctx.get_per_replica_batch_size(15), Error);
}

TEST(StrategyMirrored, DistributedDatasetMatchesArrays) {
  auto [x, y] = make_data(64);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model a = cnn(6), b = cnn(6);
  {
    auto s = strategy.scope();
    compile(a);
    compile(b);
  }
  a.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
  auto dist = strategy.distribute_dataset(
      data::Dataset::from_tensor_slices(std::vector<data::Component>{x, y}).batch(16));
  b.fit(dist, {.epochs = 1, .verbose = 0});
  EXPECT_EQ(max_diff(a, b), 0.f);
  auto from_fn = strategy.distribute_datasets_from_function([&](const ds::InputContext& ctx) {
    EXPECT_EQ(ctx.num_input_pipelines, 1);
    return data::Dataset::from_tensor_slices(std::vector<data::Component>{x, y})
        .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        .batch(ctx.get_per_replica_batch_size(16));
  });
  Model c = cnn(6);
  {
    auto s = strategy.scope();
    compile(c);
  }
  c.fit(from_fn, {.epochs = 1, .verbose = 0});
  EXPECT_EQ(max_diff(a, c), 0.f);
}

TEST(StrategyMirrored, RunAndReduce) {
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  auto per = strategy.run([](const ds::ReplicaContext& ctx) {
    Tensor t = Tensor::full(Shape{3}, float(ctx.replica_id_in_sync_group + 1));
    Tensor s = t.clone();
    ctx.all_reduce_sum(s);
    EXPECT_EQ(s.to_vector(), std::vector<float>({3, 3, 3}));
    return t;
  });
  ASSERT_EQ(per.size(), 2u);
  EXPECT_EQ(strategy.reduce(ds::ReduceOp::SUM, per).to_vector(), std::vector<float>({3, 3, 3}));
  EXPECT_EQ(strategy.reduce(ds::ReduceOp::MEAN, per).to_vector(),
            std::vector<float>({1.5, 1.5, 1.5}));
}

TEST(StrategyMirrored, CheckpointsAreStrategyAgnostic) {
  auto dir =
      std::filesystem::temp_directory_path() / ("lockstep_agnostic_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto [x, y] = make_data(32);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model m = cnn(8);
  {
    auto s = strategy.scope();
    compile(m);
  }
  m.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});
  train::Checkpoint(m).save((dir / "c.lsckpt").string());
  Model single = cnn(9);
  compile(single);
  train::Checkpoint(single).restore((dir / "c.lsckpt").string());
  EXPECT_EQ(max_diff(m, single), 0.f);
  // And back into a replicated model, which then trains from it.
  Model again = cnn(10);
  {
    auto s = strategy.scope();
    compile(again);
  }
  train::Checkpoint(again).restore((dir / "c.lsckpt").string());
  EXPECT_EQ(max_diff(again, single), 0.f);
  std::filesystem::remove_all(dir);
}

namespace {
struct Interrupt {};
}  // namespace

TEST(StrategyMirrored, BackupAndRestoreResumesToTheSameWeights) {
  auto dir =
      (std::filesystem::temp_directory_path() / ("lockstep_backup_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  auto [x, y] = make_data(80);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  auto make = [&] {
    auto s = strategy.scope();
    Model m = cnn(12);
    compile(m);
    return m;
  };
  FitConfig cfg{.batch_size = 16, .epochs = 3, .verbose = 0, .seed = 4};  // shuffled
  Model ref = make();
  ref.fit(x, y, cfg);

  // Interrupted in epoch 2 after 3 steps (a crash: an exception out of fit).
  Model first = make();
  int steps = 0;
  FitConfig c1 = cfg;
  c1.callbacks = {callbacks::BackupAndRestore(dir, int64_t(1)),
                  callbacks::LambdaCallback({}, [&](int, const Logs&) {
                    if (++steps == 5 + 3) throw Interrupt{};
                  })};
  EXPECT_THROW(first.fit(x, y, c1), Interrupt);
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoint.lsckpt"));

  Model resumed = make();
  FitConfig c2 = cfg;
  c2.callbacks = {callbacks::BackupAndRestore(dir, int64_t(1))};
  auto h = resumed.fit(x, y, c2);
  EXPECT_EQ(h.epoch.front(), 1);  // resumed inside epoch 2
  EXPECT_EQ(max_diff(ref, resumed), 0.f);
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoint.lsckpt"));  // deleted at the end
  std::filesystem::remove_all(dir);
}
