// The kernel programs' weight cache: nodes computed from variables alone (a batch norm folded
// into its conv's weights, a weight's bfloat16 cast) run once and again only when a variable
// they read may have changed: another program of the model wrote it (its DeviceResidence), the
// host said it would write (DeviceResidence::host_changed, set_weights, load_weights), or host
// code was handed the variables (Layer::weights(): variable_host_epoch()). A program never
// caches what it writes itself, and a program without a residence caches nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "graph/graph_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

VariablePtr make_var(const std::string& name, Shape s, float lo, float hi, uint64_t seed) {
  auto v = std::make_shared<Variable>();
  v->name = name;
  v->value = Tensor::empty(s);
  Philox rng(seed);
  for (int64_t i = 0; i < s.numel(); ++i) v->value.data<float>()[i] = rng.uniform(lo, hi);
  return v;
}

// y = relu(batch_norm_infer(conv(x, w))) with w, gamma, beta, mean, var variables (the fold
// and, with bf16, the weight casts are cacheable); `writer` adds w += 1 (an assign_add).
struct Net {
  VariablePtr w = make_var("w", Shape{3, 3, 4, 16}, -1.f, 1.f, 1);
  std::vector<VariablePtr> stats{
      make_var("gamma", Shape{16}, 0.5f, 1.5f, 2), make_var("beta", Shape{16}, -1.f, 1.f, 3),
      make_var("mean", Shape{16}, -1.f, 1.f, 4), make_var("var", Shape{16}, 0.5f, 2.f, 5)};
  std::shared_ptr<DeviceResidence> residence = std::make_shared<DeviceResidence>();
  Graph g;
  Value x, y;
  explicit Net(bool bf16) {
    residence->add({w});
    residence->add(stats);
    x = g.input({DType::f32, Shape{2, 6, 6, 4}}, "x");
    auto cast = [&](Value v) {
      return bf16 ? g.add(op::cast, {v}, Attrs{{"dtype", std::string("bfloat16")}}) : v;
    };
    Value c = g.add(op::conv2d, {cast(x), cast(g.variable(w))},
                    Attrs{{"padding", std::string("same")}}, "conv");
    std::vector<Value> bn{c};
    for (auto& s : stats) bn.push_back(g.variable(s));
    y = g.add(op::relu, {g.add(op::batch_norm_infer, bn, Attrs{{"epsilon", 1e-3}}, "bn")});
    if (bf16) y = g.add(op::cast, {y}, Attrs{{"dtype", std::string("float32")}});
  }
  CompileOptions options() const {
    CompileOptions o;
    o.residence = residence;
    return o;
  }
};

std::vector<float> predict(Executable& exe) {
  Philox rng(9);
  for (int64_t i = 0; i < exe.input(0).numel(); ++i)
    exe.input(0).data<float>()[i] = rng.uniform(-1.f, 1.f);
  exe.run();
  return exe.output(0).to_vector();
}

// The oracle: the same graph run op by op on the variables' current values.
std::vector<float> eager(Net& n) {
  Executable exe(n.g, {n.x}, {n.y}, CompileOptions{.eager = true});
  return predict(exe);
}

bool same(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  return test_util::worst(a, b, tol, tol) <= 1.0;
}

int cache_lines(const Executable& exe) {
  int n = 0;
  for (const std::string& l : exe.report()) n += l.rfind("weight cache:", 0) == 0;
  return n;
}

class WeightCache : public ::testing::TestWithParam<bool> {};

TEST_P(WeightCache, RecomputesAfterAnotherProgramWritesAWeight) {
  const bool bf16 = GetParam();
  const double tol = bf16 ? 3e-2 : 1e-5;
  Net n(bf16);
  Executable infer(n.g, {n.x}, {n.y}, n.options());
  EXPECT_EQ(cache_lines(infer), 1);
  const auto before = predict(infer);
  EXPECT_TRUE(same(before, eager(n), tol));
  // A second program of the model writes w (w += 1, a side effect): the first one's folded
  // weights are stale and must be recomputed at its next run.
  Graph wg;
  Value delta =
      wg.add(op::constant, {}, Attrs{{"value", 1.0}, {"shape", std::vector<int64_t>{3, 3, 4, 16}}});
  wg.add_multi(op::assign_add, {wg.variable(n.w), delta}, {}, "w += 1", n.w);
  std::vector<Value> none;
  Executable writer(wg, {}, none, n.options());
  writer.run();
  const auto after = predict(infer);
  EXPECT_FALSE(same(after, before, tol)) << "the write did not change the prediction";
  EXPECT_TRUE(same(after, eager(n), tol)) << "stale folded weights after another program wrote w";
}

TEST_P(WeightCache, RecomputesAfterTheHostSaysItWrites) {
  const bool bf16 = GetParam();
  const double tol = bf16 ? 3e-2 : 1e-5;
  Net n(bf16);
  Executable infer(n.g, {n.x}, {n.y}, n.options());
  const auto before = predict(infer);
  // Announced through the residence (what set_weights and load_weights do).
  n.residence->host_changed();
  n.stats[0]->value.data<float>()[3] += 2.f;
  const auto after = predict(infer);
  EXPECT_FALSE(same(after, before, tol));
  EXPECT_TRUE(same(after, eager(n), tol));
  // Announced through the process-wide epoch (what Layer::weights() does).
  note_variable_host_write();
  n.stats[1]->value.data<float>()[5] -= 3.f;
  const auto third = predict(infer);
  EXPECT_FALSE(same(third, after, tol));
  EXPECT_TRUE(same(third, eager(n), tol));
}

// The cache is real: a write nobody announces is not seen (the documented contract: host code
// that keeps a VariablePtr and writes it later says so first), and a program without a
// residence, which caches nothing, sees it.
TEST_P(WeightCache, KeepsItsValuesUntilAWriteIsAnnounced) {
  const bool bf16 = GetParam();
  const double tol = bf16 ? 3e-2 : 1e-5;
  Net n(bf16);
  Executable infer(n.g, {n.x}, {n.y}, n.options());
  Executable uncached(n.g, {n.x}, {n.y});
  EXPECT_EQ(cache_lines(uncached), 0);
  const auto before = predict(infer);
  n.stats[0]->value.data<float>()[0] += 2.f;  // unannounced
  EXPECT_TRUE(same(predict(infer), before, tol)) << "the folded weights were recomputed";
  EXPECT_TRUE(same(predict(uncached), eager(n), tol));
  EXPECT_FALSE(same(predict(uncached), before, tol));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, WeightCache, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Bf16" : "F32"; });

// A program that writes a variable does not cache what it computes from it (a train step's
// weight casts), only what it computes from variables it leaves alone.
TEST(WeightCache, AProgramDoesNotCacheWhatItWrites) {
  Net n(false);
  Graph& g = n.g;
  Value delta = g.add(op::constant, {}, Attrs{{"value", 0.5}, {"shape", std::vector<int64_t>{16}}});
  g.add_multi(op::assign_add, {g.variable(n.stats[0]), delta}, {}, "gamma += 0.5", n.stats[0]);
  Executable step(g, {n.x}, {n.y}, n.options());
  EXPECT_EQ(cache_lines(step), 0);  // the fold reads gamma, which this program writes
  const auto first = predict(step);
  const auto second = predict(step);
  EXPECT_FALSE(same(first, second, 1e-5)) << "the second run used the first run's gamma";
}

}  // namespace
}  // namespace lockstep
