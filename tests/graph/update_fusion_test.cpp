// The fusion pass on optimizer updates: the per-variable sgd_update / adam_update nodes of one
// optimizer become one node updating every variable in one pass. The weights and slots after
// several steps are bit-identical to the per-variable updates (the same per-element arithmetic;
// only the split of the elements over the threads changes), on variables big enough to be
// split over the threads and small ones.
#include <gtest/gtest.h>

#include <cstring>

#include "lockstep/core/rng.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

const std::vector<Shape> kShapes = {{3, 3, 16, 64}, {64}, {37, 5}, {200, 150}};

struct Vars {
  std::vector<VariablePtr> w, m, v;
};

Vars make_vars() {
  Philox rng(5);
  Vars s;
  auto make = [&](const Shape& shape, float lo, float hi) {
    Tensor t = Tensor::zeros(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(lo, hi);
    return std::make_shared<Variable>(Variable{"v", t, true});
  };
  for (const Shape& sh : kShapes) {
    s.w.push_back(make(sh, -1.f, 1.f));
    s.m.push_back(make(sh, -0.1f, 0.1f));
    s.v.push_back(make(sh, 0.f, 0.1f));
  }
  return s;
}

// Feeds: lr, t, then one gradient per variable; one update node per variable.
std::unique_ptr<Executable> program(const std::string& op, const Attrs& attrs, const Vars& s,
                                    bool fuse, std::vector<std::string>* report) {
  Graph g;
  Value lr = g.input({DType::f32, Shape{}}, "lr");
  Value t = g.input({DType::f32, Shape{}}, "t");
  std::vector<Value> feeds{lr, t};
  for (size_t i = 0; i < kShapes.size(); ++i) {
    Value grad = g.input({DType::f32, kShapes[i]}, "grad");
    feeds.push_back(grad);
    Value w = g.variable(s.w[i]);
    std::vector<Value> in{w, grad, lr};
    if (op == "adam_update") {
      in.push_back(g.variable(s.m[i]));
      in.push_back(g.variable(s.v[i]));
      in.push_back(t);
    } else if (attrs.has("momentum")) {
      in.push_back(g.variable(s.m[i]));
    }
    g.add_multi(OpId::named(op), in, attrs, "", s.w[i]);
  }
  auto exe =
      std::make_unique<Executable>(g, feeds, std::vector<Value>{}, CompileOptions{.fuse = fuse});
  if (report) *report = exe->report();
  return exe;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void check(const std::string& op, const Attrs& attrs) {
  Vars fused_vars = make_vars(), plain_vars = make_vars();
  std::vector<std::string> report;
  auto fused = program(op, attrs, fused_vars, true, &report);
  auto plain = program(op, attrs, plain_vars, false, nullptr);
  std::string all;
  for (const std::string& l : report) all += l + "\n";
  EXPECT_NE(all.find("fused 4 " + op + " into one pass"), std::string::npos) << all;
  EXPECT_LT(fused->num_scheduled(), plain->num_scheduled());
  Philox rng(9);
  for (int step = 1; step <= 3; ++step) {
    for (Executable* e : {fused.get(), plain.get()}) {
      e->input(0).data<float>()[0] = 0.01f * float(step);
      e->input(1).data<float>()[0] = float(step);
    }
    for (int i = 2; i < fused->num_inputs(); ++i)
      for (int64_t k = 0; k < fused->input(i).numel(); ++k)
        fused->input(i).data<float>()[k] = plain->input(i).data<float>()[k] =
            rng.uniform(-1.f, 1.f);
    fused->run();
    plain->run();
  }
  for (size_t i = 0; i < kShapes.size(); ++i) {
    EXPECT_TRUE(same_bits(fused_vars.w[i]->value, plain_vars.w[i]->value)) << op << " w" << i;
    EXPECT_TRUE(same_bits(fused_vars.m[i]->value, plain_vars.m[i]->value)) << op << " m" << i;
    EXPECT_TRUE(same_bits(fused_vars.v[i]->value, plain_vars.v[i]->value)) << op << " v" << i;
    // And the update did something.
    EXPECT_FALSE(same_bits(fused_vars.w[i]->value, make_vars().w[i]->value)) << op << " w" << i;
  }
}

TEST(UpdateFusion, SgdMomentumBitIdentical) { check("sgd_update", Attrs{{"momentum", 0.9}}); }
TEST(UpdateFusion, SgdNesterovWeightDecayBitIdentical) {
  check("sgd_update", Attrs{{"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 0.01}});
}
TEST(UpdateFusion, SgdPlainBitIdentical) { check("sgd_update", Attrs{}); }
TEST(UpdateFusion, AdamBitIdentical) { check("adam_update", Attrs{{"weight_decay", 0.004}}); }

// Updates that differ (another learning rate) stay apart.
TEST(UpdateFusion, DifferentLearningRatesDoNotFuse) {
  Vars s = make_vars();
  Graph g;
  Value lr1 = g.input({DType::f32, Shape{}}, "lr1"), lr2 = g.input({DType::f32, Shape{}}, "lr2");
  Value grad = g.input({DType::f32, kShapes[1]}, "grad");
  g.add_multi(op::sgd_update, {g.variable(s.w[1]), grad, lr1}, {}, "", s.w[1]);
  g.add_multi(op::sgd_update, {g.variable(s.m[1]), grad, lr2}, {}, "", s.m[1]);
  Executable exe(g, {lr1, lr2, grad}, {});
  for (const std::string& l : exe.report()) EXPECT_EQ(l.find("into one pass"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
