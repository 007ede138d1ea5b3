// The fusion pass on batch-norm chains of a ResNet block: batch_norm_train -> relu,
// batch_norm_train -> add -> relu (identity and projection shortcuts) and, in the backward,
// relu_grad -> batch_norm_train_grad. The fused program's outputs and gradients match the
// unfused compiled program and the eager (op-by-op) one in f32 and under bf16 activations, and
// its gradients match central finite differences of the loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lockstep/core/rng.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

const Shape kX{8, 4, 4, 6};
constexpr int64_t kC = 6;
constexpr int kNorms = 4;

struct Program {
  Graph g;
  std::vector<Value> feeds;  // x, w, then gamma_k, beta_k per norm
  std::vector<Value> fetch;  // loss, block output, d loss / d feeds (x, gammas, betas)
};

// a = relu(bn0(x)); b = relu(bn1(a) + a); c = relu(bn2(b) + bn3(b)); loss = sum(w * c).
Program block(bool bf16) {
  Program p;
  Graph& g = p.g;
  Value x = g.input({DType::f32, kX}, "x");
  Value w = g.input({DType::f32, kX}, "w");
  p.feeds = {x, w};
  std::vector<Value> gamma, beta;
  for (int k = 0; k < kNorms; ++k) {
    gamma.push_back(g.input({DType::f32, Shape{kC}}, "gamma"));
    beta.push_back(g.input({DType::f32, Shape{kC}}, "beta"));
    p.feeds.push_back(gamma.back());
    p.feeds.push_back(beta.back());
  }
  auto bn = [&](Value v, int k) {
    return g.add_multi("batch_norm_train", {v, gamma[size_t(k)], beta[size_t(k)]},
                       Attrs{{"epsilon", 1e-3}}, "bn" + std::to_string(k))[0];
  };
  Value h = bf16 ? g.add("cast", {x}, Attrs{{"dtype", std::string("bfloat16")}}) : x;
  Value a = g.add("relu", {bn(h, 0)});
  Value b = g.add("relu", {g.add("add", {bn(a, 1), a})});
  Value c = g.add("relu", {g.add("add", {bn(b, 2), bn(b, 3)})});
  if (bf16) c = g.add("cast", {c}, Attrs{{"dtype", std::string("float32")}});
  I axes{0, 1, 2, 3};
  Value loss =
      g.add("reduce_sum", {g.add("mul", {c, w})}, Attrs{{"axes", axes}, {"keepdims", false}});
  std::vector<Value> wrt{x};
  for (size_t i = 2; i < p.feeds.size(); ++i) wrt.push_back(p.feeds[i]);
  p.fetch = {loss, c};
  for (Value d : gradients(g, loss, wrt)) p.fetch.push_back(d);
  return p;
}

std::vector<std::vector<float>> feed_values() {
  Philox rng(7);
  std::vector<std::vector<float>> v;
  auto fill = [&](int64_t n, float lo, float hi) {
    std::vector<float> t(static_cast<size_t>(n));
    for (float& f : t) f = rng.uniform(lo, hi);
    v.push_back(t);
  };
  fill(kX.numel(), -2.f, 2.f);  // x
  fill(kX.numel(), -1.f, 1.f);  // w
  for (int k = 0; k < kNorms; ++k) {
    fill(kC, 0.5f, 1.5f);   // gamma
    fill(kC, -0.5f, 0.5f);  // beta
  }
  return v;
}

std::vector<std::vector<float>> run(Executable& exe, const std::vector<std::vector<float>>& in) {
  for (int i = 0; i < exe.num_inputs(); ++i)
    std::copy(in[size_t(i)].begin(), in[size_t(i)].end(), exe.input(i).data<float>());
  exe.run();
  std::vector<std::vector<float>> out;
  for (int k = 0; k < exe.num_outputs(); ++k) out.push_back(exe.output(k).to_vector());
  return out;
}

int count_lines(const std::vector<std::string>& report, const std::string& what) {
  return int(std::count_if(report.begin(), report.end(), [&](const std::string& l) {
    return l.find(what) != std::string::npos;
  }));
}

// Largest |a - b| / (atol + rtol * max|b|) over the tensor: <= 1 passes.
double worst(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  double scale = 0, err = 0;
  for (float v : b) scale = std::max(scale, double(std::fabs(v)));
  for (size_t i = 0; i < a.size(); ++i)
    err = std::max(err, std::fabs(double(a[i]) - b[i]) / (atol + rtol * scale));
  return err;
}

void check_fused_matches_unfused(bool bf16) {
  Program p = block(bf16);
  Executable fused(p.g, p.feeds, p.fetch);
  Executable unfused(p.g, p.feeds, p.fetch, CompileOptions{.fuse = false});
  Executable eager(p.g, p.feeds, p.fetch, CompileOptions{.eager = true});
  const auto& r = fused.report();
  std::string all;
  for (const std::string& l : r) all += l + "\n";
  EXPECT_EQ(count_lines(r, "fused batch_norm+relu"), 1) << all;
  EXPECT_EQ(count_lines(r, "fused batch_norm+add+relu"), 2) << all;
  EXPECT_EQ(count_lines(r, "fused relu_grad+batch_norm_train_grad"), kNorms) << all;
  EXPECT_EQ(count_lines(r, "bf16:"), 0) << "a norm ran through the conversion adapter\n" << all;
  EXPECT_LT(fused.num_scheduled(), unfused.num_scheduled());
  // The fused program no longer runs relu or relu_grad.
  bool relu_left = false;
  for (const Node& n : fused.graph().nodes()) relu_left |= n.op == "relu";
  EXPECT_FALSE(relu_left);

  const auto in = feed_values();
  const auto got = run(fused, in), want = run(unfused, in), oracle = run(eager, in);
  ASSERT_EQ(got.size(), want.size());
  // f32: the same arithmetic up to summation order. bf16: the fused kernels skip the rounding
  // of the intermediate bn(x) and bn(x) + z to bf16, which moves results by bf16 steps.
  const double atol = bf16 ? 3e-2 : 1e-4, rtol = bf16 ? 3e-2 : 1e-4;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(worst(got[k], want[k], atol, rtol), 1.0) << "fetch " << k << " vs unfused";
    EXPECT_LE(worst(got[k], oracle[k], atol, rtol), 1.0) << "fetch " << k << " vs eager";
  }
  if (!bf16) {  // the unfused compiled program and the eager one agree exactly in f32
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_LE(worst(want[k], oracle[k], 1e-6, 1e-6), 1.0) << "fetch " << k;
  }
}

TEST(BatchNormFusion, FusedMatchesUnfusedAndEagerF32) { check_fused_matches_unfused(false); }
TEST(BatchNormFusion, FusedMatchesUnfusedAndEagerBf16) { check_fused_matches_unfused(true); }

// Directional finite differences of the fused program's loss along random directions, for x
// and for every gamma and beta, against the fused program's gradients.
TEST(BatchNormFusion, FusedGradientsMatchFiniteDifferences) {
  Program p = block(false);
  Executable exe(p.g, p.feeds, p.fetch);
  auto in = feed_values();
  const auto base = run(exe, in);
  Philox rng(3);
  // feeds index -> gradient fetch index: x -> 2, feed i >= 2 -> i + 1.
  for (size_t f = 0; f < in.size(); ++f) {
    if (f == 1) continue;  // w: not differentiated
    const size_t gk = f == 0 ? 2 : f + 1;
    std::vector<float> u(in[f].size());
    double analytic = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      u[i] = rng.uniform(-1.f, 1.f);
      analytic += double(u[i]) * base[gk][i];
    }
    const float eps = 2e-3f;
    auto loss_at = [&](float s) {
      auto moved = in;
      for (size_t i = 0; i < u.size(); ++i) moved[f][i] += s * u[i];
      return double(run(exe, moved)[0][0]);
    };
    const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    EXPECT_NEAR(numeric, analytic, 2e-2 * std::max(1.0, std::fabs(analytic))) << "feed " << f;
  }
}

}  // namespace
}  // namespace lockstep
