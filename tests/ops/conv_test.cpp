// Exact-value tests for conv2d/pooling geometry (Keras padding semantics) and shape errors.
#include <gtest/gtest.h>

#include "lockstep/graph/executable.h"
#include "test_util.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

std::vector<float> iota16() {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = float(i + 1);
  return v;
}

// 4x4 input 1..16 (one channel), 3x3 all-ones filter.
std::vector<float> run_conv(const std::string& backend, Attrs a) {
  Graph g;
  Value x = g.input({DType::f32, Shape{1, 4, 4, 1}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 1, 1}}, "w");
  Value y = g.add(op::conv2d, {x, w}, a);
  Executable exe(g, {x, w}, {y}, CompileOptions{.backend = backend});
  exe.input(0).copy_from(Tensor::from_vector(Shape{1, 4, 4, 1}, iota16()));
  exe.input(1).fill(1.f);
  exe.run();
  return exe.output(0).to_vector();
}

class ConvExact : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvExact, Valid3x3) {
  EXPECT_EQ(run_conv(GetParam(), {}), (std::vector<float>{54, 63, 90, 99}));
}

TEST_P(ConvExact, SameStride2EvenPadsBottomRight) {
  // Keras: out = 2, total pad 1 -> 0 at the top/left, 1 at the bottom/right.
  auto y = run_conv(GetParam(), Attrs{{"padding", "same"}, {"strides", I{2, 2}}});
  EXPECT_EQ(y, (std::vector<float>{54, 45, 72, 54}));
}

TEST_P(ConvExact, SameStride1) {
  auto y = run_conv(GetParam(), Attrs{{"padding", "same"}});
  EXPECT_EQ(y,
            (std::vector<float>{14, 24, 30, 22, 33, 54, 63, 45, 57, 90, 99, 69, 46, 72, 78, 54}));
}

TEST_P(ConvExact, AvgPoolSameExcludesPadding) {
  Graph g;
  Value x = g.input({DType::f32, Shape{1, 4, 4, 1}}, "x");
  Attrs a{{"pool_size", I{3, 3}}, {"strides", I{2, 2}}, {"padding", "same"}};
  Value y = g.add(op::avg_pool2d, {x}, a);
  Value m = g.add(op::max_pool2d, {x}, a);
  Executable exe(g, {x}, {y, m}, CompileOptions{.backend = GetParam()});
  exe.input(0).copy_from(Tensor::from_vector(Shape{1, 4, 4, 1}, iota16()));
  exe.run();
  EXPECT_EQ(exe.output(0).to_vector(), (std::vector<float>{6, 7.5f, 12, 13.5f}));
  EXPECT_EQ(exe.output(1).to_vector(), (std::vector<float>{11, 12, 15, 16}));
}

INSTANTIATE_TEST_SUITE_P(Backends, ConvExact, ::testing::ValuesIn(host_backends()));

TEST(ConvShapes, UnknownBatchPropagates) {
  Graph g;
  Value x = g.input({DType::f32, Shape{-1, 28, 28, 1}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 1, 32}}, "w");
  Value y = g.add(op::conv2d, {x, w});
  EXPECT_EQ(g.type(y).shape, (Shape{-1, 26, 26, 32}));
  Value p = g.add(op::max_pool2d, {y}, Attrs{{"pool_size", I{2, 2}}});
  EXPECT_EQ(g.type(p).shape, (Shape{-1, 13, 13, 32}));
  Value dx = g.add(op::conv2d_backward_input, {y, w}, Attrs{{"input_shape", I{-1, 28, 28, 1}}});
  EXPECT_EQ(g.type(dx).shape, (Shape{-1, 28, 28, 1}));
  Graph s = g.specialise_batch(8);
  EXPECT_EQ(s.type(dx).shape, (Shape{8, 28, 28, 1}));
  Value m = g.add(op::matmul, {g.input({DType::f32, Shape{-1, 5}}, "a"),
                               g.input({DType::f32, Shape{5, 3}}, "b")});
  EXPECT_EQ(g.type(m).shape, (Shape{-1, 3}));
}

using lockstep::test_util::error_of;

TEST(ConvShapes, ErrorsNameTheProblem) {
  Graph g;
  Value x = g.input({DType::f32, Shape{-1, 28, 28, 3}}, "x");
  Value w = g.input({DType::f32, Shape{3, 3, 1, 8}}, "w");
  auto e = error_of([&] { g.add(op::conv2d, {x, w}, {}, "conv_a"); });
  EXPECT_NE(e.find("input has 3 channels, kernel expects 1 (check Input shape)"), std::string::npos)
      << e;
  EXPECT_NE(e.find("conv_a"), std::string::npos) << e;
  Value small = g.input({DType::f32, Shape{-1, 2, 2, 1}}, "s");
  e = error_of([&] { g.add(op::conv2d, {small, w}); });
  EXPECT_NE(e.find("smaller than the window"), std::string::npos) << e;
  Value x3 = g.input({DType::f32, Shape{-1, 28, 28}}, "x3");
  e = error_of([&] { g.add(op::conv2d, {x3, w}); });
  EXPECT_NE(e.find("4-D input"), std::string::npos) << e;
  Value a = g.input({DType::f32, Shape{-1, 9216}}, "a");
  Value b = g.input({DType::f32, Shape{9000, 128}}, "b");
  e = error_of([&] { g.add(op::matmul, {a, b}); });
  EXPECT_NE(e.find("inner dimensions differ"), std::string::npos) << e;
}

}  // namespace
}  // namespace lockstep
