// Op determinism (lockstep/core/config.h): (a) two runs give the same weights byte for byte;
// (b) random ops key their draws by the example's global row, so 2 replicas x B/2 match
// 1 replica x B within rounding (and far apart without the mode), and the draws themselves
// are identical bit for bit however the batch is split; (c) a run killed in the middle of an
// epoch and resumed by BackupAndRestore ends with the uninterrupted run's bytes, having
// trained on every batch exactly once. Plus the pipeline rules of the mode (ordered parallel
// maps, seeds required).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "lockstep/distribute/strategy.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/op_registry.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ds = lockstep::distribute;
using lockstep::test_util::error_of;
using lockstep::test_util::quadrant_images;

namespace {

class Determinism : public ::testing::Test {
 protected:
  void SetUp() override { config::enable_op_determinism(); }
  void TearDown() override { config::disable_op_determinism(); }
};

// Conv, dense, dropout and two augmentation layers: every random op of the train step.
Model small_cnn(uint64_t seed) {
  set_random_seed(seed);
  reset_layer_names();
  using namespace layers;
  Model m =
      Sequential({Input({8, 8, 2}), RandomFlip("horizontal", 3), RandomRotation(0.05),
                  Conv2D(4, 3, {.activation = "relu"}), MaxPooling2D({2, 2}), Flatten(),
                  Dropout(0.3, 5), Dense(16, {.activation = "relu"}), Dropout(0.2, 6), Dense(3)});
  m.compile({.optimizer = optimizers::Adam(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

// Every weight and optimizer variable, as raw bytes.
using Bytes = std::vector<unsigned char>;
std::vector<Bytes> state_bytes(Model& m) {
  std::vector<Bytes> bytes;
  for (const Tensor& w : m.get_weights()) {
    Tensor c = w.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.raw());
    bytes.emplace_back(p, p + c.nbytes());
  }
  for (auto& v : m.compile_config().optimizer->variables()) {
    Tensor c = v->value.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.raw());
    bytes.emplace_back(p, p + c.nbytes());
  }
  return bytes;
}

float max_diff(const Model& a, const Model& b) {
  return test_util::max_abs_diff(a.get_weights(), b.get_weights());
}

// A seeded pipeline with every kind of stage: shuffle, a parallel random map that asks for
// no ordering (the mode orders it anyway), batch and prefetch.
data::Dataset pipeline(const Tensor& x, const Tensor& y) {
  auto noise = [](data::Element e, const data::MapContext& ctx) {
    Philox rng = ctx.rng();
    Tensor img = e.tensor(0).contiguous().clone();
    for (int64_t i = 0; i < img.numel(); ++i) img.data<float>()[i] += 0.05f * rng.uniform();
    if (ctx.index % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return data::Element{img, e[1]};
  };
  return data::Dataset::from_tensor_slices({x, y})
      .shuffle(40, {.seed = 9})
      .map(noise, {.num_parallel_calls = 3, .deterministic = false, .seed = 21})
      .batch(16)
      .prefetch(2);
}

// Runs dropout (or a random flip) on x with the step's first global row `first_row`.
std::vector<Tensor> run_random_op(const std::string& op, const Tensor& x, int64_t first_row,
                                  const std::string& backend, uint32_t replica = 0) {
  Graph g;
  Value in = g.input({x.dtype(), x.shape()}, "x");
  const Attrs attrs = op == "dropout" ? Attrs{{"rate", 0.4}, {"seed", int64_t(7)}}
                                      : Attrs{{"mode", std::string("horizontal")}};
  std::vector<Value> outs = g.add_multi(OpId::named(op), {in}, attrs, op);
  Executable exe(g, {in}, outs, {.backend = backend, .seed = 11, .replica = replica});
  exe.input(0).copy_from(x);
  exe.set_step(5);
  exe.set_first_row(first_row);
  exe.run();
  return {exe.output(0).clone(), exe.output(1).clone()};
}

Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  const size_t row = t.nbytes() / size_t(t.dim(0));
  Shape s = t.shape();
  s[0] = end - begin;
  Tensor out = Tensor::empty(s, t.dtype());
  std::memcpy(out.raw(), static_cast<const char*>(t.contiguous().raw()) + size_t(begin) * row,
              out.nbytes());
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

// ---- (a) runs ---------------------------------------------------------------------------

TEST_F(Determinism, TwoRunsGiveTheSameBytes) {
  auto [x, y] = quadrant_images(72, 4);
  auto train = [&](uint64_t seed) {
    Model m = small_cnn(seed);
    m.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .seed = 8});  // shuffled arrays
    m.fit(pipeline(x, y), {.epochs = 2, .verbose = 0});
    return state_bytes(m);
  };
  const auto first = train(1), second = train(1);
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(first[i] == second[i]) << "variable " << i;
  // The comparison can fail: another model seed (initial weights and random ops) differs.
  EXPECT_NE(train(2), first);
}

TEST_F(Determinism, ParallelMapsKeepTheirOrder) {
  // Element 0 is the slowest: a map allowed to reorder emits it late.
  auto slow_first = [](data::Element e) {
    if (e.tensor(0).item() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return e;
  };
  auto ds =
      data::Dataset::range(12).map(slow_first, {.num_parallel_calls = 4, .deterministic = false});
  auto order = [&] {
    std::vector<float> v;
    for (auto& e : ds.collect()) v.push_back(e.tensor(0).item());
    return v;
  };
  std::vector<float> in_order(12);
  for (int i = 0; i < 12; ++i) in_order[size_t(i)] = float(i);
  // Without the mode this map usually emits element 0 late (not asserted: when the pool is
  // busy the consumer runs element 0's call itself, in order); with it, never.
  for (int pass = 0; pass < 3; ++pass) EXPECT_EQ(order(), in_order) << "pass " << pass;
}

TEST_F(Determinism, UnseededShufflesAreRefused) {
  auto msg = error_of([] { data::Dataset::range(10).shuffle(4); });
  EXPECT_NE(msg.find("shuffle (ShuffleOptions::seed): no seed given, and op determinism"),
            std::string::npos)
      << msg;
  EXPECT_EQ(error_of([] { data::Dataset::range(10).shuffle(4, {.seed = 1}); }), "");
  config::disable_op_determinism();
  EXPECT_EQ(error_of([] { data::Dataset::range(10).shuffle(4); }), "");
}

// ---- (b) the batch split ------------------------------------------------------------------

// An example's dropout mask and flip do not depend on the batch split: rows [2, 6) of a step
// over 6 rows equal a step over those 4 rows that starts at global row 2 (any replica id), on
// both backends. Without the row keying (first_row = -1) the draws follow the local row.
TEST_F(Determinism, RandomDrawsFollowTheGlobalRow) {
  Tensor x = Tensor::empty(Shape{6, 3, 5, 2});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 17) + 1.f;
  for (const std::string backend : {"cpu", "reference"}) {
    for (const std::string op : {"dropout", "image_random_flip"}) {
      SCOPED_TRACE(backend + " " + op);
      auto whole = run_random_op(op, x, 0, backend);
      auto part = run_random_op(op, rows(x, 2, 6), 2, backend, /*replica=*/1);
      for (int k = 0; k < 2; ++k) EXPECT_TRUE(same_bytes(rows(whole[size_t(k)], 2, 6), part[k]));
      auto unkeyed = run_random_op(op, rows(x, 2, 6), -1, backend);
      EXPECT_FALSE(same_bytes(rows(whole[1], 2, 6), unkeyed[1]));
    }
  }
  // The reference and cpu kernels draw the same masks.
  EXPECT_TRUE(same_bytes(run_random_op("dropout", x, 3, "cpu")[1],
                         run_random_op("dropout", x, 3, "reference")[1]));
}

// 1 replica x B against 2 replicas x B/2, with dropout and augmentation: the same draws, so the
// weights agree to float rounding of the batch sums (not byte for byte: see config.h); without
// the mode each replica draws its own masks and the runs drift far apart.
TEST_F(Determinism, TwoReplicasMatchOneReplicaToRounding) {
  auto [x, y] = quadrant_images(64, 5);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  auto train = [&](bool mirrored) {
    Model m = [&] {
      if (!mirrored) return small_cnn(3);
      auto scope = strategy.scope();
      return small_cnn(3);
    }();
    m.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .seed = 2});
    return m;
  };
  Model single = train(false), mirrored = train(true);
  const float keyed = max_diff(single, mirrored);
  EXPECT_LT(keyed, 2e-5f);
  config::disable_op_determinism();
  Model single_free = train(false), mirrored_free = train(true);
  const float free = max_diff(single_free, mirrored_free);
  EXPECT_GT(free, 1e-3f);
  std::printf(
      "[ determinism ] 1 x 16 vs 2 x 8, max weight difference: %.3g with the mode, %.3g "
      "without\n",
      double(keyed), double(free));
}

// ---- (c) kill and resume ------------------------------------------------------------------

namespace {
struct Killed {};

// Records the (epoch, batch) of every step a fit trains on.
struct StepLog : Callback {
  int epoch = 0;
  std::vector<std::pair<int, int>> steps;
  void on_epoch_begin(int e, const Logs&) override { epoch = e; }
  void on_train_batch_begin(int batch, const Logs&) override { steps.emplace_back(epoch, batch); }
};

// Throws out of fit at the end of its `after`-th step (a crash).
struct Killer : Callback {
  int after, seen = 0;
  explicit Killer(int after_steps) : after(after_steps) {}
  void on_train_batch_end(int, const Logs&) override {
    if (++seen == after) throw Killed{};
  }
};
}  // namespace

// 3 epochs of 5 batches from the Dataset pipeline, a backup every 2 steps, killed at the end
// of its 8th step (epoch 1, batch 2, counting from 0; the last backup was written after batch 1
// of epoch 1, 7 steps in): the resumed run restarts at (1, 2), trains on each remaining batch
// once, and ends with the uninterrupted run's bytes.
TEST_F(Determinism, KilledMidEpochAndResumedGivesTheSameBytes) {
  const std::string dir = test_util::temp_dir("determinism_backup", true).string();
  auto [x, y] = quadrant_images(80, 6);
  const FitConfig cfg{.epochs = 3, .verbose = 0};

  Model reference = small_cnn(4);
  auto all_steps = std::make_shared<StepLog>();
  FitConfig c0 = cfg;
  c0.callbacks = {all_steps};
  reference.fit(pipeline(x, y), c0);
  ASSERT_EQ(all_steps->steps.size(), 15u);

  Model killed = small_cnn(4);
  auto first_steps = std::make_shared<StepLog>();
  FitConfig c1 = cfg;
  c1.callbacks = {callbacks::BackupAndRestore(dir, int64_t(2)), first_steps,
                  std::make_shared<Killer>(8)};
  EXPECT_THROW(killed.fit(pipeline(x, y), c1), Killed);
  ASSERT_TRUE(std::filesystem::exists(dir + "/checkpoint.lsckpt"));

  Model resumed = small_cnn(4);
  auto resumed_steps = std::make_shared<StepLog>();
  FitConfig c2 = cfg;
  c2.callbacks = {callbacks::BackupAndRestore(dir, int64_t(2)), resumed_steps};
  resumed.fit(pipeline(x, y), c2);

  // Every batch once: the killed run's steps up to its last backup, then the resumed run's.
  std::vector<std::pair<int, int>> trained(first_steps->steps.begin(),
                                           first_steps->steps.begin() + 7);
  ASSERT_FALSE(resumed_steps->steps.empty());
  EXPECT_EQ(resumed_steps->steps.front(), std::make_pair(1, 2));
  trained.insert(trained.end(), resumed_steps->steps.begin(), resumed_steps->steps.end());
  EXPECT_EQ(trained, all_steps->steps);
  EXPECT_EQ(state_bytes(resumed), state_bytes(reference));
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoint.lsckpt"));
  std::filesystem::remove_all(dir);
}

// A resume under another model seed would draw other masks: refused, naming the seed to set.
TEST_F(Determinism, ResumeWithAnotherSeedIsRefused) {
  const std::string dir = test_util::temp_dir("determinism_seed", true).string();
  auto [x, y] = quadrant_images(32, 6);
  Model killed = small_cnn(4);
  FitConfig c1{.batch_size = 16, .epochs = 2, .verbose = 0};
  c1.callbacks = {callbacks::BackupAndRestore(dir, int64_t(1)), std::make_shared<Killer>(3)};
  EXPECT_THROW(killed.fit(x, y, c1), Killed);
  Model other = small_cnn(5);
  FitConfig c2{.batch_size = 16, .epochs = 2, .verbose = 0};
  c2.callbacks = {callbacks::BackupAndRestore(dir, int64_t(1))};
  auto msg = error_of([&] { other.fit(x, y, c2); });
  EXPECT_NE(msg.find("random seed 4 but this run's is 5; call set_random_seed(4)"),
            std::string::npos)
      << msg;
  std::filesystem::remove_all(dir);
}
