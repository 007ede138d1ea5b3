// Model parallelism through XLA's SPMD partitioner (lockstep/distribute/distribution.h) on 4
// devices of the PJRT CPU plugin: the sharding annotations' text, a train step partitioned over
// a 2x2 (batch, model) mesh against the same step on one device, each device holding 1/N of a
// sharded variable (read from its buffers), and Model::fit under ModelParallel against fit on
// one device for 20 steps, then saved and loaded back.
#include <gtest/gtest.h>

#ifndef LOCKSTEP_XLA
TEST(XlaMesh, NeedsTheXlaBuild) { GTEST_SKIP() << "built without LOCKSTEP_XLA"; }
#else
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "../../examples/gpt_model.h"
#include "backends/xla/sharding_lowering.h"
#include "backends/xla/xla_connect.h"
#include "backends/xla/xla_program.h"
#include "backends/xla_train_graphs.h"
#include "lockstep/core/rng.h"
#include "lockstep/distribute/distribution.h"
#include "lockstep/distribute/xla_strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ld = lockstep::distribution;
namespace fs = std::filesystem;

namespace {

// The process's connection: the CPU plugin with 4 devices, or why there is none.
const distribute::XlaClusterResolver* four_devices(std::string* why_not) {
  static std::string error;
  static const std::unique_ptr<distribute::XlaClusterResolver> r = [] {
    std::unique_ptr<distribute::XlaClusterResolver> out;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    error = "sanitizer build: the PJRT plugin is not instrumented (the release suite runs this)";
    return out;
#endif
    try {
      out = std::make_unique<distribute::XlaClusterResolver>(
          distribute::XlaClusterResolver::connect("cpu", 4, false));
    } catch (const Error& e) {
      error = e.what();
    }
    return out;
  }();
  *why_not = error;
  return r.get();
}

#define FOUR_DEVICES_OR_SKIP() \
  std::string why_not;         \
  if (!four_devices(&why_not)) \
  GTEST_SKIP() << "no PJRT CPU plugin (run scripts/setup_xla.sh): " << why_not

// Removes the process's distribution when a test ends, passed or not.
struct DistributionGuard {
  explicit DistributionGuard(const ld::Distribution& d) { ld::set_distribution(d); }
  ~DistributionGuard() { ld::clear_distribution(); }
};

// Kernels' columns and biases split over "model", the batch over "batch", on a 2x2 mesh.
ld::LayoutMap dense_rules() {
  ld::LayoutMap map(ld::DeviceMesh({2, 2}, {"batch", "model"}));
  map["dense.*kernel"] = {std::nullopt, "model"};
  map["dense.*bias"] = {"model"};
  return map;
}

// The largest |a - b| / (1 + |b|), the largest |a - b| / |b| over elements with |b| > 1e-3, and
// the largest ||a - b|| / ||b|| over the tensors of RMS > 1e-3 (the norm-wise relative
// difference; a tensor that stays near zero, as the keys' bias, whose gradient softmax cancels,
// is left to the first figure).
struct Difference {
  double mixed = 0, relative = 0, norm = 0;
};
Difference difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  Difference d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    const auto x = a[k].to_vector(), y = b[k].to_vector();
    EXPECT_EQ(x.size(), y.size());
    double diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      const double diff = std::fabs(double(x[i]) - y[i]);
      d.mixed = std::max(d.mixed, diff / (1 + std::fabs(double(y[i]))));
      if (std::fabs(y[i]) > 1e-3) d.relative = std::max(d.relative, diff / std::fabs(y[i]));
      diff2 += diff * diff, norm2 += double(y[i]) * y[i];
    }
    if (norm2 > 1e-6 * double(y.size())) d.norm = std::max(d.norm, std::sqrt(diff2 / norm2));
  }
  return d;
}

Model mlp() {
  using namespace layers;
  return Sequential({Input({16}), Dense(32, {.activation = "relu"}),
                     Dense(16, {.activation = "relu"}), Dense(4)});
}

// `rows` rows of 16 features in [-1, 1) and a 4-class label from three of them.
std::pair<Tensor, Tensor> mlp_data(int64_t rows, uint64_t seed) {
  Philox rng(seed);
  Tensor x = Tensor::zeros(Shape{rows, 16});
  Tensor y = Tensor::zeros(Shape{rows}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(-1.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data<float>() + 16 * r;
    y.data<int32_t>()[r] = (row[0] > 0 ? 1 : 0) + (row[1] + row[2] > 0 ? 2 : 0);
  }
  return {x, y};
}

CompileConfig adam_on_xla() {
  return {.optimizer = optimizers::Adam(1e-2),
          .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
          .metrics = {"accuracy"},
          .backend = "xla"};
}

}  // namespace

TEST(XlaMesh, GspmdShardingsListEachTilesPartition) {
  ld::DeviceMesh mesh({2, 2}, {"batch", "model"});
  const MeshShape& m = mesh.spec();
  EXPECT_EQ(xla::gspmd_sharding(m, {"", ""}), "{replicated}");
  EXPECT_EQ(xla::gspmd_sharding(m, {}), "{replicated}");
  // Split over both axes: tile (i, j) is partition 2i + j.
  EXPECT_EQ(xla::gspmd_sharding(m, {"batch", "model"}), "{devices=[2,2]0,1,2,3}");
  EXPECT_EQ(xla::gspmd_sharding(m, {"model", "batch"}), "{devices=[2,2]0,2,1,3}");
  // Over one axis, copies along the other: the last tile dim lists the copies.
  EXPECT_EQ(xla::gspmd_sharding(m, {"", "model"}),
            "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(xla::gspmd_sharding(m, {"batch", ""}),
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(xla::shardy_mesh(m), "sdy.mesh @mesh = <[\"batch\"=2, \"model\"=2]>\n");
  EXPECT_EQ(xla::shardy_sharding({"", "model"}), "#sdy.sharding<@mesh, [{}, {\"model\"}]>");
}

// The MLP train step of xla_train_graphs.h (Adam; its slots renamed as Lockstep's optimizer
// names them, so they take their kernel's layout) on one device and partitioned over the 2x2
// mesh: the same losses and weights, and each device holds half of each kernel and its slots.
TEST(XlaMesh, APartitionedTrainStepMatchesOneDeviceAndHoldsAHalfPerDevice) {
  FOUR_DEVICES_OR_SKIP();
  using xla_test::batch;
  using xla_test::Step;
  std::shared_ptr<xla::PjrtClient> client = xla::connected_client();
  ASSERT_TRUE(client);
  ld::LayoutMap map(ld::DeviceMesh({2, 2}, {"batch", "model"}));
  map["kernel"] = {std::nullopt, "model"};
  map["bias"] = {"model"};
  const auto plan = ld::ModelParallel(map, "batch").plan();
  auto build = [] {
    xla_test::Step s = xla_test::build_step(xla_test::Model::mlp, xla_test::Optimizer::adam);
    for (size_t i = 0; i < s.weights.size(); ++i) {
      s.slots[2 * i]->name = "adam/" + s.weights[i]->name + "/m";
      s.slots[2 * i + 1]->name = "adam/" + s.weights[i]->name + "/v";
    }
    return s;
  };
  Step one = build(), mesh = build();
  xla::XlaProgram single(client, one.g, one.feeds, {one.loss});
  xla::XlaProgram spmd(client, mesh.g, mesh.feeds, {mesh.loss}, {.sharding = plan});
  ASSERT_TRUE(spmd.partitioned());
  EXPECT_EQ(spmd.num_partitions(), 4);
  EXPECT_NE(spmd.lowered().mlir.find("mhlo.num_partitions = 4"), std::string::npos);
  EXPECT_NE(spmd.lowered().mlir.find("#sdy.sharding<@mesh, [{}, {\"model\"}]>"), std::string::npos);
  for (int step = 0; step < 5; ++step) {
    const std::vector<Tensor> in = batch(xla_test::Model::mlp, step + 1);  // (Adam's t from 1)
    const float a = single.run(in)[0].item(), b = spmd.run(in)[0].item();
    EXPECT_NEAR(b, a, 1e-5 * (1 + std::fabs(a))) << "step " << step;
  }
  single.sync_variables_to_host();
  spmd.sync_variables_to_host();
  std::vector<Tensor> w1, w2;
  for (size_t i = 0; i < one.weights.size(); ++i) {
    w1.push_back(one.weights[i]->value);
    w2.push_back(mesh.weights[i]->value);
  }
  for (size_t i = 0; i < one.slots.size(); ++i) {
    w1.push_back(one.slots[i]->value);
    w2.push_back(mesh.slots[i]->value);
  }
  const Difference d = difference(w2, w1);
  std::printf(
      "[ measured ] partitioned MLP step vs one device, 5 Adam steps: weights and slots "
      "within %.3g (relative + absolute)\n",
      d.mixed);
  EXPECT_LE(d.mixed, 1e-5);
  // d1/kernel [8, 16] split over "model" (2): each of the 4 devices holds 8 x 8 floats.
  const Variable* kernel = mesh.weights[0].get();
  ASSERT_EQ(kernel->name, "d1/kernel");
  const int64_t whole = kernel->value.numel() * 4;
  for (const Variable* v :
       std::vector<const Variable*>{kernel, mesh.slots[0].get(), mesh.slots[1].get()}) {
    const std::vector<int64_t> bytes = spmd.variable_device_bytes(v);
    ASSERT_EQ(bytes.size(), 4u) << v->name;
    for (int64_t b : bytes) EXPECT_EQ(b, whole / 2) << v->name;
  }
  for (int64_t b : single.variable_device_bytes(one.weights[0].get())) EXPECT_EQ(b, whole);
}

// A variable split over both axes: each device holds a quarter. Shardy's annotations (the
// default) and GSPMD's compile to the same product on the CPU plugin.
TEST(XlaMesh, AVariableSplitOverBothAxesTakesAQuarterPerDeviceInEitherSpelling) {
  FOUR_DEVICES_OR_SKIP();
  std::shared_ptr<xla::PjrtClient> client = xla::connected_client();
  ld::LayoutMap map(ld::DeviceMesh({2, 2}, {"batch", "model"}));
  map["^w$"] = {"batch", "model"};
  const auto plan = ld::ModelParallel(map).plan();
  Graph g;
  Philox rng(3);
  auto w = xla_test::variable("w", Shape{8, 12}, rng, 1.f);
  Value x = g.input({DType::f32, Shape{4, 8}}, "x");
  Value y = g.add(op::matmul, {x, g.variable(w)});
  xla::XlaProgram shardy(client, g, {x}, {y}, {.sharding = plan});
  xla::XlaProgram gspmd(client, g, {x}, {y}, {.sharding = plan, .shardy = false});
  xla::XlaProgram single(client, g, {x}, {y});
  const std::string& text = shardy.lowered().mlir;
  EXPECT_NE(text.find("sdy.mesh @mesh = <[\"batch\"=2, \"model\"=2]>"), std::string::npos) << text;
  EXPECT_NE(text.find("sdy.sharding = #sdy.sharding<@mesh, [{\"batch\"}, {\"model\"}]>"),
            std::string::npos)
      << text;
  EXPECT_NE(gspmd.lowered().mlir.find("mhlo.sharding = \"{devices=[2,2]0,1,2,3}\""),
            std::string::npos)
      << gspmd.lowered().mlir;
  Tensor in = Tensor::zeros(Shape{4, 8});
  for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] = rng.uniform(-1.f, 1.f);
  const Tensor a = single.run({in})[0];
  EXPECT_LE(difference({shardy.run({in})[0]}, {a}).mixed, 1e-6);
  EXPECT_LE(difference({gspmd.run({in})[0]}, {a}).mixed, 1e-6);
  for (const xla::XlaProgram* p : {&shardy, &gspmd}) {
    const std::vector<int64_t> bytes = p->variable_device_bytes(w.get());
    ASSERT_EQ(bytes.size(), 4u);
    for (int64_t b : bytes) EXPECT_EQ(b, 8 * 12 * 4 / 4);
  }
}

// Keras's output rules: "d1/output" -> ('batch', 'model') constrains the output of layer d1
// (its bias_add: the last node named d1) inside the module, in either spelling; the step still
// computes what one device does. A rule that does not fit the output names it.
TEST(XlaMesh, AnOutputRuleConstrainsTheLayersOutput) {
  FOUR_DEVICES_OR_SKIP();
  std::shared_ptr<xla::PjrtClient> client = xla::connected_client();
  ld::LayoutMap map(ld::DeviceMesh({2, 2}, {"batch", "model"}));
  map["kernel"] = {std::nullopt, "model"};
  map["d1/output"] = {"batch", "model"};
  const auto plan = ld::ModelParallel(map, "batch").plan();
  xla_test::Step one = xla_test::build_step(xla_test::Model::mlp, xla_test::Optimizer::sgd),
                 mesh = xla_test::build_step(xla_test::Model::mlp, xla_test::Optimizer::sgd),
                 gspmd = xla_test::build_step(xla_test::Model::mlp, xla_test::Optimizer::sgd);
  xla::XlaProgram single(client, one.g, one.feeds, {one.loss});
  xla::XlaProgram spmd(client, mesh.g, mesh.feeds, {mesh.loss}, {.sharding = plan});
  xla::XlaProgram spmd_gspmd(client, gspmd.g, gspmd.feeds, {gspmd.loss},
                             {.sharding = plan, .shardy = false});
  const std::string& text = spmd.lowered().mlir;
  EXPECT_NE(text.find("\"sdy.sharding_constraint\"(%"), std::string::npos) << text;
  EXPECT_NE(text.find("sharding = #sdy.sharding<@mesh, [{\"batch\"}, {\"model\"}]>} : "
                      "(tensor<6x16xf32>)"),
            std::string::npos)
      << text;
  EXPECT_NE(spmd_gspmd.lowered().mlir.find("call_target_name = \"Sharding\""), std::string::npos);
  for (int step = 1; step <= 3; ++step) {
    const std::vector<Tensor> in = xla_test::batch(xla_test::Model::mlp, step);
    const float a = single.run(in)[0].item();
    EXPECT_NEAR(spmd.run(in)[0].item(), a, 1e-5 * (1 + std::fabs(a)));
    EXPECT_NEAR(spmd_gspmd.run(in)[0].item(), a, 1e-5 * (1 + std::fabs(a)));
  }
  ld::LayoutMap odd(ld::DeviceMesh({1, 4}, {"batch", "model"}));
  odd["d2/output"] = {std::nullopt, "model"};  // d2's output is [6, 4]: fits; d1's [6, 16] too
  odd["d1/output"] = {"model", std::nullopt};  // 6 rows over 4: does not
  xla_test::Step bad = xla_test::build_step(xla_test::Model::mlp, xla_test::Optimizer::sgd);
  const std::string err = test_util::error_of([&] {
    xla::XlaProgram p(client, bad.g, bad.feeds, {bad.loss},
                      {.sharding = ld::ModelParallel(odd).plan()});
  });
  EXPECT_NE(err.find("the output of layer 'd1' of shape (6, 16): layout rule 'd1/output' -> "
                     "('model', None) splits its dim 0 (6) over mesh axis 'model' of size 4"),
            std::string::npos)
      << err;
}

// What the compiler made of the partitioned MLP step, read back from the CPU plugin: the
// shardings XLA settled on for @main's arguments and results (the partitioned module's
// spmd_parameters_shardings / spmd_output_sharding) are the annotated ones, the step runs
// collectives, and the compiled memory per device counts each argument's shard: the arguments
// of one device are the sum of their blocks' bytes, not of the whole tensors.
TEST(XlaMesh, TheCompilersShardingsAndPerDeviceMemoryAreReadBack) {
  FOUR_DEVICES_OR_SKIP();
  std::shared_ptr<xla::PjrtClient> client = xla::connected_client();
  ld::LayoutMap map(ld::DeviceMesh({2, 2}, {"batch", "model"}));
  map["kernel"] = {std::nullopt, "model"};
  map["bias"] = {"model"};
  xla_test::Step s = xla_test::build_step(xla_test::Model::mlp, xla_test::Optimizer::sgd);
  xla::XlaProgram spmd(client, s.g, s.feeds, {s.loss},
                       {.sharding = ld::ModelParallel(map, "batch").plan()});
  const xla::CompiledModule& m = spmd.compiled_module();
  ASSERT_TRUE(m.read) << "format '" << m.format << "'";
  const std::string line = spmd.chosen_layouts_line();
  std::printf("[ measured ] %s (%d instructions, format %s)\n", line.c_str(), m.instructions,
              m.format.c_str());
  const size_t args = spmd.lowered().arguments.size(), results = spmd.lowered().results.size();
  EXPECT_NE(line.find("kept " + std::to_string(args) + " of " + std::to_string(args) +
                      " argument and " + std::to_string(results) + " of " +
                      std::to_string(results) + " result layouts as annotated"),
            std::string::npos)
      << line;
  EXPECT_FALSE(m.collectives.empty()) << line;  // the kernels' split sums meet
  ASSERT_TRUE(spmd.memory_stats()) << "the CPU plugin gives compiled memory stats";
  int64_t block_bytes = 0;
  for (size_t i = 0; i < args; ++i) {
    const xla::LoweredArgument& a = spmd.lowered().arguments[i];
    block_bytes +=
        shard_shape(Shape(a.type.dims), *spmd.lowered().mesh, spmd.lowered().argument_layouts[i])
            .numel() *
        int64_t(dtype_size(xla::dtype_of_elem(a.type.elem)));
  }
  const auto& stats = *spmd.memory_stats();
  std::printf(
      "[ measured ] per device: arguments %lld B (their blocks: %lld B), outputs %lld B, "
      "aliased %lld B, temporaries %lld B, peak %lld B\n",
      (long long)stats.arguments, (long long)block_bytes, (long long)stats.outputs,
      (long long)stats.aliased, (long long)stats.temporaries, (long long)stats.peak);
  EXPECT_EQ(stats.arguments, block_bytes);
}

// Model::fit on backend "xla" under ModelParallel on the 2x2 mesh against fit on one device,
// from the same weights: 320 rows, batch 16, one epoch (20 steps), Adam.
TEST(XlaMesh, DenseMlpUnderModelParallelMatchesOneDeviceFor20Steps) {
  FOUR_DEVICES_OR_SKIP();
  auto build = mlp;
  auto [x, y] = mlp_data(320, 11);
  set_random_seed(5);
  const std::vector<Tensor> initial = build().get_weights();
  auto config = adam_on_xla;
  const FitConfig fit{.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false};
  Model single = build();
  single.set_weights(initial);
  single.compile(config());
  const History h1 = single.fit(x, y, fit);
  const std::vector<Tensor> w1 = single.get_weights();

  const fs::path dir = test_util::temp_dir("xla_mesh", true);
  std::vector<Tensor> w2;
  History h2;
  {
    DistributionGuard guard(ld::ModelParallel(dense_rules(), "batch"));
    Model sharded = build();
    sharded.set_weights(initial);
    sharded.compile(config());
    h2 = sharded.fit(x, y, fit);
    w2 = sharded.get_weights();
    sharded.save((dir / "model_parallel.keras").string());
    // summary(): the weights, the optimizer's state and the compiled step per device. Every
    // kernel and bias is split in two, so Adam's m and v take half of theirs per device (plus
    // the step count and learning rate, whole: 4 bytes each).
    std::ostringstream os;
    sharded.summary(os);
    const std::string text = os.str();
    std::printf("%s", text.c_str());
    int64_t trainable = 0;
    for (const VariablePtr& w : sharded.trainable_weights()) trainable += w->value.nbytes();
    char want[128];
    std::snprintf(want, sizeof want, " Optimizer state per device: %.2f KB of %.2f KB",
                  (trainable + 8) / 1024.0, (2 * trainable + 8) / 1024.0);
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
    EXPECT_NE(text.find(" Per device (4 devices, as compiled): peak "), std::string::npos) << text;
  }
  const Difference d = difference(w2, w1);
  std::printf(
      "[ measured ] ModelParallel 2x2 vs one device, 20 Adam steps: weights within %.3g "
      "relative (|b| > 1e-3), %.3g relative + absolute; loss %.8f vs %.8f\n",
      d.relative, d.mixed, h2.history.at("loss")[0], h1.history.at("loss")[0]);
  EXPECT_LE(d.mixed, 1e-5);
  EXPECT_LE(d.relative, 1e-5);
  EXPECT_GT(difference(w1, initial).mixed, 1e-2);  // it trained
  EXPECT_NEAR(h2.history.at("loss")[0], h1.history.at("loss")[0],
              1e-5 * std::fabs(h1.history.at("loss")[0]));
  EXPECT_EQ(h2.history.at("accuracy")[0], h1.history.at("accuracy")[0]);
  // Saved under ModelParallel: the gathered weights, which load on one device as they were.
  Model loaded = load_model((dir / "model_parallel.keras").string(), false);
  const std::vector<Tensor> w3 = loaded.get_weights();
  EXPECT_EQ(difference(w3, w2).mixed, 0.0);
}

// The small GPT of examples/gpt_model.h ("tiny": 2 pre-norm TransformerDecoders of 32 with 2
// heads, T = 16, next-byte logits over 256) under ModelParallel on the 2x2 mesh with
// gpt_layout_map's rules (query, key, value and the output projection split on their heads, the
// feed-forward kernels on the model axis): 20 Adam steps against one device, from the same
// weights.
Model tiny_gpt() {
  reset_layer_names();  // the same paths for every build (the rules and the file name them)
  return gpt_model(gpt_preset("tiny"));
}

TEST(XlaMesh, SmallGptUnderModelParallelMatchesOneDeviceFor20Steps) {
  FOUR_DEVICES_OR_SKIP();
  const std::string text = test_util::read_text_file(std::string(tools::kFortunesDir) + "/science");
  const auto [x, y] = byte_windows(text, 160, 16, true, 7);
  set_random_seed(21);
  const std::vector<Tensor> initial = tiny_gpt().get_weights();
  auto config = [] {
    return CompileConfig{.optimizer = optimizers::Adam(3e-3),
                         .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                         .backend = "xla"};
  };
  const FitConfig fit{.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false};
  std::vector<double> want, got;
  auto record = [](std::vector<double>* l) {
    return callbacks::LambdaCallback(
        LambdaHooks{.on_train_batch_end = [l](int, const Logs& g) { l->push_back(g.at("loss")); }});
  };
  Model single = tiny_gpt();
  single.set_weights(initial);
  single.compile(config());
  FitConfig f1 = fit;
  f1.callbacks = {record(&want)};
  single.fit(x, y, f1);
  std::vector<Tensor> w2;
  {
    DistributionGuard guard(
        ld::ModelParallel(gpt_layout_map(ld::DeviceMesh({2, 2}, {"batch", "model"})), "batch"));
    Model sharded = tiny_gpt();
    sharded.set_weights(initial);
    sharded.compile(config());
    FitConfig f2 = fit;
    f2.callbacks = {record(&got)};
    sharded.fit(x, y, f2);
    w2 = sharded.get_weights();
  }
  ASSERT_EQ(want.size(), 20u);
  ASSERT_EQ(got.size(), 20u);
  double worst_loss = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst_loss = std::max(worst_loss, std::fabs(got[i] - want[i]) / std::fabs(want[i]));
  const Difference d = difference(w2, single.get_weights());
  std::printf(
      "[ measured ] GPT tiny, ModelParallel 2x2 vs one device, 20 Adam steps: losses %.4f -> "
      "%.4f, worst loss %.3g relative; weights within %.3g relative (per tensor, norm-wise), "
      "%.3g relative + absolute, %.3g relative per element (|b| > 1e-3)\n",
      want.front(), want.back(), worst_loss, d.norm, d.mixed, d.relative);
  EXPECT_LE(worst_loss, 1e-5);
  EXPECT_LE(d.norm, 1e-5);
  EXPECT_LE(d.mixed, 1e-5);
  // (Per element, a weight near 1e-3 whose gradient is near zero (the keys' kernels: softmax
  // cancels most of it) moves by Adam's g / sqrt(v), which turns the partitioned sums' float
  // rounding into a few 1e-4 of that weight; the norm-wise figure above is the 1e-5 one.)
  EXPECT_LE(d.relative, 1e-3);
  EXPECT_LT(want.back(), want.front() - 0.5);  // it learns (from ln 256 = 5.5)
}

// A .keras file written under ModelParallel on the 2x2 mesh (weights and Adam's state, gathered)
// loads under ModelParallel on a 1x4 mesh (every kernel split 4 ways) and on one device: the
// weights come back bit for bit, and 10 more steps on each agree with 10 more on the 2x2 mesh.
TEST(XlaMesh, AFileSavedOn2x2ResumesOn1x4AndOnOneDevice) {
  FOUR_DEVICES_OR_SKIP();
  auto [x, y] = mlp_data(320, 13);
  const Tensor x1 = x.slice(0, 160), y1 = y.slice(0, 160), x2 = x.slice(160, 320),
               y2 = y.slice(160, 320);
  const FitConfig fit{.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false};
  const fs::path file = test_util::temp_dir("xla_mesh", true) / "on_2x2.keras";
  std::vector<Tensor> saved, on_2x2;
  {
    DistributionGuard guard(ld::ModelParallel(dense_rules(), "batch"));
    set_random_seed(8);
    Model m = mlp();
    m.compile(adam_on_xla());
    m.fit(x1, y1, fit);
    m.save(file.string());
    saved = m.get_weights();
    m.fit(x2, y2, fit);
    on_2x2 = m.get_weights();
  }
  auto resume = [&](const char* where) {
    Model m = load_model(file.string(), true);
    CompileConfig c = m.compile_config();
    c.backend = "xla";
    m.compile(c);
    const std::vector<Tensor> loaded = m.get_weights();
    EXPECT_EQ(difference(loaded, saved).mixed, 0.0) << where;  // bit for bit
    m.fit(x2, y2, fit);
    const Difference d = difference(m.get_weights(), on_2x2);
    std::printf("[ measured ] resumed on %s: 10 steps later within %.3g of the 2x2 run\n", where,
                d.mixed);
    EXPECT_LE(d.mixed, 1e-5) << where;
  };
  {
    ld::LayoutMap map(ld::DeviceMesh({1, 4}, {"batch", "model"}));
    map["dense.*kernel"] = {std::nullopt, "model"};
    map["dense.*bias"] = {"model"};
    DistributionGuard guard(ld::ModelParallel(map, "batch"));
    resume("a 1x4 mesh");
  }
  resume("one device");
}

// DataParallel over 4 devices: every variable whole on each, the batch split 4 ways.
TEST(XlaMesh, DataParallelOnFourDevicesMatchesOneDevice) {
  FOUR_DEVICES_OR_SKIP();
  auto [x, y] = mlp_data(128, 17);
  set_random_seed(9);
  const std::vector<Tensor> initial = mlp().get_weights();
  const FitConfig fit{.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false};
  Model one = mlp();
  one.set_weights(initial);
  one.compile(adam_on_xla());
  one.fit(x, y, fit);
  DistributionGuard guard(ld::DataParallel({"xla:0", "xla:1", "xla:2", "xla:3"}));
  Model four = mlp();
  four.set_weights(initial);
  four.compile(adam_on_xla());
  four.fit(x, y, fit);
  EXPECT_LE(difference(four.get_weights(), one.get_weights()).mixed, 1e-5);
}

// Layout errors stop Model::compile's first program before XLA compiles anything.
TEST(XlaMesh, ALayoutThatDoesNotDivideFailsTheFirstStepNamingIt) {
  FOUR_DEVICES_OR_SKIP();
  using namespace layers;
  ld::LayoutMap map(ld::DeviceMesh({1, 4}, {"batch", "model"}));
  map["dense.*kernel"] = {std::nullopt, "model"};
  DistributionGuard guard(ld::ModelParallel(map));
  Model m = Sequential({Input({8}), Dense(6)});
  m.compile({.optimizer = optimizers::SGD(0.1),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .backend = "xla"});
  const std::string err = test_util::error_of([&] {
    m.fit(Tensor::zeros(Shape{8, 8}), Tensor::zeros(Shape{8}, DType::i32),
          {.batch_size = 8, .epochs = 1, .verbose = 0});
  });
  EXPECT_NE(err.find("its dim 1 (6) over mesh axis 'model' of size 4"), std::string::npos) << err;
  EXPECT_NE(err.find("layout rule 'dense.*kernel'"), std::string::npos) << err;
}

#endif  // LOCKSTEP_XLA
