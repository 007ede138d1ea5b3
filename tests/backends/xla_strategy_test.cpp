// XlaStrategy (lockstep/distribute/xla_strategy.h), issue 22's "replicas the way TPUStrategy
// keeps them": connect() to 2 devices of the PJRT CPU plugin, then fit the same model N steps
// with global batch B as 2 replicas x B/2 (one program, the gradient all_reduce inside it) and as
// 1 replica x B on backend "xla" without a strategy. The weights (BatchNormalization's moving
// statistics included), the epoch logs (loss, accuracy), evaluate's logs and predict's rows
// agree within kTol relative + absolute: the two runs differ only in the order of the batch's
// sums (each device sums its half, then the all_reduce adds the halves). The lowering of the
// variable writes (assign / assign_add's `aggregation`) is checked on its own.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaStrategy, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cmath>
#include <optional>

#include "backends/xla/lower_graph.h"
#include "backends/xla_dense_model.h"
#include "backends/xla_test_util.h"
#include "lockstep/core/rng.h"
#include "lockstep/distribute/distribution.h"
#include "lockstep/distribute/xla_strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ld = lockstep::distribute;

namespace {

constexpr double kTol = 1e-4;

// The process's connection: the CPU plugin with 2 devices (once; connect() keeps it), or why
// there is none.
const ld::XlaClusterResolver* two_devices(std::string* why_not) {
  static std::string error;
  static const std::unique_ptr<ld::XlaClusterResolver> r = [] {
    std::unique_ptr<ld::XlaClusterResolver> out;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    error = "sanitizer build: the PJRT plugin is not instrumented (the release suite runs this)";
    return out;
#endif
    try {
      out = std::make_unique<ld::XlaClusterResolver>(ld::XlaClusterResolver::connect("cpu", 2));
    } catch (const Error& e) {
      error = e.what();
    }
    return out;
  }();
  *why_not = error;
  return r.get();
}

#define TWO_DEVICES_OR_SKIP()                                     \
  std::string why_not;                                            \
  const ld::XlaClusterResolver* resolver = two_devices(&why_not); \
  if (!resolver) GTEST_SKIP() << "no PJRT CPU plugin (run scripts/setup_xla.sh): " << why_not

// The largest |a - b| / (1 + |b|) over every element of two weight lists (*where: which
// weight, when given).
double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                               size_t* where = nullptr) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    auto x = a[k].to_vector(), y = b[k].to_vector();
    EXPECT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      const double d = std::fabs(double(x[i]) - y[i]) / (1 + std::fabs(double(y[i])));
      if (d > worst && where) *where = k;
      worst = std::max(worst, d);
    }
  }
  return worst;
}

void expect_logs_close(const History& got, const History& want) {
  for (const auto& [key, values] : want.history) {
    if (key != "loss" && key != "accuracy") continue;
    ASSERT_TRUE(got.history.count(key)) << key;
    const std::vector<double>& g = got.history.at(key);
    ASSERT_EQ(g.size(), values.size()) << key;
    for (size_t e = 0; e < values.size(); ++e)
      EXPECT_NEAR(g[e], values[e], kTol * (1 + std::fabs(values[e]))) << key << " epoch " << e;
  }
}

struct Run {
  History history;
  Logs evaluated;
  Tensor predicted;  // predict on the training data (batch 32: the last batch split too)
  std::vector<Tensor> weights;
};

// Builds `build`'s model with the weights `initial`, compiles and fits it, inside `strategy`'s
// scope when given, else on backend "xla" alone; then evaluates on the training data. (The
// weights are set: a layer's initial weights are keyed by its name, which differs per build.)
Run train(Model (*build)(), const std::vector<Tensor>& initial, const ld::Strategy* strategy,
          const Tensor& x, const Tensor& y, int64_t batch, int epochs) {
  Run run;
  auto fit = [&](Model& m) {
    m.set_weights(initial);
    m.compile(xla_test::adam_config("xla"));
    run.history =
        m.fit(x, y, {.batch_size = batch, .epochs = epochs, .verbose = 0, .shuffle = false});
    run.evaluated = m.evaluate(x, y, {.batch_size = batch, .verbose = 0});
    run.predicted = m.predict(x, 32);
    run.weights = m.get_weights();
  };
  if (strategy) {
    auto scope = strategy->scope();
    Model m = build();
    fit(m);
  } else {
    Model m = build();
    fit(m);
  }
  return run;
}

void expect_replicas_match_one(Model (*build)(), const Tensor& x, const Tensor& y, int64_t batch,
                               int epochs, const ld::XlaClusterResolver& resolver,
                               const char* what) {
  ld::Strategy strategy = ld::TPUStrategy(resolver);
  ASSERT_EQ(strategy.num_replicas_in_sync(), 2);
  set_random_seed(21);
  const std::vector<Tensor> initial = build().get_weights();
  Run two = train(build, initial, &strategy, x, y, batch, epochs);
  Run one = train(build, initial, nullptr, x, y, batch, epochs);
  size_t where = 0;
  const double diff = max_relative_difference(two.weights, one.weights, &where);
  std::printf(
      "[ measured ] %s: 2 replicas vs 1, largest weight difference %.3g (weight %zu; "
      "relative + absolute; tolerance %.0e), loss %.7f vs %.7f\n",
      what, diff, where, kTol, two.history.history.at("loss").back(),
      one.history.history.at("loss").back());
  EXPECT_LE(diff, kTol);
  // They trained: the weights moved from the initial ones.
  EXPECT_GT(max_relative_difference(initial, one.weights), 1e-3);
  expect_logs_close(two.history, one.history);
  for (const char* key : {"loss", "accuracy"})
    EXPECT_NEAR(two.evaluated.at(key), one.evaluated.at(key),
                kTol * (1 + std::fabs(one.evaluated.at(key))))
        << "evaluate " << key;
  // predict: the replicas' rows come back in the batch's order.
  EXPECT_LE(max_relative_difference({two.predicted}, {one.predicted}), kTol);
}

// Conv - BatchNormalization(synchronized) - ReLU - conv - BN - ReLU, pooled, Dense head.
Model conv_bn_model() {
  using namespace layers;
  BatchNormOptions sync{.synchronized = true};
  return Sequential({Input({8, 8, 3}), Conv2D(6, 3, {.padding = "same", .use_bias = false}),
                     BatchNormalization(sync), ReLU(),
                     Conv2D(8, 3, {.strides = {2, 2}, .use_bias = false}), BatchNormalization(sync),
                     ReLU(), GlobalAveragePooling2D(), Dense(3)});
}

std::pair<Tensor, Tensor> image_data() {
  Philox rng(7);
  Tensor x = Tensor::zeros(Shape{64, 8, 8, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(0.f, 1.f);
  Tensor y = Tensor::zeros(Shape{64}, DType::i32);
  for (int32_t i = 0; i < 64; ++i) y.data<int32_t>()[i] = (i * 7 + i / 5) % 3;
  return {x, y};
}

}  // namespace

TEST(XlaStrategy, ConnectFindsTheCpuPluginByNameAndListsItsDevices) {
  TWO_DEVICES_OR_SKIP();
  EXPECT_EQ(resolver->num_devices(), 2);
  EXPECT_EQ(resolver->system().platform, "cpu");
  EXPECT_NE(resolver->system().plugin.find("xla_cpu_pjrt"), std::string::npos)
      << resolver->system().plugin;
  ld::Strategy strategy = ld::XlaStrategy(*resolver);
  EXPECT_EQ(strategy.name(), "XlaStrategy");
  EXPECT_EQ(strategy.num_replicas_in_sync(), 2);
  EXPECT_EQ(strategy.num_local_replicas(), 1);  // one host replica; the devices are in its program
  EXPECT_EQ(strategy.devices().size(), 2u);
  // Connecting again to the same devices is the same connection; to others is an error.
  EXPECT_EQ(ld::XlaClusterResolver::connect("cpu", 2, false).num_devices(), 2);
  const std::string err =
      test_util::error_of([] { ld::XlaClusterResolver::connect("cpu", 3, false); });
  EXPECT_NE(err.find("already connected"), std::string::npos) << err;
}

TEST(XlaStrategy, AMissingPluginIsAClearError) {
  const std::string err = test_util::error_of(
      [] { ld::XlaClusterResolver::connect("/nonexistent/libnothing_pjrt.so", 0, false); });
  EXPECT_NE(err.find("/nonexistent/libnothing_pjrt.so"), std::string::npos) << err;
}

TEST(XlaStrategy, DenseOnTwoDevicesMatchesOneReplica) {
  TWO_DEVICES_OR_SKIP();
  auto [x, y] = xla_test::dense_data(5);
  // 96 rows, batch 32: 3 steps an epoch, 2 epochs.
  expect_replicas_match_one(xla_test::dense_model, x, y, 32, 2, *resolver, "Dense");
}

TEST(XlaStrategy, ConvWithSynchronizedBatchNormOnTwoDevicesMatchesOneReplica) {
  TWO_DEVICES_OR_SKIP();
  auto [x, y] = image_data();
  // 64 rows, batch 16: 4 steps an epoch, 2 epochs.
  expect_replicas_match_one(conv_bn_model, x, y, 16, 2, *resolver, "Conv+BN");
}

TEST(XlaStrategy, ABatchThatDoesNotDivideAmongTheDevicesSaysWhatToDo) {
  TWO_DEVICES_OR_SKIP();
  ld::Strategy strategy = ld::XlaStrategy(*resolver);
  auto scope = strategy.scope();
  Model m = xla_test::dense_model();
  m.compile(xla_test::adam_config("xla"));
  auto [x, y] = xla_test::dense_data(5);
  std::string err =
      test_util::error_of([&] { m.fit(x, y, {.batch_size = 33, .epochs = 1, .verbose = 0}); });
  EXPECT_NE(err.find("batch_size 33"), std::string::npos) << err;
  EXPECT_NE(err.find("2 replicas in sync of XlaStrategy"), std::string::npos) << err;
  EXPECT_NE(err.find("use e.g. 34"), std::string::npos) << err;
  // A dataset batched by 33: the train step itself says so.
  Tensor xs = x.slice(0, 33).contiguous(), ys = y.slice(0, 33).contiguous();
  data::Dataset ds = data::Dataset::from_tensor_slices({xs, ys}).batch(33);
  err = test_util::error_of([&] { m.fit(ds, {.epochs = 1, .verbose = 0}); });
  EXPECT_NE(err.find("a training batch of 33 rows does not divide among the 2 devices"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("a multiple of 2 (32 or 34)"), std::string::npos) << err;
  // evaluate's odd last batch runs on one device.
  Logs logs = m.evaluate(x.slice(0, 35).contiguous(), y.slice(0, 35).contiguous(),
                         {.batch_size = 32, .verbose = 0});
  EXPECT_TRUE(std::isfinite(logs.at("loss")));
}

TEST(XlaStrategy, DropoutDrawsPerReplicaAndTrains) {
  TWO_DEVICES_OR_SKIP();
  ld::Strategy strategy = ld::XlaStrategy(*resolver);
  auto scope = strategy.scope();
  using namespace layers;
  Model m = Sequential({Input({8}), Dense(16, {.activation = "relu"}), Dropout(0.5), Dense(3)});
  m.compile(xla_test::adam_config("xla"));
  auto [x, y] = xla_test::dense_data(5);
  History h = m.fit(x, y, {.batch_size = 32, .epochs = 3, .verbose = 0, .shuffle = false});
  ASSERT_EQ(h.history.at("loss").size(), 3u);
  EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
  EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
}

// On one worker XlaStrategy is DataParallel on a one-axis mesh: its train step compiles as one
// SPMD program over the devices (the compile report says so, and that XLA kept the batch
// split and the weights whole), and a distribution set beside it is refused by name.
TEST(XlaStrategy, IsDataParallelOnAOneAxisMesh) {
  TWO_DEVICES_OR_SKIP();
  ld::Strategy strategy = ld::XlaStrategy(*resolver);
  auto [x, y] = xla_test::dense_data(5);
  {
    auto scope = strategy.scope();
    Model m = xla_test::dense_model();
    CompileConfig c = xla_test::adam_config("xla");
    c.verbose_compile = true;
    m.compile(c);
    testing::internal::CaptureStderr();
    m.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0});
    const std::string report = testing::internal::GetCapturedStderr();
    EXPECT_NE(report.find("SPMD over 2 devices (DataParallel on mesh (batch=2), batch split over "
                          "'batch')"),
              std::string::npos)
        << report;
    EXPECT_NE(report.find("result layouts as annotated; collectives per step: all-reduce"),
              std::string::npos)
        << report;
  }
  namespace dist = lockstep::distribution;
  dist::set_distribution(dist::DataParallel({"xla:0", "xla:1"}));
  auto scope = strategy.scope();
  Model m = xla_test::dense_model();
  m.compile(xla_test::adam_config("xla"));
  const std::string err =
      test_util::error_of([&] { m.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0}); });
  dist::clear_distribution();
  EXPECT_NE(err.find("a distribution is set (DataParallel on mesh (batch=2)"), std::string::npos)
      << err;
  EXPECT_NE(err.find("use one"), std::string::npos) << err;
}

// The writes of a replicated program: a metric total's increments are summed (all_reduce), a
// step counter's are not, and an undeclared write is refused, naming the node and the choices.
TEST(XlaStrategy, VariableWritesSayHowReplicasCombineThem) {
  auto lower = [](const std::string& aggregation) {
    Graph g;
    Value x = g.input({DType::f32, Shape{4}}, "x");
    auto total = std::make_shared<Variable>(Variable{"total", Tensor::zeros(Shape{4}), false});
    Attrs attrs;
    if (!aggregation.empty()) attrs = Attrs{{"aggregation", aggregation}};
    g.add_multi(op::assign_add, {g.variable(total), x}, attrs, "metric/update", total);
    return xla::lower_graph(g, {x}, {}, {.num_replicas = 2}).mlir;
  };
  EXPECT_NE(lower("sum").find("stablehlo.all_reduce"), std::string::npos);
  EXPECT_EQ(lower("same").find("stablehlo.all_reduce"), std::string::npos);
  const std::string err = test_util::error_of([&] { lower(""); });
  EXPECT_NE(err.find("assign_add node 'metric/update'"), std::string::npos) << err;
  EXPECT_NE(err.find("2 replicas"), std::string::npos) << err;
  EXPECT_NE(err.find("\"sum\""), std::string::npos) << err;
}

#endif
