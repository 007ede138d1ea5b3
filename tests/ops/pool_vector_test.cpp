// The cpu backend's vector max-pool kernels (NHWC, channels a multiple of 16: 16 channels per
// AVX-512 vector; the forward for any window, the gradient for tiled windows) against the
// reference backend, in float32 and in bfloat16 storage. Max pooling moves values without
// arithmetic, so the two backends must agree bit for bit. x takes few distinct levels, zeros
// and negatives among them, so windows hold ties (dy goes to the first maximum in window order)
// and, with the fused relu_grad, maxima that are not positive (no dx). Only overlapping
// windows in bf16 add values (see below).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "lockstep/core/rng.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

struct Case {
  std::string name;
  Shape x;  // NHWC
  I pool, strides;
  std::string padding;
  bool relu;
  DType dtype;
};

// Outputs: y = max_pool2d(x) and dx = max_pool2d_grad(dy, x, y), both as float32.
std::vector<std::vector<float>> run(const Case& c, const std::string& backend) {
  Graph g;
  Attrs pa{{"pool_size", c.pool}, {"strides", c.strides}, {"padding", c.padding}};
  Value x = g.input({DType::f32, c.x}, "x");
  Value xs = x;
  if (c.dtype == DType::bf16) xs = g.add(op::cast, {x}, Attrs{{"dtype", std::string("bfloat16")}});
  Value y = g.add(op::max_pool2d, {xs}, pa);
  Value dy = g.input({DType::f32, g.type(y).shape}, "dy");
  Value dys = dy;
  if (c.dtype == DType::bf16)
    dys = g.add(op::cast, {dy}, Attrs{{"dtype", std::string("bfloat16")}});
  Attrs ga = pa;
  if (c.relu) ga.set("activation", "relu");
  Value dx = g.add(op::max_pool2d_grad, {dys, xs, y}, ga);
  std::vector<Value> fetch{y, dx};
  if (c.dtype == DType::bf16)
    for (Value& v : fetch) v = g.add(op::cast, {v}, Attrs{{"dtype", std::string("float32")}});
  Executable exe(g, {x, dy}, fetch, CompileOptions{.backend = backend});
  Philox rng(5);
  Tensor& xt = exe.input(0);
  for (int64_t k = 0; k < xt.numel(); ++k)  // levels -0.5 .. 1 in steps of 0.25 (exact in bf16)
    xt.data<float>()[k] = 0.25f * float(int(rng.uniform(0.f, 7.f)) - 2);
  Tensor& dyt = exe.input(1);
  for (int64_t k = 0; k < dyt.numel(); ++k) dyt.data<float>()[k] = rng.uniform(-1.f, 1.f);
  exe.run();
  return {exe.output(0).to_vector(), exe.output(1).to_vector()};
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class PoolVector : public ::testing::TestWithParam<Case> {};

TEST_P(PoolVector, CpuMatchesReferenceBitForBit) {
  const Case& c = GetParam();
  auto got = run(c, "cpu");
  auto want = run(c, "reference");
  ASSERT_EQ(got.size(), want.size());
  int64_t nonzero_dx = 0;
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].size(), want[o].size());
    for (size_t k = 0; k < got[o].size(); ++k) {
      if (o == 1 && c.dtype == DType::bf16 && c.strides != c.pool) {
        // Overlapping windows add several dy into one dx: the cpu kernel adds in bf16 storage,
        // the reference in f32 and rounds once: up to 9 roundings of 2^-9 relative to partial
        // sums of |dy| <= 9.
        ASSERT_NEAR(got[o][k], want[o][k], 9 * 9 * 0x1p-9) << "dx[" << k << "]";
      } else {
        ASSERT_EQ(std::memcmp(&got[o][k], &want[o][k], sizeof(float)), 0)
            << (o == 0 ? "y" : "dx") << "[" << k << "]: cpu " << got[o][k] << ", reference "
            << want[o][k];
      }
      if (o == 1 && got[o][k] != 0.f) ++nonzero_dx;
    }
  }
  EXPECT_GT(nonzero_dx, 0);  // the gradient reached x somewhere
}

std::vector<Case> cases() {
  std::vector<Case> r;
  for (DType t : {DType::f32, DType::bf16})
    for (bool relu : {false, true}) {
      const std::string tag =
          std::string(t == DType::bf16 ? "bf16" : "f32") + (relu ? "_relu" : "");
      r.push_back({"valid2_c32_" + tag, Shape{3, 6, 6, 32}, {2, 2}, {2, 2}, "valid", relu, t});
      // 7x7: the last row and column are in no window (zeroed, not written by the windows).
      r.push_back({"valid2_odd_c16_" + tag, Shape{2, 7, 7, 16}, {2, 2}, {2, 2}, "valid", relu, t});
      // 2x2/2 "same" on 5x5: tiled, the last windows clipped at the border.
      r.push_back(
          {"same2_clipped_c48_" + tag, Shape{2, 5, 5, 48}, {2, 2}, {2, 2}, "same", relu, t});
      // Overlapping padded windows: the vector forward, the scalar gradient.
      r.push_back({"same3_s2_c16_" + tag, Shape{2, 6, 6, 16}, {3, 3}, {2, 2}, "same", relu, t});
      r.push_back({"valid3_s1_c32_" + tag, Shape{1, 5, 6, 32}, {3, 3}, {1, 1}, "valid", relu, t});
    }
  return r;
}

INSTANTIATE_TEST_SUITE_P(All, PoolVector, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lockstep
