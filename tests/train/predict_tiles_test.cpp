// Predict in row tiles (src/trainers/predict_tiles.h): the row-independence analysis accepts the
// graphs of Keras layers in inference mode and refuses each way of mixing rows; a tiled predict
// program (tiles plus a tail of another size) gives the untiled program's predictions, with
// one step per execution and with staged steps, in float32 and mixed_bfloat16, and allocates
// nothing per step; a model whose layer mixes rows is not tiled. Thread tiles (one tile per
// OpenMP thread, at once, each through its own single-threaded program) give the untiled
// predictions too, on the test CNN and on EfficientNetB0, and apply only where they should.
#include "trainers/predict_tiles.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>

#include "lockstep/core/allocator.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"
#include "trainers/program.h"

using namespace lockstep;
using I = std::vector<int64_t>;

namespace {

// LOCKSTEP_PREDICT_TILE for one scope.
struct TileEnv {
  explicit TileEnv(const char* rows) { setenv("LOCKSTEP_PREDICT_TILE", rows, 1); }
  ~TileEnv() { unsetenv("LOCKSTEP_PREDICT_TILE"); }
};

// LOCKSTEP_PREDICT_THREAD_TILES=0 for one scope.
struct NoThreadTiles {
  NoThreadTiles() { setenv("LOCKSTEP_PREDICT_THREAD_TILES", "0", 1); }
  ~NoThreadTiles() { unsetenv("LOCKSTEP_PREDICT_THREAD_TILES"); }
};

// OpenMP threads for one scope.
struct OmpThreads {
  int saved = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

VariablePtr var(Shape s) {
  return std::make_shared<Variable>(Variable{"w", Tensor::zeros(s), true});
}

// x [B, 4, 6] -> relu -> reduce_sum over axis 2 -> [B, 4] -> then `tail` adds ops; the
// graph's output is what `tail` returns.
struct Probe {
  Graph g;
  Value x, h;
  static constexpr int64_t B = 5;
  Probe() {
    x = g.input({DType::f32, Shape{B, 4, 6}}, "x");
    h = g.add(op::reduce_sum, {g.add(op::relu, {x})}, Attrs{{"axes", I{2}}, {"keepdims", false}});
  }
  bool independent(Value out, std::string* why = nullptr, int64_t* widest = nullptr) {
    return rows_independent(g, {x}, {out}, B, why, widest);
  }
};

TEST(RowsIndependent, KerasStyleInferenceGraph) {
  Probe p;
  Value d = p.g.add(op::matmul, {p.h, p.g.variable(var({4, 3}))});
  Value b = p.g.add(op::bias_add, {d, p.g.variable(var({3}))});
  Value y = p.g.add(op::softmax, {b}, Attrs{{"axis", int64_t(-1)}});
  Value flat = p.g.add(op::reshape, {p.x}, Attrs{{"shape", I{-1, 24}}});
  Value both = p.g.add(
      op::concat, {y, p.g.add(op::slice, {flat}, Attrs{{"begin", I{0, 0}}, {"size", I{-1, 3}}})},
      Attrs{{"axis", int64_t(1)}});
  std::string why;
  int64_t widest = 0;
  EXPECT_TRUE(p.independent(both, &why, &widest)) << why;
  EXPECT_EQ(widest, 4 * 6 * 4);  // x and relu(x): 24 floats per row
}

TEST(RowsIndependent, RefusesEveryWayOfMixingRows) {
  auto refused = [](const char* what, const std::function<Value(Probe&)>& make,
                    const std::string& op) {
    Probe p;
    Value out = make(p);
    std::string why;
    EXPECT_FALSE(p.independent(out, &why)) << what;
    EXPECT_NE(why.find(op), std::string::npos) << what << ": " << why;
  };
  refused(
      "a sum over the batch",
      [](Probe& p) {
        return p.g.add(op::reduce_sum, {p.h}, Attrs{{"axes", I{0}}, {"keepdims", true}});
      },
      "reduce_sum");
  refused(
      "a sum over the batch whose result happens to have the batch's size",
      [](Probe& p) {
        Value square = p.g.add(op::matmul, {p.h, p.g.variable(var({4, Probe::B}))});  // [B, B]
        return p.g.add(op::reduce_sum, {square}, Attrs{{"axes", I{0}}, {"keepdims", false}});
      },
      "reduce_sum");
  refused(
      "a softmax across the batch",
      [](Probe& p) {
        return p.g.add(op::softmax, {p.h}, Attrs{{"axis", int64_t(0)}});
      },
      "softmax");
  refused(
      "rows stacked",
      [](Probe& p) {
        return p.g.add(op::concat, {p.h, p.h}, Attrs{{"axis", int64_t(0)}});
      },
      "concat");
  refused(
      "a constant with one value per row",
      [](Probe& p) {
        return p.g.add(op::add, {p.h, p.g.variable(var({Probe::B, 4}))});
      },
      "add");
  refused(
      "the batch as the contraction",
      [](Probe& p) {
        return p.g.add(op::matmul, {p.g.variable(var({3, Probe::B})), p.h});
      },
      "matmul");
  refused(
      "a random op",
      [](Probe& p) {
        return p.g.add(op::dropout, {p.h}, Attrs{{"rate", 0.5}});
      },
      "dropout");
  refused(
      "a reshape across rows",
      [](Probe& p) {
        return p.g.add(op::reshape, {p.h}, Attrs{{"shape", I{4, -1}}});
      },
      "reshape");
  refused(
      "an output that reads no input",
      [](Probe& p) {
        return p.g.variable(var({Probe::B, 2}));
      },
      "variable");
}

TEST(PredictTileRows, SizeAndOverride) {
  EXPECT_EQ(predict_tile_rows(1000, 147456), 24);  // 4 MiB of the widest activation, to 8 rows
  EXPECT_EQ(predict_tile_rows(1000, 1 << 22), 8);  // at least 8
  EXPECT_EQ(predict_tile_rows(40, 147456), 0);     // under two tiles: not worth it
  // Rows wider than 256 KiB (MobileNetV2 at 96 px: 884,736 bytes): tiles of under 16 rows only
  // for a batch of at least kMinTilesWide of them.
  EXPECT_EQ(predict_tile_rows(32, 884736), 0);
  EXPECT_EQ(predict_tile_rows(63, 884736), 0);
  EXPECT_EQ(predict_tile_rows(64, 884736), 8);
  EXPECT_EQ(predict_tile_rows(1000, 1 << 22), 8);
  // Tiles of fewer than 16 rows likewise (MobileNetV2 in bfloat16: 442,368 bytes, 9 -> 8 rows).
  EXPECT_EQ(predict_tile_rows(32, 442368), 0);
  EXPECT_EQ(predict_tile_rows(64, 442368), 8);
  EXPECT_EQ(predict_tile_rows(32, 262144), 16);  // 16 rows: two tiles are enough
  TileEnv env("0");
  EXPECT_EQ(predict_tile_rows(1000, 147456), 0);
}

Model cnn() {
  using namespace layers;
  set_random_seed(3);
  reset_layer_names();
  return Sequential({Input({12, 12, 3}), Conv2D(16, 3, {.activation = "relu"}),
                     BatchNormalization(), MaxPooling2D({2, 2}), Conv2D(32, 3, {.padding = "same"}),
                     GlobalAveragePooling2D(), Dense(10, {.activation = "softmax"})});
}

Tensor random_images(int64_t n) {
  Tensor x = Tensor::empty({n, 12, 12, 3});
  Philox rng(4);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(-1.f, 1.f);
  return x;
}

// Model::predict at `batch` gives `want`, with one step and with 3 staged steps per execution,
// and a step of the tiled program allocates nothing.
void expect_predict_and_no_allocation(Model& m, const Tensor& x, int64_t batch, const Tensor& want,
                                      Program& tiled, float tol) {
  EXPECT_LE(test_util::max_abs_diff(m.predict(x, batch), want), tol);
  m.compile({.loss = losses::SparseCategoricalCrossentropy(), .steps_per_execution = 3});
  EXPECT_LE(test_util::max_abs_diff(m.predict(x, batch), want), tol);
  tiled.run();
  const size_t before = allocation_count();
  tiled.run();
  EXPECT_EQ(allocation_count(), before);
}

// Predictions of an untiled and a tiled program (16-row tiles and a 4-row tail) of one model.
void expect_tiled_matches(Model& m, float tol) {
  const Tensor x = random_images(100);
  Program plain = [&] {
    TileEnv env("0");
    return Program(m, Program::Kind::predict, 100, metrics::Mean("loss"), {});
  }();
  TileEnv env("16");
  Program tiled(m, Program::Kind::predict, 100, metrics::Mean("loss"), {});
  EXPECT_EQ(plain.tile_rows(), 0);
  ASSERT_EQ(tiled.tile_rows(), 16);
  plain.x().copy_from(x), tiled.x().copy_from(x);
  plain.run(), tiled.run();
  EXPECT_EQ(tiled.predictions().shape(), (Shape{100, 10}));
  EXPECT_LE(test_util::max_abs_diff(plain.predictions(), tiled.predictions()), tol);
  // The same again through Model::predict, one step per execution and 3 staged steps.
  const Tensor want = [&] {
    TileEnv none("0");
    return m.predict(x, 50);
  }();
  expect_predict_and_no_allocation(m, x, 50, want, tiled, tol);
}

TEST(PredictTiles, TiledProgramMatchesUntiled) {
  Model m = cnn();
  expect_tiled_matches(m, 1e-6f);
}

TEST(PredictTiles, MixedBfloat16) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  Model m = cnn();
  mixed_precision::set_global_policy("float32");
  expect_tiled_matches(m, 1e-6f);
}

// Under MirroredStrategy each replica's share of a batch runs in tiles of its own (2 replicas x
// 50 rows: 16-row tiles and a 2-row tail each): the predictions of the model without a
// strategy.
TEST(PredictTiles, MirroredReplicasTileTheirShares) {
  const Tensor x = random_images(100);
  Model plain = cnn();
  const Tensor want = [&] {
    TileEnv none("0");
    return plain.predict(x, 100);
  }();
  auto strategy = distribute::MirroredStrategy({"cpu:0", "cpu:1"});
  Model m = [&] {
    auto scope = strategy.scope();
    return cnn();
  }();
  m.set_weights(plain.get_weights());
  TileEnv env("16");
  EXPECT_LE(test_util::max_abs_diff(m.predict(x, 100), want), 1e-6f);
}

// A user layer that centres each feature over the batch: rows depend on each other.
class BatchCentre : public Layer {
 public:
  using Layer::Layer;
  std::string class_name() const override { return "BatchCentre"; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value mean = ctx.graph.add(op::reduce_mean, {in[0]}, Attrs{{"axes", I{0}}, {"keepdims", true}});
    return {ctx.graph.add(op::sub, {in[0], mean})};
  }
};

TEST(PredictTiles, LayerMixingRowsIsNotTiled) {
  using namespace layers;
  reset_layer_names();
  KTensor in = Input({12, 12, 3});
  KTensor h = GlobalAveragePooling2D()(Conv2D(8, 3)(in));
  KTensor out = Dense(10)(LayerHandle(std::make_shared<BatchCentre>("centre"))(h));
  Model m(in, out);
  TileEnv env("16");
  Program p(m, Program::Kind::predict, 100, metrics::Mean("loss"), {});
  EXPECT_EQ(p.tile_rows(), 0);
  // Predictions centred over the whole batch: the mean over rows of every output is ~0.
  const Tensor y = m.predict(random_images(100), 100);
  for (int64_t j = 0; j < 10; ++j) {
    double s = 0;
    for (int64_t r = 0; r < 100; ++r) s += y.data<float>()[r * 10 + j];
    EXPECT_NEAR(s / 100, m.get_layer("dense")->weights()[1]->value.data<float>()[j], 1e-5);
  }
}

// Thread tiles: with 2 OpenMP threads a predict batch of 100 runs as two 50-row tiles at once,
// each through its own program compiled for one thread, and gives the predictions of the
// ordinary program (kernels split over both threads), in float32 and mixed_bfloat16, through
// Program and Model::predict (one step and 3 staged steps per execution), allocating nothing per
// step.
void expect_thread_tiles_match(Model& m, const Tensor& x, float tol) {
  OmpThreads two(2);
  const int64_t n = x.shape()[0];
  Program plain = [&] {
    NoThreadTiles off;
    return Program(m, Program::Kind::predict, n, metrics::Mean("loss"), {});
  }();
  Program tiled(m, Program::Kind::predict, n, metrics::Mean("loss"), {});
  EXPECT_EQ(plain.tile_threads(), 1);
  ASSERT_EQ(tiled.tile_threads(), 2);
  EXPECT_EQ(tiled.tile_rows(), n / 2);
  plain.x().copy_from(x), tiled.x().copy_from(x);
  plain.run(), tiled.run();
  EXPECT_EQ(tiled.predictions().shape(), plain.predictions().shape());
  EXPECT_LE(test_util::max_abs_diff(plain.predictions(), tiled.predictions()), tol);
  expect_predict_and_no_allocation(m, x, n, plain.predictions().clone(), tiled, tol);
}

TEST(PredictThreadTiles, MatchTheUntiledProgram) {
  Model m = cnn();
  expect_thread_tiles_match(m, random_images(100), 1e-6f);
}

TEST(PredictThreadTiles, MixedBfloat16) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  Model m = cnn();
  mixed_precision::set_global_policy("float32");
  expect_thread_tiles_match(m, random_images(100), 1e-6f);
}

// EfficientNetB0 (Rescaling + Normalization, swish convolutions, squeeze-and-excitation,
// residual adds) at 32x32: 8 images as two 4-row tiles.
TEST(PredictThreadTiles, EfficientNetB0) {
  Model m = applications::EfficientNetB0({.input_shape = {32, 32, 3}, .classes = 10});
  Tensor x = Tensor::empty({8, 32, 32, 3});
  Philox rng(9);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(0.f, 255.f);
  expect_thread_tiles_match(m, x, 1e-5f);
}

// Where they do not apply: one thread; a batch the threads do not divide, or tiles under
// kMinThreadTileRows rows; LOCKSTEP_PREDICT_TILE set (the user's tiling, or none); a model
// whose rows mix; and a training program.
TEST(PredictThreadTiles, OnlyWhereTheyApply) {
  Model m = cnn();
  auto threads_of = [&](int64_t batch, Program::Kind kind = Program::Kind::predict) {
    return Program(m, kind, batch, metrics::Mean("loss"), {}).tile_threads();
  };
  {
    OmpThreads one(1);
    EXPECT_EQ(threads_of(100), 1);
  }
  OmpThreads two(2);
  EXPECT_EQ(predict_thread_tiles(8), 2);
  EXPECT_EQ(threads_of(8), 2);
  EXPECT_EQ(threads_of(99), 1);
  EXPECT_EQ(threads_of(6), 1);  // 3 rows a tile
  {
    TileEnv none("0");
    EXPECT_EQ(threads_of(100), 1);
  }
  m.compile({.optimizer = optimizers::SGD(), .loss = losses::SparseCategoricalCrossentropy()});
  EXPECT_EQ(threads_of(100, Program::Kind::train), 1);
  using namespace layers;
  reset_layer_names();
  KTensor in = Input({12, 12, 3});
  KTensor h = GlobalAveragePooling2D()(Conv2D(8, 3)(in));
  Model mixing(in, Dense(10)(LayerHandle(std::make_shared<BatchCentre>("centre"))(h)));
  EXPECT_EQ(Program(mixing, Program::Kind::predict, 100, metrics::Mean("loss"), {}).tile_threads(),
            1);
}

}  // namespace