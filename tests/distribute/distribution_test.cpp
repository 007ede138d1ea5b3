// keras.distribution's objects (lockstep/distribute/distribution.h) without devices: LayoutMap
// lookups with Keras's semantics, each layout error's text, the unused-rule warning, optimizer
// slots taking their variable's layout, and distribute_tensor's blocks. The sharded programs
// themselves: tests/backends/xla_mesh_test.cpp.
#include "lockstep/distribute/distribution.h"

#include <gtest/gtest.h>

#include <memory>

#include "test_util.h"

using namespace lockstep;
namespace ld = lockstep::distribution;

namespace {

ld::DeviceMesh mesh_2x2() { return ld::DeviceMesh({2, 2}, {"batch", "model"}); }

std::shared_ptr<Variable> variable(const std::string& name, Shape shape) {
  return std::make_shared<Variable>(Variable{name, Tensor::zeros(shape), true});
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing \"" << part << "\" in: " << text;
}

}  // namespace

TEST(Distribution, LayoutMapLooksUpPathsAsKerasDoes) {
  ld::LayoutMap map(mesh_2x2());
  map["dense.*kernel"] = {std::nullopt, "model"};
  map["dense.*bias"] = {"model"};
  map["dense_1/kernel"] = {"model", std::nullopt};  // an exact key wins over the search
  // re.search: the rule may match anywhere in the path.
  EXPECT_EQ(map.get("dense/kernel")->str(), "(None, 'model')");
  EXPECT_EQ(map.get("block/dense_2/kernel")->str(), "(None, 'model')");
  EXPECT_EQ(map.get("dense/bias")->str(), "('model',)");
  EXPECT_EQ(map.get("dense_1/kernel")->str(), "('model', None)");
  EXPECT_FALSE(map.get("conv2d/kernel").has_value());
  EXPECT_EQ(map.matching_key("dense_3/bias"), "dense.*bias");
  ASSERT_TRUE(map.get("dense/kernel")->device_mesh());
  EXPECT_EQ(map.get("dense/kernel")->device_mesh()->shape(), (std::vector<int64_t>{2, 2}));

  ld::Distribution mp = ld::ModelParallel(map, "batch");
  EXPECT_EQ(mp.kind(), "ModelParallel");
  EXPECT_EQ(mp.get_variable_layout("conv2d/kernel", Shape{3, 3, 1, 8}).str(),
            "(None, None, None, None)");  // no rule: replicated
  EXPECT_EQ(mp.get_data_layout(Shape{64, 28, 28, 1}).str(), "('batch', None, None, None)");
  ld::Distribution dp = ld::DataParallel(std::vector<std::string>{"xla:0", "xla:1"});
  EXPECT_EQ(dp.device_mesh().axis_names(), std::vector<std::string>{"batch"});
  EXPECT_EQ(dp.get_variable_layout("dense/kernel", Shape{8, 4}).str(), "(None, None)");
}

TEST(Distribution, APathThatTwoRulesMatchNamesBoth) {
  ld::LayoutMap map(mesh_2x2());
  map["dense.*"] = {std::nullopt, "model"};
  map[".*kernel"] = {"model", std::nullopt};
  const std::string err = test_util::error_of([&] { map.get("dense/kernel"); });
  expect_has(err, "'dense/kernel' matches 2 layout rules, 'dense.*', '.*kernel'");
  expect_has(err, "anchor a rule with ^ and $");
}

TEST(Distribution, ADimThatDoesNotDivideNamesTheVariableTheRuleTheDimAndTheAxisSize) {
  ld::DeviceMesh mesh({1, 4}, {"batch", "model"});
  ld::LayoutMap map(mesh);
  map["dense.*kernel"] = {std::nullopt, "model"};
  ld::Distribution mp = ld::ModelParallel(map);
  auto kernel = variable("dense/kernel", Shape{8, 6});
  const std::string err = test_util::error_of([&] { mp.variable_layouts({kernel.get()}); });
  expect_has(err, "ModelParallel: variable 'dense/kernel' of shape (8, 6)");
  expect_has(err, "layout rule 'dense.*kernel' -> (None, 'model')");
  expect_has(err, "its dim 1 (6) over mesh axis 'model' of size 4, which does not divide it");
  expect_has(err, "make that dim a multiple of 4");
  // The other layout mistakes, each named.
  map["dense.*bias"] = {std::nullopt, "model"};  // rank 2 for a rank-1 bias
  auto bias = variable("dense/bias", Shape{8});
  const std::string rank =
      test_util::error_of([&] { ld::ModelParallel(map).variable_layouts({bias.get()}); });
  expect_has(rank, "variable 'dense/bias' of shape (8,)");
  expect_has(rank, "has 2 axes for its 1 dims");
  ld::LayoutMap typo(mesh);
  typo["kernel"] = {std::nullopt, "modle"};
  const std::string axis =
      test_util::error_of([&] { ld::ModelParallel(typo).variable_layouts({kernel.get()}); });
  expect_has(axis, "names mesh axis 'modle', which mesh (batch=1, model=4) does not have");
}

TEST(Distribution, ARuleThatMatchesNothingIsAWarningNamingIt) {
  ld::LayoutMap map(mesh_2x2());
  map["dense.*kernel"] = {std::nullopt, "model"};
  map["conv.*kernel"] = {std::nullopt, std::nullopt, std::nullopt, "model"};
  auto kernel = variable("dense/kernel", Shape{8, 4});
  ld::Distribution mp = ld::ModelParallel(map);
  EXPECT_EQ(mp.unused_rules({"dense/kernel"}), std::vector<std::string>{"conv.*kernel"});
  testing::internal::CaptureStderr();
  mp.variable_layouts({kernel.get()}, /*warn_unused=*/true);
  const std::string warned = testing::internal::GetCapturedStderr();
  expect_has(warned, "warning: ModelParallel: layout rule 'conv.*kernel' matches no variable");
  EXPECT_EQ(warned.find("'dense.*kernel' matches no"), std::string::npos) << warned;
}

TEST(Distribution, AnOptimizerSlotTakesItsVariablesLayout) {
  ld::LayoutMap map(mesh_2x2());
  map["^dense/kernel$"] = {std::nullopt, "model"};
  auto kernel = variable("dense/kernel", Shape{8, 4});
  auto m = variable("adam/dense/kernel/m", Shape{8, 4});
  auto iterations = variable("adam/iterations", Shape{});
  const auto layouts =
      ld::ModelParallel(map).variable_layouts({kernel.get(), m.get(), iterations.get()});
  EXPECT_EQ(layouts[0].str(), "(None, 'model')");
  EXPECT_EQ(layouts[1].str(),
            "(None, 'model')");  // the rule is anchored: matched through 'dense/kernel'
  EXPECT_EQ(layouts[2].str(), "()");
}

TEST(Distribution, DistributeTensorGivesEachDeviceItsBlock) {
  Tensor x = Tensor::zeros(Shape{4, 6});
  for (int i = 0; i < 24; ++i) x.data<float>()[i] = float(i);
  ld::TensorLayout layout({std::nullopt, "model"}, mesh_2x2());
  ld::DistributedTensor d = ld::distribute_tensor(x, layout);
  ASSERT_EQ(d.shards.size(), 4u);
  // Positions (batch, model): (0,0) (0,1) (1,0) (1,1); "model" splits the 6 columns in two.
  EXPECT_EQ(d.shards[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(d.shards[1].to_vector(),
            (std::vector<float>{3, 4, 5, 9, 10, 11, 15, 16, 17, 21, 22, 23}));
  EXPECT_EQ(d.shards[2].to_vector(), d.shards[0].to_vector());  // a copy along "batch"
  ld::DistributedTensor both =
      ld::distribute_tensor(x, ld::TensorLayout({"batch", "model"}, mesh_2x2()));
  EXPECT_EQ(both.shards[3].to_vector(), (std::vector<float>{15, 16, 17, 21, 22, 23}));
  // Placed back, the covering shards give the whole tensor.
  Tensor back = Tensor::zeros(Shape{4, 6});
  for (int64_t p : covering_positions(mesh_2x2().spec(), both.layout.dim_axes()))
    place_shard(back, both.shards[size_t(p)], mesh_2x2().spec(), both.layout.dim_axes(), p);
  EXPECT_EQ(back.to_vector(), x.to_vector());
  const std::string err = test_util::error_of([&] {
    ld::distribute_tensor(Tensor::zeros(Shape{3, 6}),
                          ld::TensorLayout({"batch", std::nullopt}, mesh_2x2()));
  });
  expect_has(err, "dim 0 (3) of a tensor (3, 6) does not divide by mesh axis 'batch' of size 2");
}

TEST(Distribution, MeshAndDistributionArgumentsAreChecked) {
  expect_has(test_util::error_of([] {
               ld::DeviceMesh({2, 2}, {"batch"});
             }),
             "shape has 2 axes but axis_names has 1 names");
  expect_has(test_util::error_of([] {
               ld::DeviceMesh({2}, {"batch"}, {"xla:0", "xla:0"});
             }),
             "device 'xla:0' is given twice");
  expect_has(test_util::error_of([] { ld::DeviceMesh({4}, {"batch"}, {"xla:0"}); }),
             "needs 4 devices, 1 given");
  ld::LayoutMap map(mesh_2x2());
  expect_has(test_util::error_of([&] { ld::ModelParallel(map, "data"); }),
             "batch_dim_name 'data' is not an axis of the mesh (its axes: 'batch', 'model')");
  expect_has(test_util::error_of([&] { map["dense[("] = {"model"}; }),
             "rule 'dense[(' is not a valid regular expression");
  EXPECT_EQ(ld::DeviceMesh({2}, {"batch"}, {"cpu:3", "xla:1"}).devices(),
            (std::vector<std::string>{"xla:3", "xla:1"}));
}

TEST(Distribution, SetDistributionInstallsThePlan) {
  EXPECT_FALSE(ld::distribution().has_value());
  ld::LayoutMap map(mesh_2x2());
  map["kernel"] = {std::nullopt, "model"};
  ld::set_distribution(ld::ModelParallel(map, "batch"));
  ASSERT_TRUE(ld::distribution().has_value());
  ASSERT_TRUE(sharding_plan());
  EXPECT_EQ(sharding_plan()->describe(),
            "ModelParallel on mesh (batch=2, model=2), batch split over 'batch'");
  ld::clear_distribution();
  EXPECT_FALSE(ld::distribution().has_value());
  EXPECT_FALSE(sharding_plan());
}
