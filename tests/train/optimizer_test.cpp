// Optimizers: three compiled steps against hand-written Keras 3 update loops, clipping,
// schedules, slots and config.
#include "lockstep/optimizers/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/graph/executable.h"

using namespace lockstep;

namespace {

VariablePtr make_var(const std::string& name, const std::vector<float>& v, bool trainable = true) {
  return std::make_shared<Variable>(
      Variable{name, Tensor::from_vector(Shape{int64_t(v.size())}, v), trainable});
}

// Applies `opt` to one variable with fed gradients, one compiled step per entry of `grads`.
std::vector<float> run_opt(const OptimizerPtr& opt, const std::vector<float>& w0,
                           const std::vector<std::vector<float>>& grads,
                           const std::string& backend = "reference") {
  auto var = make_var("dense/kernel", w0);
  Graph g;
  Value gin = g.input({DType::f32, Shape{int64_t(w0.size())}}, "grad");
  opt->apply(g, {gin}, {var});
  CompileOptions o;
  o.backend = backend;
  Executable exe(g, {gin}, {}, o);
  for (auto& gr : grads) {
    exe.input(0).copy_from(Tensor::from_vector(Shape{int64_t(gr.size())}, gr));
    exe.run();
  }
  EXPECT_FLOAT_EQ(opt->iterations()->value.item(), float(grads.size()));
  return var->value.to_vector();
}

const std::vector<float> kW0 = {1.f, -2.f, 0.5f, 3.f};
const std::vector<std::vector<float>> kGrads = {
    {0.5f, -1.f, 0.25f, 2.f}, {0.1f, 0.3f, -0.7f, 1.f}, {-0.4f, 0.2f, 0.9f, -3.f}};

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "element " << i;
}

std::vector<double> ref_sgd(double lr, double mom, bool nesterov, double wd) {
  std::vector<double> w(kW0.begin(), kW0.end()), m(w.size(), 0);
  for (auto& g : kGrads)
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] -= w[i] * wd * lr;
      if (mom == 0) {
        w[i] -= lr * g[i];
        continue;
      }
      m[i] = mom * m[i] - lr * g[i];
      w[i] += nesterov ? mom * m[i] - lr * g[i] : m[i];
    }
  return w;
}

std::vector<double> ref_adam(double lr, double b1, double b2, double eps, double wd) {
  std::vector<double> w(kW0.begin(), kW0.end()), m(w.size(), 0), v(w.size(), 0);
  int t = 0;
  for (auto& g : kGrads) {
    ++t;
    double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] -= w[i] * wd * lr;
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
  return w;
}

std::vector<double> ref_rmsprop(double lr, double rho, double mom, double eps) {
  std::vector<double> w(kW0.begin(), kW0.end()), ms(w.size(), 0), mo(w.size(), 0);
  for (auto& g : kGrads)
    for (size_t i = 0; i < w.size(); ++i) {
      ms[i] = rho * ms[i] + (1 - rho) * g[i] * g[i];
      double inc = lr * g[i] / std::sqrt(ms[i] + eps);
      if (mom > 0) {
        mo[i] = mom * mo[i] + inc;
        w[i] -= mo[i];
      } else {
        w[i] -= inc;
      }
    }
  return w;
}

}  // namespace

TEST(Optim, SGDMatchesReference) {
  for (std::string backend : {"reference", "cpu"}) {
    expect_close(run_opt(optimizers::SGD(0.1), kW0, kGrads, backend), ref_sgd(0.1, 0, false, 0));
    expect_close(run_opt(optimizers::SGD(0.1, 0.9), kW0, kGrads, backend),
                 ref_sgd(0.1, 0.9, false, 0));
    expect_close(run_opt(optimizers::SGD(0.1, 0.9, true), kW0, kGrads, backend),
                 ref_sgd(0.1, 0.9, true, 0));
    expect_close(
        run_opt(optimizers::SGD(0.1, 0.9, false, {.weight_decay = 0.01}), kW0, kGrads, backend),
        ref_sgd(0.1, 0.9, false, 0.01));
  }
  // Hand-computed: w = 1, g = 1, lr 0.1, momentum 0.9 -> 0.9, 0.71, 0.439 (nesterov 0.81, 0.539,
  // 0.1951).
  std::vector<std::vector<float>> ones(3, {1.f});
  expect_close(run_opt(optimizers::SGD(0.1, 0.9), {1.f}, ones), {0.439});
  expect_close(run_opt(optimizers::SGD(0.1, 0.9, true), {1.f}, ones), {0.1951});
}

TEST(Optim, AdamAndAdamWMatchReference) {
  for (std::string backend : {"reference", "cpu"}) {
    expect_close(run_opt(optimizers::Adam(0.01), kW0, kGrads, backend),
                 ref_adam(0.01, 0.9, 0.999, 1e-7, 0));
    expect_close(run_opt(optimizers::Adam(0.02, 0.8, 0.99, 1e-3), kW0, kGrads, backend),
                 ref_adam(0.02, 0.8, 0.99, 1e-3, 0));
    expect_close(run_opt(optimizers::AdamW(0.01), kW0, kGrads, backend),
                 ref_adam(0.01, 0.9, 0.999, 1e-7, 0.004));
  }
  // Hand-computed: the first Adam step moves each weight by ~lr * sign(g).
  auto w = run_opt(optimizers::Adam(0.001), {1.f}, {{0.5f}});
  EXPECT_NEAR(w[0], 0.999, 1e-6);
}

TEST(Optim, RMSpropMatchesReference) {
  for (std::string backend : {"reference", "cpu"}) {
    expect_close(run_opt(optimizers::RMSprop(0.01), kW0, kGrads, backend),
                 ref_rmsprop(0.01, 0.9, 0, 1e-7));
    expect_close(run_opt(optimizers::RMSprop(0.01, 0.8, 0.5), kW0, kGrads, backend),
                 ref_rmsprop(0.01, 0.8, 0.5, 1e-7));
  }
}

TEST(Optim, ParallelCpuKernelMatchesReferenceOnLargeVariable) {
  std::vector<float> w0(50000), g(50000);
  for (size_t i = 0; i < w0.size(); ++i) {
    w0[i] = std::sin(float(i));
    g[i] = std::cos(float(i) * 0.37f);
  }
  std::vector<std::vector<float>> grads(3, g);
  for (auto make :
       {+[] { return optimizers::Adam(0.01); }, +[] { return optimizers::SGD(0.1, 0.9); },
        +[] { return optimizers::RMSprop(0.01, 0.9, 0.5); }}) {
    auto a = run_opt(make(), w0, grads, "reference");
    auto b = run_opt(make(), w0, grads, "cpu");
    for (size_t i = 0; i < a.size(); i += 997) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  }
}

TEST(Optim, ScheduleDrivesLearningRate) {
  // lr = 0.1 * 0.5^step: steps use 0.1, 0.05, 0.025 -> w = 1 - 0.175.
  auto opt =
      optimizers::SGD(0.0, 0.0, false, {.schedule = schedules::ExponentialDecay(0.1, 1, 0.5)});
  EXPECT_DOUBLE_EQ(opt->current_learning_rate(), 0.1);
  std::vector<std::vector<float>> ones(3, {1.f});
  expect_close(run_opt(opt, {1.f}, ones), {0.825});
  EXPECT_NEAR(opt->current_learning_rate(), 0.0125, 1e-12);
  EXPECT_EQ(opt->get_config()["learning_rate"]["class_name"], "ExponentialDecay");
}

TEST(Optim, ClipnormAndGlobalClipnorm) {
  expect_close(run_opt(optimizers::SGD(1.0, 0, false, {.clipnorm = 1.0}), {0, 0}, {{3, 4}}),
               {-0.6, -0.8});
  expect_close(run_opt(optimizers::SGD(1.0, 0, false, {.clipnorm = 1.0}), {0, 0}, {{0.3f, 0.4f}}),
               {-0.3, -0.4});
  expect_close(run_opt(optimizers::SGD(1.0, 0, false, {.clipnorm = 1.0}), {0, 0}, {{0, 0}}),
               {0, 0});
  // Global norm over two variables: |(3, 4)| = 5 -> scale 0.2.
  auto a = make_var("a", {0}), b = make_var("b", {0});
  auto opt = optimizers::SGD(1.0, 0, false, {.global_clipnorm = 1.0});
  Graph g;
  Value ga = g.input({DType::f32, Shape{1}}, "ga"), gb = g.input({DType::f32, Shape{1}}, "gb");
  opt->apply(g, {ga, gb}, {a, b});
  Executable exe(g, {ga, gb}, {}, {.backend = "reference"});
  exe.input(0).copy_from(Tensor::from_vector(Shape{1}, {3}));
  exe.input(1).copy_from(Tensor::from_vector(Shape{1}, {4}));
  exe.run();
  EXPECT_NEAR(a->value.item(), -0.6f, 1e-6);
  EXPECT_NEAR(b->value.item(), -0.8f, 1e-6);
  EXPECT_THROW(optimizers::SGD(0.1, 0, false, {.clipnorm = 1, .global_clipnorm = 1}), Error);
}

TEST(Optim, SlotsNamesAndNonTrainableSkipped) {
  auto opt = optimizers::Adam();
  auto w = make_var("dense/kernel", {1, 2}), frozen = make_var("bn/moving_mean", {5, 5}, false);
  Graph g;
  Value gw = g.input({DType::f32, Shape{2}}, "gw"), gf = g.input({DType::f32, Shape{2}}, "gf");
  opt->apply(g, {gw, gf}, {w, frozen});
  auto vars = opt->variables();
  ASSERT_EQ(vars.size(), 3u);
  EXPECT_EQ(vars[0]->name, "adam/iterations");
  EXPECT_EQ(vars[1]->name, "adam/dense/kernel/m");
  EXPECT_EQ(vars[2]->name, "adam/dense/kernel/v");
  EXPECT_EQ(vars[1]->value.shape(), (Shape{2}));
  Executable exe(g, {gw}, {}, {.backend = "reference"});  // gf is unused: frozen var skipped
  exe.input(0).copy_from(Tensor::from_vector(Shape{2}, {1, 1}));
  exe.run();
  EXPECT_EQ(frozen->value.to_vector(), (std::vector<float>{5, 5}));
  EXPECT_LT(w->value.to_vector()[0], 1.f);
  // A second graph (e.g. another batch size) reuses the same slots.
  Graph g2;
  Value gw2 = g2.input({DType::f32, Shape{2}}, "gw");
  opt->apply(g2, {gw2}, {w});
  EXPECT_EQ(opt->variables().size(), 3u);
}

TEST(Optim, GetAndConfig) {
  EXPECT_EQ(optimizers::get("adam")->name(), "adam");
  EXPECT_EQ(optimizers::get("Adam")->name(), "adam");
  EXPECT_EQ(optimizers::get("sgd")->name(), "SGD");
  EXPECT_EQ(optimizers::get("adamw")->name(), "adamw");
  EXPECT_EQ(optimizers::get("rmsprop")->name(), "rmsprop");
  EXPECT_THROW(optimizers::get("adagrad_of_doom"), Error);
  auto c = optimizers::Adam(0.002)->get_config();
  EXPECT_EQ(c["name"], "adam");
  EXPECT_DOUBLE_EQ(c["learning_rate"].get<double>(), 0.002);
  EXPECT_DOUBLE_EQ(c["beta_1"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(c["beta_2"].get<double>(), 0.999);
  EXPECT_DOUBLE_EQ(c["epsilon"].get<double>(), 1e-7);
  EXPECT_TRUE(c["weight_decay"].is_null());
  EXPECT_TRUE(c["clipnorm"].is_null());
  EXPECT_DOUBLE_EQ(optimizers::AdamW()->get_config()["weight_decay"].get<double>(), 0.004);
  auto s = optimizers::SGD(0.1, 0.9, true)->get_config();
  EXPECT_EQ(s["nesterov"], true);
  EXPECT_DOUBLE_EQ(s["momentum"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(optimizers::RMSprop()->get_config()["rho"].get<double>(), 0.9);
}
