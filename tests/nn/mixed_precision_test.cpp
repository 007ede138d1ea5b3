// Mixed precision (mixed_bfloat16): policies and their config round trip, the graph a mixed
// model builds (bf16 compute, f32 variables, softmax and loss), half the activation memory,
// compiled vs eager and cpu vs reference under the policy, and training that tracks float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "lockstep/graph/autodiff.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using lockstep::test_util::error_of;

namespace {

// Sets the global policy for a scope (layers read it when they are created).
struct PolicyScope {
  explicit PolicyScope(const char* name) { mixed_precision::set_global_policy(name); }
  ~PolicyScope() { mixed_precision::set_global_policy("float32"); }
};

Model small_cnn(bool dropout = true) {
  using namespace layers;
  std::vector<SequentialItem> items = {Input({8, 8, 2}), Conv2D(8, 3, {.activation = "relu"}),
                                       MaxPooling2D({2, 2}), BatchNormalization(), Flatten()};
  if (dropout) items.push_back(Dropout(0.2));
  items.push_back(Dense(16, {.activation = "relu"}));
  items.push_back(Dense(3));
  return Sequential(items);
}

std::pair<Tensor, Tensor> synthetic(int64_t n, uint64_t seed) {
  return test_util::quadrant_images(n, seed);
}

void compile(Model& m, bool eager = false, const std::string& backend = "cpu") {
  m.compile({.optimizer = optimizers::Adam(1e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .run_eagerly = eager,
             .backend = backend});
}

std::vector<double> step_losses(Model& m, const Tensor& x, const Tensor& y, int steps, int batch) {
  std::vector<double> losses;
  auto cb =
      callbacks::LambdaCallback({}, [&](int, const Logs& l) { losses.push_back(l.at("loss")); });
  m.fit(x.slice(0, int64_t(steps) * batch), y.slice(0, int64_t(steps) * batch),
        {.batch_size = batch, .epochs = 1, .verbose = 0, .callbacks = {cb}, .shuffle = false});
  return losses;
}

// The n-th layer of class `cls` (layer names are unique per process, so tests look by class).
LayerPtr layer_of(const Network& m, const std::string& cls, int n = 0) {
  for (auto& l : m.layers())
    if (l->class_name() == cls && n-- == 0) return l;
  throw Error("no " + cls);
}

}  // namespace

TEST(MixedPrecision, PolicyNames) {
  EXPECT_EQ(mixed_precision::make_policy("float32").compute, DType::f32);
  auto p = mixed_precision::make_policy("mixed_bfloat16");
  EXPECT_EQ(p.compute, DType::bf16);
  EXPECT_EQ(p.variable, DType::f32);
  EXPECT_TRUE(p.mixed());
  EXPECT_NE(error_of([] { mixed_precision::make_policy("mixed_bf16"); }).find("mixed_bfloat16"),
            std::string::npos);
  // f16: refused with the reason (no f16 arithmetic on this CPU, or not implemented).
  EXPECT_NE(error_of([] { mixed_precision::make_policy("mixed_float16"); }).find("mixed_float16"),
            std::string::npos);
  EXPECT_EQ(mixed_precision::global_policy().name, "float32");
}

TEST(MixedPrecision, LayersTakeTheGlobalPolicyAndKeepItInTheirConfig) {
  PolicyScope mixed("mixed_bfloat16");
  Model m = small_cnn();
  auto d = layer_of(m, "Dense");
  EXPECT_EQ(d->dtype_policy().name, "mixed_bfloat16");
  EXPECT_EQ(d->compute_dtype(), DType::bf16);
  json c = d->config();
  EXPECT_EQ(c["dtype"]["class_name"], "DTypePolicy");
  EXPECT_EQ(c["dtype"]["config"]["name"], "mixed_bfloat16");
  // The file's policy wins over the global one when a model is rebuilt.
  mixed_precision::set_global_policy("float32");
  Model back = model_from_json(m.to_json());
  EXPECT_EQ(layer_of(back, "Dense")->dtype_policy().name, "mixed_bfloat16");
  EXPECT_EQ(layer_of(back, "Conv2D")->compute_dtype(), DType::bf16);
  // ... and a float32 layer stays float32 under a mixed global policy.
  Model f32 = small_cnn();
  mixed_precision::set_global_policy("mixed_bfloat16");
  Model back32 = model_from_json(f32.to_json());
  EXPECT_EQ(layer_of(back32, "Dense")->compute_dtype(), DType::f32);
  // A per-layer override.
  Model m2 = small_cnn();
  layer_of(m2, "Dense", 1)->set_dtype_policy("float32");
  EXPECT_EQ(layer_of(m2, "Dense", 1)->config()["dtype"], "float32");
}

TEST(MixedPrecision, GraphComputesInBf16WithF32VariablesSoftmaxAndLoss) {
  PolicyScope mixed("mixed_bfloat16");
  using namespace layers;
  Model m = Sequential({Input({8, 8, 2}), Conv2D(4, 3, {.activation = "relu"}), Flatten(),
                        Dense(3, {.activation = "softmax"})});
  Graph g;
  Value x = g.input({DType::f32, Shape{2, 8, 8, 2}}, "x");
  CallContext ctx{g, true, 1};
  Value y = m.call(ctx, {x})[0];
  EXPECT_EQ(g.type(y).dtype, DType::f32);  // softmax in f32
  int bf16_convs = 0, f32_softmax = 0;
  for (const Node& n : g.nodes()) {
    if (n.op == op::conv2d || n.op == op::matmul) bf16_convs += n.outputs[0].dtype == DType::bf16;
    if (n.op == op::softmax) f32_softmax += g.type(n.inputs[0]).dtype == DType::f32;
    if (n.op == op::variable) EXPECT_EQ(n.outputs[0].dtype, DType::f32) << n.name;
  }
  EXPECT_EQ(bf16_convs, 2);
  EXPECT_EQ(f32_softmax, 1);
  // Gradients of the f32 variables come back in f32 (through the casts' gradients).
  Value loss = g.add(op::reduce_sum, {y}, Attrs{{"axes", std::vector<int64_t>{0, 1}}});
  std::vector<Value> reads;
  for (auto& v : m.trainable_weights()) reads.push_back(g.variable(v));
  for (Value gr : gradients(g, loss, reads)) EXPECT_EQ(g.type(gr).dtype, DType::f32);
  // An op without a bf16 form says what to do.
  Graph h;
  Value b = h.add(op::cast, {h.input({DType::f32, Shape{2, 3}}, "x")},
                  Attrs{{"dtype", std::string("bfloat16")}});
  EXPECT_NE(error_of([&] { h.add(op::log_softmax, {b}); }).find("cast its input"),
            std::string::npos);
}

TEST(MixedPrecision, HalvesTheActivationArena) {
  auto arena = [](const char* policy) {
    PolicyScope p(policy);
    using namespace layers;
    Model m = Sequential({Input({28, 28, 1}), Conv2D(32, 3, {.activation = "relu"}),
                          Conv2D(64, 3, {.activation = "relu"}), MaxPooling2D({2, 2}), Flatten(),
                          Dense(10)});
    Graph g;
    Value x = g.input({DType::f32, Shape{64, 28, 28, 1}}, "x");
    CallContext ctx{g, true, 1};
    Value y = m.call(ctx, {x})[0];
    if (g.type(y).dtype != DType::f32)
      y = g.add(op::cast, {y}, Attrs{{"dtype", std::string("float32")}});
    Value loss = g.add(op::reduce_sum, {g.add(op::square, {y})},
                       Attrs{{"axes", std::vector<int64_t>{0, 1}}});
    std::vector<Value> reads;
    for (auto& v : m.trainable_weights()) reads.push_back(g.variable(v));
    auto grads = gradients(g, loss, reads);
    grads.push_back(loss);
    return Executable(g, {x}, grads).arena_bytes();
  };
  const size_t f32 = arena("float32"), bf16 = arena("mixed_bfloat16");
  std::printf("arena: float32 %zu KiB, mixed_bfloat16 %zu KiB\n", f32 >> 10, bf16 >> 10);
  EXPECT_LT(double(bf16), 0.62 * double(f32)) << bf16 << " vs " << f32;
}

TEST(MixedPrecision, CompiledMatchesEager) {
  PolicyScope mixed("mixed_bfloat16");
  test_util::ThreadReplicasGuard one_program(1);  // (the eager fit draws one program's masks)
  auto [x, y] = synthetic(10 * 16, 3);
  set_random_seed(7);
  Model a = small_cnn();
  set_random_seed(7);
  Model b = small_cnn();
  b.set_weights(a.get_weights());
  compile(a);
  compile(b, /*eager=*/true);
  auto la = step_losses(a, x, y, 10, 16), lb = step_losses(b, x, y, 10, 16);
  ASSERT_EQ(la.size(), 10u);
  // The compiled step fuses conv+bias+relu (one bf16 rounding instead of three).
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(la[i], lb[i], 2e-2 * std::fabs(lb[i])) << "step " << i;
  for (auto& w : a.get_weights()) EXPECT_EQ(w.dtype(), DType::f32);
}

TEST(MixedPrecision, CpuMatchesReferenceBackend) {
  PolicyScope mixed("mixed_bfloat16");
  test_util::ThreadReplicasGuard one_program(1);  // (the reference backend's fit runs one)
  auto [x, y] = synthetic(8 * 16, 4);
  Model a = small_cnn(), b = small_cnn();
  b.set_weights(a.get_weights());
  compile(a);
  compile(b, false, "reference");
  auto la = step_losses(a, x, y, 8, 16), lb = step_losses(b, x, y, 8, 16);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(la[i], lb[i], 2e-2 * std::fabs(lb[i])) << "step " << i;
}

TEST(MixedPrecision, TracksFloat32Training) {
  auto [x, y] = synthetic(30 * 16, 5);
  // No dropout: its masks are keyed by node, and the mixed graph has more nodes (the casts).
  Model f = small_cnn(false);
  Model m = [] {
    PolicyScope mixed("mixed_bfloat16");
    return small_cnn(false);
  }();
  m.set_weights(f.get_weights());
  compile(f);
  compile(m);
  auto lf = step_losses(f, x, y, 30, 16), lm = step_losses(m, x, y, 30, 16);
  EXPECT_NEAR(lm[0], lf[0], 0.02 * lf[0]);               // same weights, bf16 rounding only
  EXPECT_LT(lm.back(), 0.5 * lm.front());                // it learns ...
  EXPECT_NEAR(lm.back(), lf.back(), 0.25 * lf.front());  // ... about as f32 does
  // predict gives f32 close to the f32 model's on the same weights.
  Model f2 = small_cnn(false);
  f2.set_weights(m.get_weights());
  auto pm = m.predict(x.slice(0, 32)).to_vector(), pf = f2.predict(x.slice(0, 32)).to_vector();
  double worst = 0, differs = 0;
  for (size_t i = 0; i < pm.size(); ++i) {
    worst = std::max(worst, double(std::fabs(pm[i] - pf[i])) / (1.0 + std::fabs(pf[i])));
    differs += pm[i] != pf[i];
  }
  EXPECT_LT(worst, 0.05);
  EXPECT_GT(differs, 0);  // it really computed in bf16
}
