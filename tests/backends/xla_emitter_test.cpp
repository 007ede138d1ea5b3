// Every StablehloBuilder helper, compiled and run through the CPU PJRT plugin, against values
// worked out by hand or by Lockstep's reference kernels (tolerance 1e-5 relative unless said).
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaEmitter, NeedsTheXlaBuild) {
  GTEST_SKIP() << "built without LOCKSTEP_XLA (no pjrt_c_api.h)";
}
#else
#include <cmath>
#include <limits>

#include "backends/xla/stablehlo_emitter.h"
#include "backends/xla_test_util.h"
#include "lockstep/core/rng.h"
#include "ops/op_harness.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::xla;

namespace {

using Floats = std::vector<float>;

// Compiles the builder's module, runs it on `args` (one list per replica), returns the outputs
// of replica 0 (or of every replica) as host tensors.
std::vector<std::vector<Tensor> > run_replicas(StablehloBuilder& b,
                                               const std::vector<std::vector<Tensor> >& args) {
  auto client = xla_test::shared_client().client;
  const int replicas = int(args.size());
  b.set_num_replicas(replicas);
  PjrtExecutable exe = client->compile(b.module_text(), {.num_replicas = replicas});
  auto bufs = std::vector<std::vector<PjrtBuffer> >(size_t(replicas));
  auto ptrs = std::vector<std::vector<PjrtBuffer*> >(size_t(replicas));
  for (int r = 0; r < replicas; ++r) {
    for (const Tensor& t : args[size_t(r)])
      bufs[size_t(r)].push_back(client->to_device(t, exe.device_of_replica(r)));
    for (PjrtBuffer& p : bufs[size_t(r)]) ptrs[size_t(r)].push_back(&p);
  }
  auto out = exe.execute_replicas(ptrs);
  auto host = std::vector<std::vector<Tensor> >(size_t(replicas));
  for (int r = 0; r < replicas; ++r)
    for (PjrtBuffer& o : out[size_t(r)]) host[size_t(r)].push_back(client->to_host(o));
  return host;
}

std::vector<Tensor> run(StablehloBuilder& b, const std::vector<Tensor>& args) {
  return run_replicas(b, {args})[0];
}

Floats values(const Tensor& t) { return t.to_vector(); }

void expect_near(const Floats& got, const Floats& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

HloType f32(std::vector<int64_t> dims) { return {ElemType::f32, std::move(dims)}; }

Tensor random_tensor(Shape s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::empty(s);
  Philox rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(lo, hi);
  return t;
}

}  // namespace

class XlaEmitter : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!xla_test::shared_client().client)
      GTEST_SKIP() << "no PJRT CPU plugin: " << xla_test::shared_client().why_not;
  }
};

TEST_F(XlaEmitter, BinaryOps) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({4})), y = b.argument(f32({4}));
  b.ret({b.add(x, y), b.subtract(x, y), b.multiply(x, y), b.divide(x, y), b.maximum(x, y),
         b.minimum(x, y), b.power(x, y)});
  auto out = run(b, {Tensor::from_vector(Shape{4}, {1, 2, 3, 4}),
                     Tensor::from_vector(Shape{4}, {2, 2, 0.5f, 8})});
  expect_near(values(out[0]), {3, 4, 3.5f, 12});
  expect_near(values(out[1]), {-1, 0, 2.5f, -4});
  expect_near(values(out[2]), {2, 4, 1.5f, 32});
  expect_near(values(out[3]), {0.5f, 1, 6, 0.5f});
  expect_near(values(out[4]), {2, 2, 3, 8});
  expect_near(values(out[5]), {1, 2, 0.5f, 4});
  expect_near(values(out[6]), {1, 4, std::sqrt(3.f), 65536});
}

TEST_F(XlaEmitter, UnaryOps) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({3}));
  b.ret({b.negate(x), b.exponential(x), b.log(x), b.log_plus_one(x), b.sqrt(x), b.rsqrt(x),
         b.tanh(x), b.logistic(x), b.abs(b.negate(x)), b.sign(b.negate(x)), b.floor(x)});
  const Floats in = {0.25f, 1.5f, 4.f};
  auto out = run(b, {Tensor::from_vector(Shape{3}, in)});
  auto each = [&](float (*f)(float)) {
    Floats r;
    for (float v : in) r.push_back(f(v));
    return r;
  };
  expect_near(values(out[0]), {-0.25f, -1.5f, -4.f});
  expect_near(values(out[1]), each([](float v) { return std::exp(v); }));
  expect_near(values(out[2]), each([](float v) { return std::log(v); }));
  expect_near(values(out[3]), each([](float v) { return std::log1p(v); }));
  expect_near(values(out[4]), each([](float v) { return std::sqrt(v); }));
  expect_near(values(out[5]), each([](float v) { return 1.f / std::sqrt(v); }));
  expect_near(values(out[6]), each([](float v) { return std::tanh(v); }));
  expect_near(values(out[7]), each([](float v) { return 1.f / (1.f + std::exp(-v)); }));
  expect_near(values(out[8]), in);
  expect_near(values(out[9]), {-1, -1, -1});
  expect_near(values(out[10]), {0, 1, 4});
}

TEST_F(XlaEmitter, CompareSelectConvert) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({4})), y = b.argument(f32({4}));
  HloValue gt = b.compare(x, y, Compare::GT);
  HloValue as_int = b.convert(b.negate(x), ElemType::i32);  // truncation toward zero
  HloValue bf = b.convert(b.convert(x, ElemType::bf16), ElemType::f32);
  HloValue i64 = b.convert(b.convert(x, ElemType::i64), ElemType::f32);
  b.ret({b.select(gt, x, y), b.convert(gt, ElemType::f32), as_int, bf, i64,
         b.convert(b.compare(x, y, Compare::EQ), ElemType::f32)});
  auto out = run(b, {Tensor::from_vector(Shape{4}, {1.7f, -2.5f, 3.f, 1.00390625f}),
                     Tensor::from_vector(Shape{4}, {1.f, 0.f, 3.f, 1.f})});
  expect_near(values(out[0]), {1.7f, 0.f, 3.f, 1.00390625f});
  expect_near(values(out[1]), {1, 0, 0, 1});
  EXPECT_EQ(out[2].dtype(), DType::i32);
  EXPECT_EQ(values(out[2]), (Floats{-1, 2, -3, -1}));
  expect_near(values(out[3]), {1.703125f, -2.5f, 3.f, 1.f}, 0);  // bf16: 8 bits of mantissa
  expect_near(values(out[4]), {1, -2, 3, 1}, 0);
  expect_near(values(out[5]), {0, 0, 1, 0}, 0);
}

TEST_F(XlaEmitter, ConstantsAndIota) {
  StablehloBuilder b;
  const double inf = std::numeric_limits<double>::infinity();
  b.ret({b.constant(f32({2, 2}), 2.5), b.constant(f32({2, 3}), {1, 2, 3, 4, 5, -inf}),
         b.constant(f32({}), -inf), b.convert(b.iota({ElemType::i32, {2, 3}}, 1), ElemType::f32),
         b.convert(b.constant({ElemType::i1, {2}}, {1, 0}), ElemType::f32)});
  auto out = run(b, {});
  expect_near(values(out[0]), {2.5f, 2.5f, 2.5f, 2.5f});
  expect_near(values(out[1]), {1, 2, 3, 4, 5, -INFINITY});
  EXPECT_EQ(out[2].item(), -INFINITY);
  expect_near(values(out[3]), {0, 1, 2, 0, 1, 2});
  expect_near(values(out[4]), {1, 0});
}

TEST_F(XlaEmitter, ShapeOps) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({2, 3}));  // [[0 1 2] [3 4 5]]
  HloValue row = b.argument(f32({3}));
  b.ret({b.broadcast_in_dim(row, {2, 3}, {1}), b.reshape(x, {3, 2}), b.transpose(x, {1, 0}),
         b.slice(x, {0, 0}, {2, 3}, {1, 2}), b.concatenate({x, x}, 0), b.reverse(x, {1}),
         b.pad(x, b.scalar(ElemType::f32, -1), {0, 1}, {0, -1}, {1, 0})});
  auto out = run(b, {Tensor::from_vector(Shape{2, 3}, {0, 1, 2, 3, 4, 5}),
                     Tensor::from_vector(Shape{3}, {7, 8, 9})});
  expect_near(values(out[0]), {7, 8, 9, 7, 8, 9});
  EXPECT_EQ(out[1].shape(), (Shape{3, 2}));
  expect_near(values(out[2]), {0, 3, 1, 4, 2, 5});
  expect_near(values(out[3]), {0, 2, 3, 5});
  EXPECT_EQ(out[4].shape(), (Shape{4, 3}));
  expect_near(values(out[5]), {2, 1, 0, 5, 4, 3});
  // Interior padding 1 on dim 0 (a row of -1 between), low 1 / high -1 on dim 1.
  EXPECT_EQ(out[6].shape(), (Shape{3, 3}));
  expect_near(values(out[6]), {-1, 0, 1, -1, -1, -1, -1, 3, 4});
}

TEST_F(XlaEmitter, DotGeneralBatchedMatmul) {
  StablehloBuilder b;
  HloValue a = b.argument(f32({2, 2, 3})), c = b.argument(f32({2, 3, 2}));
  b.ret({b.dot_general(a, c, {0}, {0}, {2}, {1})});
  Tensor ta = random_tensor(Shape{2, 2, 3}, 1), tc = random_tensor(Shape{2, 3, 2}, 2);
  auto out = run(b, {ta, tc});
  Floats want;
  const float *pa = ta.data<float>(), *pc = tc.data<float>();
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        float s = 0;
        for (int k = 0; k < 3; ++k) s += pa[n * 6 + i * 3 + k] * pc[n * 6 + k * 2 + j];
        want.push_back(s);
      }
  expect_near(values(out[0]), want);
}

TEST_F(XlaEmitter, ReduceWithReducerAndWithABody) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({2, 3}));
  HloValue sum = b.reduce(x, b.scalar(ElemType::f32, 0), {1}, Reducer::add);
  HloValue mx = b.reduce(x, b.scalar(ElemType::f32, -INFINITY), {0}, Reducer::max);
  // argmax over dim 1 as a two-input reduce: (value, index) pairs, the first maximum kept.
  HloValue idx = b.iota({ElemType::i32, {2, 3}}, 1);
  auto am = b.reduce(
      {x, idx}, {b.scalar(ElemType::f32, -INFINITY), b.scalar(ElemType::i32, 0)}, {1},
      [&](const std::vector<HloValue>& a) {
        // a = (acc_v, acc_i, v, i)
        HloValue take = b.compare(a[2], a[0], Compare::GT);
        return std::vector<HloValue>{b.select(take, a[2], a[0]), b.select(take, a[3], a[1])};
      });
  b.ret({sum, mx, b.convert(am[1], ElemType::f32)});
  auto out = run(b, {Tensor::from_vector(Shape{2, 3}, {1, 5, 2, 7, 0, 7})});
  expect_near(values(out[0]), {8, 14});
  expect_near(values(out[1]), {7, 5, 7});
  expect_near(values(out[2]), {1, 0});
}

// conv2d through the emitter against the reference kernel: strides, same padding, dilation
// and groups, NHWC x HWIO.
TEST_F(XlaEmitter, ConvolutionMatchesTheReferenceConv2d) {
  struct Case {
    Shape x, w;
    int64_t stride, dilation, groups;
    int64_t pt, pb, pl, pr;
  };
  for (const Case& c : {Case{{2, 5, 6, 3}, {3, 3, 3, 4}, 1, 1, 1, 1, 1, 1, 1},
                        Case{{1, 7, 7, 4}, {3, 2, 2, 6}, 2, 1, 2, 0, 1, 1, 0},
                        Case{{1, 8, 8, 2}, {3, 3, 1, 2}, 1, 2, 2, 2, 2, 2, 2}}) {
    StablehloBuilder b;
    HloValue x = b.argument(f32(c.x.vec())), w = b.argument(f32(c.w.vec()));
    ConvWindow win{{c.stride, c.stride},
                   {{c.pt, c.pb}, {c.pl, c.pr}},
                   {},
                   {c.dilation, c.dilation},
                   c.groups,
                   1};
    b.ret({b.convolution(x, w, ConvDims::nhwc(), win)});
    Tensor tx = random_tensor(c.x, 3), tw = random_tensor(c.w, 4);
    auto out = run(b, {tx, tw});
    Attrs at{{"strides", std::vector<int64_t>{c.stride, c.stride}},
             {"dilations", std::vector<int64_t>{c.dilation, c.dilation}},
             {"groups", c.groups},
             {"pads", std::vector<int64_t>{c.pt, c.pb, c.pl, c.pr}}};
    auto want = lockstep::testing::run_single_op("conv2d", at, {tx, tw}, "reference");
    EXPECT_EQ(out[0].shape(), want[0].shape());
    expect_near(values(out[0]), values(want[0]), 1e-4f);
  }
}

// Input dilation (the transposed convolution of a conv's input gradient): a 1-D [1, 3, 1, 1]
// input dilated by 2 -> 1 0 2 0 3, convolved with the kernel [1, 10].
TEST_F(XlaEmitter, ConvolutionWithInputDilation) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({1, 1, 3, 1})), w = b.argument(f32({1, 2, 1, 1}));
  ConvWindow win;
  win.lhs_dilation = {1, 2};
  b.ret({b.convolution(x, w, ConvDims::nhwc(), win)});
  auto out = run(b, {Tensor::from_vector(Shape{1, 1, 3, 1}, {1, 2, 3}),
                     Tensor::from_vector(Shape{1, 2, 1, 1}, {1, 10})});
  expect_near(values(out[0]), {1, 20, 2, 30});
}

TEST_F(XlaEmitter, MaxPoolAndItsGradient) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({1, 4, 4, 1})), dy = b.argument(f32({1, 2, 2, 1}));
  Window w{{1, 2, 2, 1}, {1, 2, 2, 1}, {}};
  b.ret({b.reduce_window(x, b.scalar(ElemType::f32, -INFINITY), w, Reducer::max),
         b.select_and_scatter(x, dy, b.scalar(ElemType::f32, 0), w)});
  auto out = run(b, {Tensor::from_vector(Shape{1, 4, 4, 1}, {1, 9, 2, 3,  //
                                                             4, 9, 8, 0,  //
                                                             5, 6, 7, 7,  //
                                                             0, 1, 7, 2}),
                     Tensor::from_vector(Shape{1, 2, 2, 1}, {10, 20, 30, 40})});
  expect_near(values(out[0]), {9, 8, 6, 7});
  // Ties (the two 9s, the three 7s) go to the first maximum of the window.
  expect_near(values(out[1]), {0, 10, 0, 0, 0, 0, 20, 0, 0, 30, 40, 0, 0, 0, 0, 0});
}

// batch_norm_training / _inference / _grad over the last (feature) axis, against the textbook
// formulas computed here in double.
TEST_F(XlaEmitter, BatchNorm) {
  const int64_t R = 6, C = 3;
  const double eps = 1e-3;
  Tensor tx = random_tensor(Shape{2, 3, C}, 5), tg = random_tensor(Shape{C}, 6, 0.5f, 1.5f);
  Tensor tb = random_tensor(Shape{C}, 7), tdy = random_tensor(Shape{2, 3, C}, 8);
  StablehloBuilder b;
  HloValue x = b.argument(f32({2, 3, C})), g = b.argument(f32({C})), be = b.argument(f32({C}));
  HloValue dy = b.argument(f32({2, 3, C}));
  auto tr = b.batch_norm_training(x, g, be, eps, 2);
  HloValue inf = b.batch_norm_inference(x, g, be, tr[1], tr[2], eps, 2);
  auto gr = b.batch_norm_grad(x, g, tr[1], tr[2], dy, eps, 2);
  b.ret({tr[0], tr[1], tr[2], inf, gr[0], gr[1], gr[2]});
  auto out = run(b, {tx, tg, tb, tdy});
  const float *px = tx.data<float>(), *pg = tg.data<float>(), *pb = tb.data<float>(),
              *pdy = tdy.data<float>();
  Floats y(size_t(R * C)), mean(C), var(C), dx(size_t(R * C)), dg(C), db(C);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0, sdy = 0, sdyx = 0;
    for (int64_t r = 0; r < R; ++r) m += px[r * C + c] / double(R);
    for (int64_t r = 0; r < R; ++r) v += (px[r * C + c] - m) * (px[r * C + c] - m) / double(R);
    const double rstd = 1 / std::sqrt(v + eps);
    for (int64_t r = 0; r < R; ++r) {
      y[size_t(r * C + c)] = float(pg[c] * (px[r * C + c] - m) * rstd + pb[c]);
      sdy += pdy[r * C + c];
      sdyx += pdy[r * C + c] * (px[r * C + c] - m) * rstd;
    }
    for (int64_t r = 0; r < R; ++r) {
      const double xh = (px[r * C + c] - m) * rstd;
      dx[size_t(r * C + c)] = float(pg[c] * rstd / R * (R * pdy[r * C + c] - sdy - xh * sdyx));
    }
    mean[size_t(c)] = float(m), var[size_t(c)] = float(v), dg[size_t(c)] = float(sdyx),
    db[size_t(c)] = float(sdy);
  }
  expect_near(values(out[0]), y, 1e-4f);
  expect_near(values(out[1]), mean, 1e-5f);
  expect_near(values(out[2]), var, 1e-5f);
  expect_near(values(out[3]), y, 1e-4f);
  expect_near(values(out[4]), dx, 1e-4f);
  expect_near(values(out[5]), dg, 1e-4f);
  expect_near(values(out[6]), db, 1e-4f);
}

TEST_F(XlaEmitter, AllReduceSumsOverTheReplicaGroup) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({3}));
  b.ret({b.all_reduce(x, {{0, 1}}), b.all_reduce(x, {{0, 1}}, Reducer::max)});
  auto out = run_replicas(b, {{Tensor::from_vector(Shape{3}, {1, 2, 3})},
                              {Tensor::from_vector(Shape{3}, {10, 20, -30})}});
  for (int r = 0; r < 2; ++r) {
    expect_near(values(out[size_t(r)][0]), {11, 22, -27});
    expect_near(values(out[size_t(r)][1]), {10, 20, 3});
  }
}

TEST_F(XlaEmitter, Bfloat16Arithmetic) {
  StablehloBuilder b;
  HloValue x = b.argument({ElemType::bf16, {2}});
  HloValue y = b.multiply(x, b.constant({ElemType::bf16, {2}}, 3.0));
  b.ret({y});
  Tensor t = Tensor::empty(Shape{2}, DType::bf16);
  t.data<bf16>()[0] = f32_to_bf16(1.5f);
  t.data<bf16>()[1] = f32_to_bf16(-0.25f);
  auto out = run(b, {t});
  ASSERT_EQ(out[0].dtype(), DType::bf16);
  EXPECT_EQ(bf16_to_f32(out[0].data<bf16>()[0]), 4.5f);
  EXPECT_EQ(bf16_to_f32(out[0].data<bf16>()[1]), -0.75f);
}

TEST_F(XlaEmitter, BadOperandsAreCaughtBeforeThePlugin) {
  StablehloBuilder b;
  HloValue x = b.argument(f32({2})), y = b.argument(f32({3}));
  b.set_location("add 'dense' #4");
  std::string err = test_util::error_of([&] { b.add(x, y); });
  EXPECT_NE(err.find("stablehlo.add: operand types differ, tensor<2xf32> and tensor<3xf32>"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("add 'dense' #4"), std::string::npos) << err;
}

#endif  // LOCKSTEP_XLA
