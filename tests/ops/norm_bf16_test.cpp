// Mixed-precision normalisation on the cpu backend as a mixed_bfloat16 model builds it: bf16
// activations, f32 gamma/beta and statistics. The cpu kernels take bf16 natively (no
// conversion adapter in the compile report), and the forward outputs and the gradients of a
// loss through them match the reference backend (f32 arithmetic on the same bf16-rounded
// values) within bf16 rounding; shapes span several row blocks and threads.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

struct Case {
  OpId op;  // batch_norm_train, batch_norm_infer or layer_norm
  Shape x;
  float offset;  // added to x (a large channel mean tests the variance's cancellation)
};

// loss = sum(w * f32(norm(bf16(x), gamma, beta[, mean, var]))), plus the op's f32 outputs;
// returns the program's outputs: every forward output, then d loss / d (x, gamma, beta).
std::vector<std::vector<float>> run(const Case& c, const std::string& backend,
                                    std::vector<std::string>* report) {
  Graph g;
  const int64_t C = c.x[-1];
  Value x = g.input({DType::f32, c.x}, "x");
  Value w = g.input({DType::f32, c.x}, "w");
  std::vector<Value> params;
  const int np = c.op == op::batch_norm_infer ? 4 : 2;
  for (int i = 0; i < np; ++i) params.push_back(g.input({DType::f32, Shape{C}}, "p"));
  Value xb = g.add(op::cast, {x}, Attrs{{"dtype", std::string("bfloat16")}});
  std::vector<Value> ins{xb};
  ins.insert(ins.end(), params.begin(), params.end());
  auto outs = g.add_multi(c.op, ins, Attrs{{"epsilon", 1e-3}});
  EXPECT_EQ(g.type(outs[0]).dtype, DType::bf16);
  Value y = g.add(op::cast, {outs[0]}, Attrs{{"dtype", std::string("float32")}});
  I axes;
  for (int d = 0; d < c.x.rank(); ++d) axes.push_back(d);
  Value loss =
      g.add(op::reduce_sum, {g.add(op::mul, {y, w})}, Attrs{{"axes", axes}, {"keepdims", false}});
  std::vector<Value> fetch{y};
  for (size_t k = 1; k < outs.size(); ++k) fetch.push_back(outs[k]);
  std::vector<Value> wrt{x, params[0], params[1]};
  for (Value d : gradients(g, loss, wrt)) fetch.push_back(d);
  std::vector<Value> feeds{x, w};
  feeds.insert(feeds.end(), params.begin(), params.end());
  Executable exe(g, feeds, fetch, CompileOptions{.backend = backend});
  if (report) *report = exe.report();
  Philox rng(11);
  // Feeds: x, w, gamma, beta[, moving_mean, moving_variance].
  for (int i = 0; i < int(feeds.size()); ++i) {
    Tensor& t = exe.input(i);
    for (int64_t k = 0; k < t.numel(); ++k) {
      float v = rng.uniform(-1.f, 1.f);
      if (i == 0) v = 2.f * v + c.offset;
      if (i == 4) v += c.offset;
      if (i == 5) v = 1.f + 0.5f * v;
      t.data<float>()[k] = v;
    }
  }
  exe.run();
  std::vector<std::vector<float>> r;
  for (int o = 0; o < exe.num_outputs(); ++o) r.push_back(exe.output(o).to_vector());
  return r;
}

class NormBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(NormBf16, NativeCpuKernelMatchesReference) {
  const Case& c = GetParam();
  std::vector<std::string> report;
  auto got = run(c, "cpu", &report);
  auto want = run(c, "reference", nullptr);
  for (const std::string& line : report)
    EXPECT_EQ(line.find("bf16: " + c.op + " runs"), std::string::npos) << line;
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].size(), want[o].size());
    // Outputs rounded to bf16 (y, dx): 2^-8 of the largest value, plus f32 summation order.
    float scale = 0;
    for (float v : want[o]) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < got[o].size(); ++k)
      ASSERT_NEAR(got[o][k], want[o][k], 1e-2f * scale + 1e-5f)
          << c.op << " output " << o << " element " << k;
  }
}

std::string name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.op + "_" + std::to_string(info.param.x.numel()) +
                  (info.param.offset != 0 ? "_offset" : "");
  return n;
}

INSTANTIATE_TEST_SUITE_P(All, NormBf16,
                         ::testing::Values(Case{op::batch_norm_train, Shape{4, 9, 9, 16}, 0.f},
                                           Case{op::batch_norm_train, Shape{2, 10, 10, 8}, 30.f},
                                           Case{op::batch_norm_train, Shape{200, 3}, 0.f},
                                           Case{op::batch_norm_infer, Shape{4, 9, 9, 16}, 0.f},
                                           Case{op::layer_norm, Shape{3, 5, 7, 40}, 0.f}),
                         name);

}  // namespace
}  // namespace lockstep
