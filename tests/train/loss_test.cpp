// Losses against hand-computed values: logits/probability paths, label smoothing, clipping.
#include "lockstep/losses/loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/executable.h"

using namespace lockstep;

namespace {

// Runs loss->per_sample on fed y_true / y_pred and returns the per-sample values.
std::vector<float> run_loss(const LossPtr& loss, const Tensor& y_true, const Tensor& y_pred,
                            const std::string& backend = "reference") {
  Graph g;
  Value yt = g.input({y_true.dtype(), y_true.shape()}, "y_true");
  Value yp = g.input({y_pred.dtype(), y_pred.shape()}, "y_pred");
  Value out = loss->per_sample(g, yt, yp);
  CompileOptions o;
  o.backend = backend;
  Executable exe(g, {yt, yp}, {out}, o);
  exe.input(0).copy_from(y_true);
  exe.input(1).copy_from(y_pred);
  exe.run();
  return exe.output(0).to_vector();
}

// -log_softmax(row)[label] computed directly.
double xent(const std::vector<double>& logits, const std::vector<double>& target) {
  double mx = logits[0];
  for (double v : logits) mx = std::max(mx, v);
  double s = 0;
  for (double v : logits) s += std::exp(v - mx);
  double lse = mx + std::log(s), loss = 0;
  for (size_t i = 0; i < logits.size(); ++i) loss -= target[i] * (logits[i] - lse);
  return loss;
}

Tensor softmax_rows(const std::vector<float>& logits, int64_t n, int64_t c) {
  std::vector<float> p(logits.size());
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(double(logits[i * c + j]));
    for (int64_t j = 0; j < c; ++j) p[i * c + j] = float(std::exp(double(logits[i * c + j])) / s);
  }
  return Tensor::from_vector(Shape{n, c}, p);
}

const std::vector<float> kLogits = {1, 2, 3, 1, 1, 1, -2, 0.5f, 4};

}  // namespace

TEST(Loss, SparseCCEFromLogitsMatchesHandComputed) {
  auto loss = losses::SparseCategoricalCrossentropy({.from_logits = true});
  EXPECT_EQ(loss->label_dtype(), DType::i32);
  auto out = run_loss(loss, Tensor::from_vector_i32(Shape{3}, {2, 0, 1}),
                      Tensor::from_vector(Shape{3, 3}, kLogits));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_NEAR(out[0], 0.40760596, 1e-5);  // 3 - logsumexp(1, 2, 3)
  EXPECT_NEAR(out[1], std::log(3.0), 1e-5);
  EXPECT_NEAR(out[2], xent({-2, 0.5, 4}, {0, 1, 0}), 1e-5);
}

TEST(Loss, SparseCCEProbsAgreesWithLogits) {
  Tensor labels = Tensor::from_vector_i32(Shape{3}, {2, 0, 1});
  auto a = run_loss(losses::SparseCategoricalCrossentropy({.from_logits = true}), labels,
                    Tensor::from_vector(Shape{3, 3}, kLogits));
  auto b = run_loss(losses::SparseCategoricalCrossentropy(), labels, softmax_rows(kLogits, 3, 3));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

TEST(Loss, SparseCCEAcceptsColumnLabels) {
  auto out = run_loss(losses::SparseCategoricalCrossentropy({.from_logits = true}),
                      Tensor::from_vector_i32(Shape{3, 1}, {2, 0, 1}),
                      Tensor::from_vector(Shape{3, 3}, kLogits));
  EXPECT_NEAR(out[0], 0.40760596, 1e-5);
}

TEST(Loss, ProbabilitiesAreClippedLikeKeras) {
  // p(label) = 0 -> -log(1e-7) rather than inf.
  auto out =
      run_loss(losses::SparseCategoricalCrossentropy(), Tensor::from_vector_i32(Shape{1}, {0}),
               Tensor::from_vector(Shape{1, 2}, {0.f, 1.f}));
  EXPECT_NEAR(out[0], -std::log(1e-7), 1e-3);
  auto bce = run_loss(losses::BinaryCrossentropy(), Tensor::from_vector(Shape{2, 1}, {1, 0}),
                      Tensor::from_vector(Shape{2, 1}, {0, 0}));
  EXPECT_NEAR(bce[0], -std::log(1e-7), 1e-3);
  EXPECT_NEAR(bce[1], 0.0, 1e-5);
}

TEST(Loss, CategoricalWithLabelSmoothing) {
  std::vector<float> onehot = {0, 0, 1, 1, 0, 0, 0, 1, 0};
  for (double ls : {0.0, 0.1}) {
    for (bool logits : {true, false}) {
      auto loss = losses::CategoricalCrossentropy({.from_logits = logits, .label_smoothing = ls});
      Tensor pred =
          logits ? Tensor::from_vector(Shape{3, 3}, kLogits) : softmax_rows(kLogits, 3, 3);
      auto out = run_loss(loss, Tensor::from_vector(Shape{3, 3}, onehot), pred);
      for (int i = 0; i < 3; ++i) {
        std::vector<double> row(kLogits.begin() + 3 * i, kLogits.begin() + 3 * i + 3), t(3);
        for (int j = 0; j < 3; ++j) t[j] = onehot[3 * i + j] * (1 - ls) + ls / 3;
        EXPECT_NEAR(out[i], xent(row, t), 1e-5)
            << "ls=" << ls << " logits=" << logits << " row " << i;
      }
    }
  }
  // Hand-computed: row 0, ls 0.1: targets (1/30, 1/30, 28/30).
  auto out =
      run_loss(losses::CategoricalCrossentropy({.from_logits = true, .label_smoothing = 0.1}),
               Tensor::from_vector(Shape{3, 3}, onehot), Tensor::from_vector(Shape{3, 3}, kLogits));
  EXPECT_NEAR(out[0], 0.40760596 + (2.40760596 + 1.40760596 - 2 * 0.40760596) / 30.0, 1e-5);
}

TEST(Loss, BinaryLogitsAndProbsAgreeWithSmoothing) {
  std::vector<float> z = {-1.5f, 0.f, 2.f, 0.3f};
  std::vector<float> y = {0, 1, 1, 0};
  std::vector<float> p(4);
  for (int i = 0; i < 4; ++i) p[i] = float(1 / (1 + std::exp(-double(z[i]))));
  for (double ls : {0.0, 0.2}) {
    auto a = run_loss(losses::BinaryCrossentropy({.from_logits = true, .label_smoothing = ls}),
                      Tensor::from_vector(Shape{2, 2}, y), Tensor::from_vector(Shape{2, 2}, z));
    auto b = run_loss(losses::BinaryCrossentropy({.label_smoothing = ls}),
                      Tensor::from_vector(Shape{2, 2}, y), Tensor::from_vector(Shape{2, 2}, p));
    ASSERT_EQ(a.size(), 2u);  // mean over the last axis -> per sample
    for (int i = 0; i < 2; ++i) {
      double want = 0;
      for (int j = 0; j < 2; ++j) {
        double t = y[2 * i + j] * (1 - ls) + 0.5 * ls, q = p[2 * i + j];
        want -= (t * std::log(q) + (1 - t) * std::log(1 - q)) / 2;
      }
      EXPECT_NEAR(a[i], want, 1e-5) << "ls=" << ls;
      EXPECT_NEAR(b[i], want, 1e-5) << "ls=" << ls;
    }
  }
  // [N] targets against [N, 1] predictions: 0.6931 = log 2 for p = 0.5.
  auto c = run_loss(losses::BinaryCrossentropy(), Tensor::from_vector(Shape{2}, {1, 0}),
                    Tensor::from_vector(Shape{2, 1}, {0.5f, 0.5f}));
  EXPECT_NEAR(c[0], 0.69314718, 1e-5);
  EXPECT_NEAR(c[1], 0.69314718, 1e-5);
}

TEST(Loss, MeanSquaredErrorPerSample) {
  auto out = run_loss(losses::MeanSquaredError(), Tensor::from_vector(Shape{2, 2}, {1, 1, 1, 1}),
                      Tensor::from_vector(Shape{2, 2}, {1, 2, 3, 4}));
  EXPECT_EQ(out, (std::vector<float>{0.5f, 6.5f}));
  auto cpu = run_loss(losses::MeanSquaredError(), Tensor::from_vector(Shape{2, 2}, {1, 1, 1, 1}),
                      Tensor::from_vector(Shape{2, 2}, {1, 2, 3, 4}), "cpu");
  EXPECT_EQ(cpu, (std::vector<float>{0.5f, 6.5f}));
}

TEST(Loss, GetAndConfig) {
  EXPECT_EQ(losses::get("sparse_categorical_crossentropy")->name(),
            "SparseCategoricalCrossentropy");
  EXPECT_EQ(losses::get("SparseCategoricalCrossentropy")->name(), "SparseCategoricalCrossentropy");
  EXPECT_EQ(losses::get("categorical_crossentropy")->name(), "CategoricalCrossentropy");
  EXPECT_EQ(losses::get("binary_crossentropy")->name(), "BinaryCrossentropy");
  EXPECT_EQ(losses::get("mse")->name(), "MeanSquaredError");
  EXPECT_EQ(losses::get("mean_squared_error")->name(), "MeanSquaredError");
  EXPECT_THROW(losses::get("hinge_of_doom"), Error);
  auto c =
      losses::CategoricalCrossentropy({.from_logits = true, .label_smoothing = 0.1})->get_config();
  EXPECT_EQ(c["name"], "categorical_crossentropy");
  EXPECT_EQ(c["from_logits"], true);
  EXPECT_DOUBLE_EQ(c["label_smoothing"].get<double>(), 0.1);
  EXPECT_EQ(c["reduction"], "sum_over_batch_size");
  EXPECT_EQ(losses::get("mse")->get_config()["name"], "mean_squared_error");
  EXPECT_EQ(losses::get("mse")->label_dtype(), DType::f32);
}

TEST(Loss, GradientOfProbabilityPathIsFinite) {
  // The probs path (clip to [eps, 1 - eps], log, softmax cross-entropy, i.e. Keras's
  // -log(clip(p)_y / sum_j clip(p)_j)) must be differentiable and give the right gradient, also
  // where a probability is 0 (clipped: log(0) must not reach the gradient).
  Graph g;
  Value yt = g.input({DType::i32, Shape{2}}, "y");
  Value yp = g.input({DType::f32, Shape{2, 3}}, "p");
  Value per = losses::SparseCategoricalCrossentropy()->per_sample(g, yt, yp);
  Value l =
      g.add(op::reduce_mean, {per}, Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}});
  std::vector<Value> grads;
  ASSERT_NO_THROW(grads = gradients(g, l, {yp}));
  // Rows do not sum to 1, so the normalisation shows in the gradient.
  const std::vector<float> p = {0.f, 0.5f, 0.25f, 0.125f, 0.375f, 0.75f};
  const std::vector<int32_t> y = {1, 2};
  // Independently: L = mean_i [-log q_iy + log S_i], q = clip(p), S_i = sum_j q_ij, so
  // dL/dp_ij = (1/N) (1/S_i - [j == y_i] / q_iy) where p is inside the clip range, else 0.
  const double eps = 1e-7;
  std::vector<double> want_grad(6);
  double want_loss = 0;
  for (int i = 0; i < 2; ++i) {
    double S = 0;
    for (int j = 0; j < 3; ++j) S += std::clamp(double(p[3 * i + j]), eps, 1 - eps);
    const double qy = std::clamp(double(p[3 * i + y[i]]), eps, 1 - eps);
    want_loss += (-std::log(qy) + std::log(S)) / 2;
    for (int j = 0; j < 3; ++j) {
      const double pij = p[3 * i + j];
      const bool inside = pij > eps && pij < 1 - eps;
      want_grad[3 * i + j] = inside ? (1.0 / S - (j == y[i] ? 1.0 / qy : 0.0)) / 2 : 0.0;
    }
  }
  for (const std::string backend : {"reference", "cpu"}) {
    CompileOptions o;
    o.backend = backend;
    Executable exe(g, {yt, yp}, {l, grads[0]}, o);
    exe.input(0).copy_from(Tensor::from_vector_i32(Shape{2}, y));
    exe.input(1).copy_from(Tensor::from_vector(Shape{2, 3}, p));
    exe.run();
    EXPECT_NEAR(exe.output(0).item(), want_loss, 1e-5) << backend;
    auto got = exe.output(1).to_vector();
    ASSERT_EQ(got.size(), 6u);
    for (int k = 0; k < 6; ++k) {
      EXPECT_TRUE(std::isfinite(got[k])) << backend << " element " << k;
      EXPECT_NEAR(got[k], want_grad[k], 1e-5) << backend << " element " << k;
    }
  }
}

TEST(Loss, MaeHuberAndKLDivergencePerSample) {
  const std::vector<float> t = {0, 0, 1, -1}, p = {0.5f, 2.f, 1.2f, -3.5f};
  Tensor yt = Tensor::from_vector(Shape{2, 2}, t), yp = Tensor::from_vector(Shape{2, 2}, p);
  auto huber = [](double e, double delta) {  // Keras: where(|e| <= delta, ...)
    return std::fabs(e) <= delta ? 0.5 * e * e : delta * std::fabs(e) - 0.5 * delta * delta;
  };
  for (const std::string backend : {"reference", "cpu"}) {
    auto mae = run_loss(losses::get("mae"), yt, yp, backend);
    auto h1 = run_loss(losses::Huber(), yt, yp, backend);
    auto h2 = run_loss(losses::Huber(2.0), yt, yp, backend);
    for (int i = 0; i < 2; ++i) {
      double e0 = p[size_t(2 * i)] - t[size_t(2 * i)],
             e1 = p[size_t(2 * i + 1)] - t[size_t(2 * i + 1)];
      EXPECT_NEAR(mae[size_t(i)], (std::fabs(e0) + std::fabs(e1)) / 2, 1e-6) << backend;
      EXPECT_NEAR(h1[size_t(i)], (huber(e0, 1) + huber(e1, 1)) / 2, 1e-6) << backend;
      EXPECT_NEAR(h2[size_t(i)], (huber(e0, 2) + huber(e1, 2)) / 2, 1e-6) << backend;
    }
    EXPECT_NEAR(h1[0], (0.125 + 1.5) / 2, 1e-6);  // by hand
    // KL: rows (0.2, 0.8) vs (0.5, 0.5); (0, 1) vs (0.25, 0.75) with 0 clipped to 1e-7.
    auto kl = run_loss(losses::get("kl_divergence"),
                       Tensor::from_vector(Shape{2, 2}, {0.2f, 0.8f, 0.f, 1.f}),
                       Tensor::from_vector(Shape{2, 2}, {0.5f, 0.5f, 0.25f, 0.75f}), backend);
    EXPECT_NEAR(kl[0], 0.2 * std::log(0.4) + 0.8 * std::log(1.6), 1e-6) << backend;
    EXPECT_NEAR(kl[1], 1e-7 * std::log(1e-7 / 0.25) + std::log(1 / 0.75), 1e-6) << backend;
  }
  EXPECT_EQ(losses::get("huber")->get_config()["name"], "huber_loss");
  EXPECT_DOUBLE_EQ(losses::Huber(2.0)->get_config()["delta"].get<double>(), 2.0);
  EXPECT_EQ(losses::get("KLDivergence")->name(), "KLDivergence");
  EXPECT_EQ(losses::get("mean_absolute_error")->get_config()["name"], "mean_absolute_error");
  EXPECT_THROW(losses::Huber(0.0), Error);
}

TEST(Loss, FocalCrossentropiesPerSample) {
  // Keras's formulas written out in doubles.
  const std::vector<float> y = {1, 0, 0, 1}, p = {0.9f, 0.3f, 0.2f, 0.6f};
  auto binary = [&](int i, double gamma, bool balance, double alpha) {
    double sum = 0;
    for (int j = 0; j < 2; ++j) {
      double t = y[size_t(2 * i + j)], q = p[size_t(2 * i + j)];
      double bce = -(t * std::log(q) + (1 - t) * std::log(1 - q));
      double p_t = t * q + (1 - t) * (1 - q);
      double focal = std::pow(1 - p_t, gamma) * bce;
      sum += balance ? (t * alpha + (1 - t) * (1 - alpha)) * focal : focal;
    }
    return sum / 2;
  };
  Tensor yt = Tensor::from_vector(Shape{2, 2}, y), yp = Tensor::from_vector(Shape{2, 2}, p);
  std::vector<float> logits(p.size());
  for (size_t i = 0; i < p.size(); ++i) logits[i] = float(std::log(p[i] / (1 - p[i])));
  for (const std::string backend : {"reference", "cpu"}) {
    auto plain = run_loss(losses::get("binary_focal_crossentropy"), yt, yp, backend);
    auto balanced = run_loss(losses::BinaryFocalCrossentropy(
                                 {.apply_class_balancing = true, .alpha = 0.4, .gamma = 1.5}),
                             yt, yp, backend);
    auto from_logits = run_loss(losses::BinaryFocalCrossentropy({.from_logits = true}), yt,
                                Tensor::from_vector(Shape{2, 2}, logits), backend);
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(plain[size_t(i)], binary(i, 2.0, false, 0), 1e-6) << backend;
      EXPECT_NEAR(balanced[size_t(i)], binary(i, 1.5, true, 0.4), 1e-6) << backend;
      EXPECT_NEAR(from_logits[size_t(i)], binary(i, 2.0, false, 0), 1e-5) << backend;
    }
  }
  // Categorical: the second row sums to 0.8 and is normalised first.
  const std::vector<float> onehot = {0, 1, 0, 1, 0, 0},
                           probs = {0.2f, 0.5f, 0.3f, 0.6f, 0.1f, 0.1f};
  auto categorical = [&](int i, double alpha, double gamma) {
    double total = 0, loss = 0;
    for (int j = 0; j < 3; ++j) total += probs[size_t(3 * i + j)];
    for (int j = 0; j < 3; ++j) {
      double q = probs[size_t(3 * i + j)] / total;
      loss += -alpha * std::pow(1 - q, gamma) * onehot[size_t(3 * i + j)] * std::log(q);
    }
    return loss;
  };
  for (const std::string backend : {"reference", "cpu"}) {
    auto got = run_loss(losses::get("CategoricalFocalCrossentropy"),
                        Tensor::from_vector(Shape{2, 3}, onehot),
                        Tensor::from_vector(Shape{2, 3}, probs), backend);
    auto g3 = run_loss(losses::CategoricalFocalCrossentropy({.alpha = 0.5, .gamma = 3.0}),
                       Tensor::from_vector(Shape{2, 3}, onehot),
                       Tensor::from_vector(Shape{2, 3}, probs), backend);
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(got[size_t(i)], categorical(i, 0.25, 2.0), 1e-6) << backend;
      EXPECT_NEAR(g3[size_t(i)], categorical(i, 0.5, 3.0), 1e-6) << backend;
    }
  }
  EXPECT_EQ(losses::get("binary_focal_crossentropy")->get_config()["name"],
            "binary_focal_crossentropy");
  EXPECT_THROW(losses::BinaryFocalCrossentropy({.gamma = -1}), Error);
}
