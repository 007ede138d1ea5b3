// relu and relu6 propagate NaN, as TensorFlow and PyTorch do (they turned it into 0, so a NaN in
// the input left the loss finite while the weights became NaN and no NaN stop fired), on every
// host backend and in every fused form: the elementwise ops, conv2d with a fused relu / relu6
// (oneDNN's post-op on cpu), batch_norm_train / batch_norm_infer with a fused relu / relu6.
// Their gradients give 0 where the activation's output is NaN, as both peers' do
// (threshold_backward: dy * (y > 0)). Max pooling keeps a NaN of its window too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "lockstep/graph/backends.h"
#include "lockstep/graph/executable.h"
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class NanActivation : public ::testing::TestWithParam<std::string> {};

Tensor values(const Shape& shape, std::vector<float> v) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v[size_t(i) % v.size()];
  return t;
}

TEST_P(NanActivation, ReluAndRelu6PassNaNThrough) {
  const Tensor x = values({2, 4}, {kNaN, -1.f, 0.5f, 7.f, 2.f, -kNaN, 0.f, 6.f});
  for (const char* op : {"relu", "relu6"}) {
    const std::vector<float> y = run_single_op(op, {}, {x}, GetParam())[0].to_vector();
    EXPECT_TRUE(std::isnan(y[0])) << op << " on " << GetParam() << ": NaN became " << y[0];
    EXPECT_TRUE(std::isnan(y[5])) << op << " on " << GetParam() << ": -NaN became " << y[5];
    EXPECT_EQ(y[1], 0.f) << op;
    EXPECT_EQ(y[2], 0.5f) << op;
    EXPECT_EQ(y[3], std::string(op) == "relu" ? 7.f : 6.f) << op;
    EXPECT_EQ(y[6], 0.f) << op;
  }
}

TEST_P(NanActivation, GradientsAreZeroWhereTheOutputIsNaN) {
  const Tensor dy = values({4}, {1.f, 2.f, 3.f, 4.f});
  const Tensor y = values({4}, {kNaN, 1.f, -1.f, 7.f});
  const auto relu = run_single_op("relu_grad", {}, {dy, y}, GetParam())[0].to_vector();
  EXPECT_EQ(relu, (std::vector<float>{0.f, 2.f, 0.f, 4.f}));
  const auto relu6 = run_single_op("relu6_grad", {}, {dy, y}, GetParam())[0].to_vector();
  EXPECT_EQ(relu6, (std::vector<float>{0.f, 2.f, 0.f, 0.f}));
}

// A NaN pixel reaches every output of the 3x3 windows over it, fused activation or not.
TEST_P(NanActivation, ConvWithAFusedReluOrRelu6KeepsNaN) {
  Tensor x = values({1, 5, 5, 2}, {0.25f, -0.5f, 0.75f, 1.f, -1.f});
  x.data<float>()[(2 * 5 + 2) * 2] = kNaN;  // the centre pixel, channel 0
  const Tensor w = values({3, 3, 2, 16}, {0.5f, -0.25f, 0.125f, 1.f});
  const Tensor b = values({16}, {0.f, -2.f, 2.f});
  for (const char* act : {"relu", "relu6"}) {
    const Attrs attrs{{"fused_bias", true}, {"activation", act}};
    const std::vector<float> y =
        run_single_op("conv2d", attrs, {x, w, b}, GetParam())[0].to_vector();
    ASSERT_EQ(y.size(), size_t(3 * 3 * 16));
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_TRUE(std::isnan(y[i])) << "conv2d + " << act << " on " << GetParam() << ": output "
                                    << i << " is " << y[i] << ", want NaN";
  }
}

TEST_P(NanActivation, BatchNormWithAFusedReluOrRelu6KeepsNaN) {
  Tensor x = values({4, 3}, {0.5f, -1.f, 2.f, 1.5f, -0.25f});
  x.data<float>()[4] = kNaN;  // row 1, channel 1
  const Tensor gamma = values({3}, {1.f, 2.f, 0.5f}), beta = values({3}, {0.f, 0.1f, -0.1f});
  const Tensor mean = values({3}, {0.f}), var = values({3}, {1.f});
  const Attrs relu{{"epsilon", 1e-3}, {"activation", "relu"}};
  const std::vector<float> yi =
      run_single_op("batch_norm_infer", relu, {x, gamma, beta, mean, var}, GetParam())[0]
          .to_vector();
  EXPECT_TRUE(std::isnan(yi[4])) << "batch_norm_infer + relu on " << GetParam() << ": " << yi[4];
  EXPECT_FALSE(std::isnan(yi[3])) << "batch_norm_infer + relu: " << yi[3];
  for (const char* act : {"relu", "relu6"}) {
    const Attrs attrs{{"epsilon", 1e-3}, {"activation", act}};
    const std::vector<float> yt =
        run_single_op("batch_norm_train", attrs, {x, gamma, beta}, GetParam())[0].to_vector();
    // Channel 1's mean and variance are NaN, so its whole column is.
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(std::isnan(yt[size_t(r * 3 + 1)]))
          << "batch_norm_train + " << act << " on " << GetParam() << ": row " << r << " is "
          << yt[size_t(r * 3 + 1)];
  }
}

// A NaN in a window makes its maximum NaN, as TensorFlow's and PyTorch's max pooling do (the
// cpu kernels kept the other values' maximum): 3 channels run the scalar loop, 16 the vector one,
// in f32 and (cpu) bf16. The windows without the NaN keep their maximum.
TEST_P(NanActivation, MaxPoolKeepsNaN) {
  for (int64_t c : {3, 16}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      if (dt == DType::bf16 && GetParam() != "cpu") continue;
      Graph g;
      Value x = g.input({DType::f32, Shape{1, 4, 4, c}}, "x");
      Value xs = dt == DType::f32 ? x : g.add(op::cast, {x}, Attrs{{"dtype", "bfloat16"}});
      Value y = g.add(op::max_pool2d, {xs},
                      Attrs{{"pool_size", std::vector<int64_t>{2, 2}},
                            {"strides", std::vector<int64_t>{2, 2}}});
      if (dt != DType::f32) y = g.add(op::cast, {y}, Attrs{{"dtype", "float32"}});
      Executable exe(g, {x}, {y}, CompileOptions{.backend = GetParam()});
      const Tensor xv = values({1, 4, 4, c}, {0.25f, -0.5f, 0.75f, 1.f, -1.f, 3.f, 2.f});
      std::copy_n(xv.data<float>(), xv.numel(), exe.input(0).data<float>());
      exe.input(0).data<float>()[(1 * 4 + 1) * c + 0] = kNaN;  // top-left window, channel 0
      exe.input(0).data<float>()[(2 * 4 + 3) * c + 1] = kNaN;  // bottom-right window, channel 1
      exe.run();
      const std::vector<float> v = exe.output(0).to_vector();
      ASSERT_EQ(v.size(), size_t(4 * c));
      const std::string what =
          "max_pool2d on " + GetParam() + ", " + std::to_string(c) + " channels, " + dtype_name(dt);
      EXPECT_TRUE(std::isnan(v[0])) << what << ": window 0, channel 0 is " << v[0];
      EXPECT_TRUE(std::isnan(v[size_t(3 * c + 1)])) << what << ": window 3, channel 1";
      for (int64_t i = 0; i < 4 * c; ++i)
        if (i != 0 && i != 3 * c + 1) EXPECT_FALSE(std::isnan(v[size_t(i)])) << what << ": " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, NanActivation, ::testing::ValuesIn(host_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::testing
