// A small CNN training graph (conv-bias-relu x2, max pool, dense, softmax CE): the fused cpu
// program's loss and gradients match the unfused reference program, and the fusion pass fires.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

TEST(NnGraph, FusedCpuMatchesReference) {
  Graph g;
  const int64_t N = 4;
  Value x = g.input({DType::f32, Shape{N, 10, 10, 2}}, "x");
  Value labels = g.input({DType::i32, Shape{N}}, "labels");
  std::vector<Shape> ws{{3, 3, 2, 8}, {8}, {3, 3, 8, 16}, {16}, {4 * 4 * 16, 5}, {5}};
  std::vector<Value> params;
  for (size_t i = 0; i < ws.size(); ++i)
    params.push_back(g.input({DType::f32, ws[i]}, "p" + std::to_string(i)));
  Value h = g.add(op::conv2d, {x, params[0]});
  h = g.add(op::relu, {g.add(op::bias_add, {h, params[1]})});
  h = g.add(op::conv2d, {h, params[2]}, Attrs{{"padding", "same"}});
  h = g.add(op::relu, {g.add(op::bias_add, {h, params[3]})});
  h = g.add(op::max_pool2d, {h}, Attrs{{"pool_size", I{2, 2}}});
  h = g.add(op::reshape, {h}, Attrs{{"shape", I{N, -1}}});
  Value logits = g.add(op::bias_add, {g.add(op::matmul, {h, params[4]}), params[5]});
  Value ce = g.add(op::sparse_softmax_cross_entropy, {logits, labels});
  Value loss = g.add(op::reduce_mean, {ce}, Attrs{{"axes", I{0}}, {"keepdims", false}});
  std::vector<Value> outs{loss};
  for (Value d : gradients(g, loss, params)) outs.push_back(d);
  std::vector<Value> feeds{x, labels};
  feeds.insert(feeds.end(), params.begin(), params.end());

  Executable ref(g, feeds, outs, CompileOptions{.backend = "reference", .fuse = false});
  Executable cpu(g, feeds, outs, CompileOptions{.backend = "cpu"});
  int fused = 0;
  for (auto& line : cpu.report()) fused += line.find("fused conv2d+bias+relu") != std::string::npos;
  EXPECT_EQ(fused, 2);
  Philox rng(5);
  for (int i = 0; i < int(feeds.size()); ++i) {
    Tensor& t = ref.input(i);
    if (i == 1) {
      for (int64_t k = 0; k < N; ++k) t.data<int32_t>()[k] = int32_t(k % 5);
    } else {
      const float scale = i < 2 ? 1.f : 1.f / std::sqrt(float(t.numel() / t.shape()[-1]));
      for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] = rng.uniform(-1.f, 1.f) * scale;
    }
    cpu.input(i).copy_from(t);
  }
  for (int step = 0; step < 2; ++step) {  // twice: kernels must not depend on a fresh arena
    ref.run();
    cpu.run();
    for (int o = 0; o < ref.num_outputs(); ++o) {
      auto a = ref.output(o).to_vector(), b = cpu.output(o).to_vector();
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(a[k], b[k], 1e-4f * (1.f + std::fabs(a[k])))
            << "output " << o << " element " << k;
    }
  }
}

}  // namespace
}  // namespace lockstep
