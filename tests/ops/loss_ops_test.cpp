// Exact-value tests for losses, metrics, activations, softmax, tie handling and dropout.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <set>

#include "graph/internal/passes.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/op_registry.h"

using namespace lockstep;

namespace {

const char* kBackends[] = {"reference", "cpu"};

// Runs one op on the given inputs and returns all of its outputs.
std::vector<std::vector<float>> run_op(const std::string& op, const std::vector<Tensor>& ins,
                                       Attrs attrs = {}, const std::string& backend = "cpu") {
  Graph g;
  std::vector<Value> in;
  for (size_t i = 0; i < ins.size(); ++i)
    in.push_back(g.input({ins[i].dtype(), ins[i].shape()}, "in" + std::to_string(i)));
  auto outs = g.add_multi(OpId::named(op), in, attrs, op);
  CompileOptions o;
  o.backend = backend;
  Executable exe(g, in, outs, o);
  for (size_t i = 0; i < ins.size(); ++i) exe.input(int(i)).copy_from(ins[i]);
  exe.run();
  std::vector<std::vector<float>> r;
  for (int i = 0; i < exe.num_outputs(); ++i) r.push_back(exe.output(i).to_vector());
  return r;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

Tensor logits23() { return Tensor::from_vector(Shape{2, 3}, {1, 2, 3, 0, 0, 0}); }

}  // namespace

TEST(LossOps, SparseCrossEntropyKnownValues) {
  for (const char* b : kBackends) {
    auto r = run_op("sparse_softmax_cross_entropy",
                    {logits23(), Tensor::from_vector_i32(Shape{2}, {2, 0})}, {}, b);
    expect_near(r[0], {0.40760596f, 1.09861229f});
    // Keras label smoothing: targets = onehot * 0.9 + 0.1 / 3.
    r = run_op("sparse_softmax_cross_entropy",
               {logits23(), Tensor::from_vector_i32(Shape{2}, {2, 0})},
               Attrs{{"label_smoothing", 0.1}}, b);
    expect_near(r[0], {0.50760596f, 1.09861229f});
    auto d = run_op("softmax_cross_entropy",
                    {logits23(), Tensor::from_vector(Shape{2, 3}, {0, 0, 1, 1, 0, 0})},
                    Attrs{{"label_smoothing", 0.1}}, b);
    expect_near(d[0], r[0]);
  }
}

TEST(LossOps, SparseCrossEntropyGradientIsSoftmaxMinusOnehot) {
  for (const char* b : kBackends) {
    Graph g;
    Value z = g.input({DType::f32, Shape{1, 3}}, "z");
    Value l = g.input({DType::i32, Shape{1}}, "labels");
    Value loss = g.add(op::reduce_sum, {g.add(op::sparse_softmax_cross_entropy, {z, l})});
    auto grads = gradients(g, loss, {z});
    Executable exe(g, {z, l}, {grads[0]}, CompileOptions{.backend = b});
    exe.input(0).copy_from(Tensor::from_vector(Shape{1, 3}, {1, 2, 3}));
    exe.input(1).copy_from(Tensor::from_vector_i32(Shape{1}, {2}));
    exe.run();
    expect_near(exe.output(0).to_vector(), {0.09003057f, 0.24472847f, 0.66524096f - 1.f});
  }
}

TEST(LossOps, LabelsOutOfRangeThrowWithRowAndRange) {
  for (const char* b : kBackends) {
    for (auto [labels, msg] :
         {std::pair{std::vector<int32_t>{0, 5}, "(label 5 at row 1, expected [0, 3))"},
          std::pair{std::vector<int32_t>{-1, 0}, "(label -1 at row 0, expected [0, 3))"}}) {
      try {
        run_op("sparse_softmax_cross_entropy",
               {logits23(), Tensor::from_vector_i32(Shape{2}, labels)}, {}, b);
        FAIL() << "expected an error on " << b;
      } catch (const Error& e) {
        std::string w = e.what();
        EXPECT_NE(w.find("labels out of range"), std::string::npos) << w;
        EXPECT_NE(w.find(msg), std::string::npos) << w;
      }
    }
  }
}

TEST(LossOps, SigmoidCrossEntropyKnownValues) {
  for (const char* b : kBackends) {
    auto r = run_op("sigmoid_cross_entropy",
                    {Tensor::from_vector(Shape{4}, {0, 2, -3, 1}),
                     Tensor::from_vector(Shape{4}, {1, 0, 1, 0.25f})},
                    {}, b);
    expect_near(r[0], {0.69314718f, 2.12692801f, 3.04858735f, 1.06326169f});
  }
}

TEST(LossOps, Metrics) {
  Tensor pred = Tensor::from_vector(Shape{2, 3}, {0.1f, 0.7f, 0.2f, 0.5f, 0.4f, 0.1f});
  for (const char* b : kBackends) {
    expect_near(run_op("sparse_categorical_accuracy",
                       {pred, Tensor::from_vector_i32(Shape{2}, {1, 2})}, {}, b)[0],
                {1, 0});
    expect_near(run_op("categorical_accuracy",
                       {pred, Tensor::from_vector(Shape{2, 3}, {0, 0, 1, 1, 0, 0})}, {}, b)[0],
                {0, 1});
    Tensor lab = Tensor::from_vector_i32(Shape{2}, {2, 1});
    expect_near(run_op("in_top_k", {pred, lab}, Attrs{{"k", 2}}, b)[0], {1, 1});
    expect_near(run_op("in_top_k", {pred, lab}, Attrs{{"k", 1}}, b)[0], {0, 0});
    Tensor p = Tensor::from_vector(Shape{4}, {0.9f, 0.2f, 0.4f, 0.7f}),
           t = Tensor::from_vector(Shape{4}, {1, 0, 1, 0});
    expect_near(run_op("binary_accuracy", {p, t}, {}, b)[0], {1, 1, 0, 0});
    expect_near(run_op("binary_accuracy", {p, t}, Attrs{{"threshold", 0.3}}, b)[0], {1, 1, 1, 0});
  }
}

TEST(ActivationOps, GeluKnownValues) {
  Tensor x = Tensor::from_vector(Shape{6}, {-2, -1, 0, 0.5f, 1, 2});
  for (const char* b : kBackends) {
    expect_near(run_op("gelu", {x}, {}, b)[0],
                {-0.04550026f, -0.15865525f, 0.f, 0.34573123f, 0.84134475f, 1.95449974f});
    expect_near(run_op("gelu", {x}, Attrs{{"approximate", true}}, b)[0],
                {-0.04540231f, -0.15880801f, 0.f, 0.34571401f, 0.84119199f, 1.95459769f});
  }
}

TEST(ActivationOps, SoftmaxAndTies) {
  Tensor x = Tensor::from_vector(Shape{1, 3}, {1, 2, 3});
  for (const char* b : kBackends) {
    expect_near(run_op("softmax", {x}, {}, b)[0], {0.09003057f, 0.24472847f, 0.66524096f});
    expect_near(run_op("log_softmax", {x}, {}, b)[0], {-2.40760596f, -1.40760596f, -0.40760596f});
    // Gradients split evenly between ties.
    Tensor t = Tensor::from_vector(Shape{1, 3}, {1, 3, 3});
    Graph g;
    Value v = g.input({DType::f32, Shape{1, 3}}, "x");
    Value w = g.input({DType::f32, Shape{1, 3}}, "w");
    Value m = g.add(op::reduce_max, {v}, Attrs{{"axes", std::vector<int64_t>{1}}});
    Value mx = g.add(op::maximum, {v, w});
    Value loss = g.add(op::add, {g.add(op::reduce_sum, {m}), g.add(op::reduce_sum, {mx})});
    auto grads = gradients(g, loss, {v, w});
    Executable exe(g, {v, w}, grads, CompileOptions{.backend = b});
    exe.input(0).copy_from(t);
    exe.input(1).copy_from(Tensor::from_vector(Shape{1, 3}, {0, 3, 5}));
    exe.run();
    expect_near(exe.output(0).to_vector(), {0 + 1, 0.5f + 0.5f, 0.5f + 0});
    expect_near(exe.output(1).to_vector(), {0, 0.5f, 1});
  }
}

TEST(ElementwiseOps, BroadcastErrorsNameShapes) {
  Graph g;
  Value a = g.input({DType::f32, Shape{2, 3}}, "a");
  Value b = g.input({DType::f32, Shape{4}}, "b");
  try {
    g.add(op::add, {a, b}, {}, "plus");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shapes (2, 3) and (4,) cannot be broadcast"),
              std::string::npos)
        << e.what();
  }
}

namespace {

struct DropoutRun {
  std::vector<float> y, mask;
};

DropoutRun dropout(const Tensor& x, double rate, const char* backend, uint64_t step,
                   uint32_t replica = 0, int threads = 0) {
  Graph g;
  Value in = g.input({DType::f32, x.shape()}, "x");
  auto outs = g.add_multi(op::dropout, {in}, Attrs{{"rate", rate}, {"seed", 42}});
  Executable exe(g, {in}, outs, CompileOptions{.backend = backend, .replica = replica});
  exe.input(0).copy_from(x);
  exe.set_step(step);
  int saved = omp_get_max_threads();
  if (threads) omp_set_num_threads(threads);
  exe.run();
  omp_set_num_threads(saved);
  return {exe.output(0).to_vector(), exe.output(1).to_vector()};
}

}  // namespace

TEST(DropoutOp, DeterministicRateAndScale) {
  const int64_t n = 200001;
  Tensor x = Tensor::full(Shape{n}, 2.f);
  DropoutRun ref = dropout(x, 0.3, "reference", 5);
  DropoutRun one = dropout(x, 0.3, "cpu", 5, 0, 1);
  DropoutRun many = dropout(x, 0.3, "cpu", 5, 0, 4);
  EXPECT_EQ(ref.mask, one.mask);
  EXPECT_EQ(ref.mask, many.mask);
  EXPECT_EQ(ref.y, many.y);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    float m = ref.mask[i];
    ASSERT_TRUE(m == 0.f || std::fabs(m - 1.f / 0.7f) < 1e-6f) << m;
    EXPECT_EQ(ref.y[i], 2.f * m);
    dropped += m == 0.f;
  }
  EXPECT_NEAR(double(dropped) / double(n), 0.3, 0.01);
  EXPECT_NE(dropout(x, 0.3, "cpu", 6).mask, ref.mask);     // a new step draws a new mask
  EXPECT_NE(dropout(x, 0.3, "cpu", 5, 1).mask, ref.mask);  // so does another replica
  auto zero = dropout(x, 0.0, "cpu", 5);
  EXPECT_EQ(zero.y, x.to_vector());
}

TEST(DropoutOp, GradientIsMask) {
  for (const char* b : kBackends) {
    Graph g;
    Value x = g.input({DType::f32, Shape{64}}, "x");
    auto outs = g.add_multi(op::dropout, {x}, Attrs{{"rate", 0.5}});
    auto grads = gradients(g, g.add(op::reduce_sum, {outs[0]}), {x});
    Executable exe(g, {x}, {grads[0], outs[1]}, CompileOptions{.backend = b});
    exe.input(0).copy_from(Tensor::full(Shape{64}, 1.f));
    exe.run();
    EXPECT_EQ(exe.output(0).to_vector(), exe.output(1).to_vector());
  }
}

// The ops on a CNN training step's hot path have cpu kernels (no fallback to reference).
TEST(CpuKernels, HotPathHasNoReferenceFallback) {
  Graph g;
  Value x = g.input({DType::f32, Shape{8, 4, 4, 3}}, "x");
  Value labels = g.input({DType::i32, Shape{8}}, "labels");
  auto bias = std::make_shared<Variable>(Variable{"b", Tensor::zeros(Shape{3}), true});
  Value h = g.add(op::relu,
                  {g.add(op::bias_add,
                         {g.add(op::scale_shift, {x}, Attrs{{"scale", 0.5}}), g.variable(bias)})});
  Value d = g.add_multi(op::dropout, {h}, Attrs{{"rate", 0.25}})[0];
  Value logits = g.add(op::reshape, {d}, Attrs{{"shape", std::vector<int64_t>{8, 48}}});
  Value loss = g.add(op::reduce_mean, {g.add(op::sparse_softmax_cross_entropy, {logits, labels})});
  Value acc = g.add(op::sparse_categorical_accuracy, {logits, labels});
  Value probs = g.add(op::softmax, {logits});
  auto grads = gradients(g, loss, {x, g.variable(bias)});
  Value upd = g.add(op::sub, {g.variable(bias), g.add(op::mul, {grads[1], g.scalar(0.1f)})});
  const std::vector<Value> outs{loss, acc, probs, grads[0], upd};
  Executable exe(g, {x, labels}, outs);
  // Ask the registry, not the report's wording: every computing op the step runs has a cpu
  // kernel.
  const OpRegistry& R = OpRegistry::get();
  std::set<std::string> falls_back;
  for (int i : schedule_nodes(g, outs)) {
    const Node& nd = g.node(i);
    if (nd.op == op::input || nd.op == op::variable || R.op(nd.op).alias_input >= 0) continue;
    if (!R.kernel(nd.op, "cpu")) falls_back.insert(nd.op);
  }
  for (const std::string& op : falls_back) ADD_FAILURE() << op << " has no cpu kernel";
  // The report names each of them, and nothing else falls back (the report is what a user
  // reads; an empty or reworded report must not pass).
  std::set<std::string> reported;
  for (const std::string& line : exe.report())
    if (line.find("fallback") != std::string::npos)
      for (const Node& nd : g.nodes())
        if (line.find(" " + nd.op + " ") != std::string::npos) reported.insert(nd.op);
  EXPECT_EQ(reported, falls_back);
  // Positive control: concat is declared reference-only; a cpu program using it names it in
  // the report (so an empty or reworded report fails the check above too).
  ASSERT_FALSE(R.kernel(op::concat, "cpu")) << "pick another reference-only op for this control";
  Graph g2;
  Value in = g2.input({DType::f32, Shape{2}}, "in");
  Value out = g2.add(op::concat, {in, in}, Attrs{{"axis", int64_t(0)}});
  Executable e2(g2, {in}, {out}, CompileOptions{.backend = "cpu"});
  bool named = false;
  for (const std::string& line : e2.report())
    named = named || (line.find("fallback") != std::string::npos &&
                      line.find(" concat ") != std::string::npos);
  EXPECT_TRUE(named) << "concat runs on the reference kernel but the report does not say so";
}
