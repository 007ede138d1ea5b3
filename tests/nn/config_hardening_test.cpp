// Model configs that used to crash or silently build the wrong model (issue 25, items 2, 4, 9):
// out-of-range node / tensor indices in a functional config's output_layers (-1, 4294967295),
// duplicate layer names (Keras rejects them; Lockstep dropped a Dense layer), and models
// nested 2,000 deep (quadratic memory, then std::bad_alloc). Each is a lockstep::Error naming
// the model, the reference or the limit.
#include <gtest/gtest.h>

#include "io/hostile_files_util.h"  // in_child
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using test_util::error_of;

using lockstep::test_util::expect_has;

namespace {

// A functional model: Input "x" (4 features) -> Dense "dense" (2 units); `outputs` is the
// output_layers value.
std::string functional_json(const std::string& outputs, const std::string& second_name = "") {
  std::string layers = R"([
      {"class_name": "InputLayer", "name": "x", "config": {"batch_shape": [null, 4], "name": "x"},
       "inbound_nodes": []},
      {"class_name": "Dense", "name": "dense", "config": {"name": "dense", "units": 2},
       "inbound_nodes": [[["x", 0, 0]]]})";
  if (!second_name.empty())
    layers += R"(,
      {"class_name": "Dense", "name": ")" +
              second_name + R"(", "config": {"name": ")" + second_name +
              R"(", "units": 3}, "inbound_nodes": [[["x", 0, 0]]]})";
  return R"({"class_name": "Functional", "config": {"name": "f", "layers": )" + layers +
         R"(], "input_layers": [["x", 0, 0]], "output_layers": )" + outputs + "}}";
}

// Sequential models nested `depth` deep around one Dense layer.
std::string nested_sequential(int depth) {
  std::string inner = R"({"class_name": "Dense", "config": {"name": "d", "units": 1}})";
  for (int i = 0; i < depth; ++i)
    inner = R"({"class_name": "Sequential", "config": {"name": "s)" + std::to_string(i) +
            R"(", "layers": [{"class_name": "InputLayer", "config": {"batch_shape": [null, 1],
            "name": "in)" +
            std::to_string(i) + R"("}}, )" + inner + "]}}";
  return inner;
}

}  // namespace

TEST(ConfigHardening, OutOfRangeOutputIndicesAreErrorsNotCrashes) {
  EXPECT_EQ(model_from_json(functional_json(R"([["dense", 0, 0]])")).count_params(), 10);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([["dense", 0, -1]])", "tensor index -1"},
      {R"([["dense", -1, 0]])", "node index -1"},
      {R"([["dense", 0, 4294967295]])", "tensor index 4294967295"},
      {R"([["dense", 4294967296, 0]])", "node index 4294967296"},
      {R"([["dense", 1, 0]])", "node index 1"},
      {R"([["dense", 0, 0.5]])", "tensor index 0.5"},
      {R"([["nowhere", 0, 0]])", "layer 'nowhere'"},
      {R"([["dense", 0]])", "[layer_name, node_index, tensor_index]"}};
  for (const auto& [outputs, expected] : cases) {
    const std::string j = functional_json(outputs);
    const std::string e =
        test_util::in_child([&] { return error_of([&] { model_from_json(j); }); });
    expect_has(e, {"model 'f' output_layers", expected});
  }
  // The same in an inbound node.
  std::string bad_node = functional_json(R"([["dense", 0, 0]])");
  const std::string good_ref = R"([["x", 0, 0]])";
  bad_node.replace(bad_node.find(good_ref), good_ref.size(), R"([["x", 0, -1]])");
  expect_has(test_util::in_child([&] { return error_of([&] { model_from_json(bad_node); }); }),
             {"layer 'dense'", "tensor index -1"});
}

TEST(ConfigHardening, DuplicateLayerNamesAreRejectedAsKerasDoes) {
  EXPECT_EQ(model_from_json(functional_json(R"([["dense", 0, 0], ["other", 0, 0]])", "other"))
                .count_params(),
            10 + 15);
  expect_has(error_of([] {
               model_from_json(functional_json(R"([["dense", 0, 0], ["dense", 0, 0]])", "dense"));
             }),
             {"model 'f'", "'dense' is used by more than one layer", "unique"});
  // Built through the API: two layers given one name.
  KTensor in = layers::Input({4}, "x");
  KTensor a = layers::Dense(2, {.name = "twin"})(in);
  KTensor b = layers::Dense(2, {.name = "twin"})(a);
  expect_has(error_of([&] { Model(in, b, "m"); }), {"Model 'm'", "'twin'", "unique"});
}

TEST(ConfigHardening, DeeplyNestedModelsHitAStatedLimit) {
  // Within the limit: builds (and in linear memory: this is 60 levels of nesting).
  Model ok = model_from_json(nested_sequential(60));
  EXPECT_EQ(ok.count_params(), 2);
  EXPECT_NO_THROW(network_from_config(ok.get_config()));  // config round trip, not 2^60 work
  // 2,000 levels: the limit's error, not std::bad_alloc or a stack overflow.
  const std::string deep = nested_sequential(2000);
  const std::string e = test_util::in_child([&] {
    try {
      return error_of([&] { model_from_json(deep); });
    } catch (const std::bad_alloc&) {
      return std::string("std::bad_alloc");
    }
  });
  EXPECT_NE(e.find("nested more than"), std::string::npos) << e;
  // Past the model-nesting limit while under the JSON depth limit.
  expect_has(error_of([] { model_from_json(nested_sequential(150)); }),
             {"models nested more than 100 levels", "kMaxModelNesting"});
}

TEST(ConfigHardening, ActivationObjectWithoutANameIsAnError) {
  auto dense = [](const std::string& activation) {
    return R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
      {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "in"}},
      {"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": )" +
           activation + "}}]}}";
  };
  EXPECT_NO_THROW(model_from_json(dense(
      R"({"module": "keras.activations", "class_name": "function", "config": {"name": "relu"}})")));
  for (const std::string bad : {R"({"module": "keras.activations", "class_name": "function",
                                    "config": {}})",
                                R"({"class_name": "function"})", "7"})
    expect_has(error_of([&] { model_from_json(dense(bad)); }),
               {"Dense 'd'", "activation", "\"name\""});
}

// A Sequential config of `dense` Dense layers (named d0, d1, ...), `inner` (a model's config)
// after the InputLayer when given.
static std::string many_layers(const std::string& name, int dense, const std::string& inner = "") {
  std::string s = R"({"class_name": "Sequential", "config": {"name": ")" + name +
                  R"(", "layers": [{"class_name": "InputLayer", "config": {"batch_shape": [null, 1],
                  "name": "in_)" +
                  name + R"("}})";
  if (!inner.empty()) s += ", " + inner;
  for (int i = 0; i < dense; ++i)
    s += R"(, {"class_name": "Dense", "config": {"units": 1, "name": ")" + name + "_d" +
         std::to_string(i) + R"("}})";
  return s + "]}}";
}

// Every layer of a config is an object built and kept: a small file could ask for millions.
// Past kMaxLayers (10,000, nested models' layers included) the config is refused before any
// layer is built, naming the model and the limit.
TEST(ConfigHardening, LayerCountHasAStatedLimit) {
  EXPECT_EQ(model_from_json(many_layers("small", 3)).count_params(), 6);
  expect_has(error_of([] { model_from_json(many_layers("flat", 10000)); }),
             {"model 'flat'", "more than 10000 layers", "kMaxLayers"});
  // Each model under the limit, the whole over it: the nested one is refused.
  expect_has(
      error_of([] { model_from_json(many_layers("outer", 5000, many_layers("inner", 6000))); }),
      {"model 'inner'", "more than 10000 layers", "nested models' included"});
}

// Found by the keras_node_indices fuzz target: Keras 2's reference form [name, node, tensor,
// {kwargs}] was skipped (an Add given two such references was called with one input), and an
// input the outputs do not use made get_config throw std::out_of_range (map::at).
TEST(ConfigHardening, KerasTwoReferencesWithKwargsAndUnusedInputs) {
  auto config = [](const std::string& add_node, const std::string& outputs) {
    return R"({"class_name": "Functional", "config": {"name": "f", "layers": [
      {"class_name": "InputLayer", "name": "x", "config": {"batch_shape": [null, 4], "name": "x"},
       "inbound_nodes": []},
      {"class_name": "InputLayer", "name": "y", "config": {"batch_shape": [null, 4], "name": "y"},
       "inbound_nodes": []},
      {"class_name": "Dense", "name": "a", "config": {"name": "a", "units": 4},
       "inbound_nodes": [[["x", 0, 0, {}]]]},
      {"class_name": "Add", "name": "add", "config": {"name": "add"},
       "inbound_nodes": [)" +
           add_node + R"(]}],
      "input_layers": [["x", 0, 0], ["y", 0, 0]], "output_layers": )" +
           outputs + "}}";
  };
  Network both =
      network_from_json(config(R"([["a", 0, 0, {}], ["y", 0, 0, {}]])", R"([["add", 0, 0]])"));
  ASSERT_EQ(both.count_params(), 20);
  const json saved = both.get_config();
  EXPECT_EQ(saved["config"]["layers"][3]["inbound_nodes"][0]["args"][0].size(), 2u) << saved.dump();
  // "y" unused: a clear error from get_config, not std::out_of_range.
  Network unused =
      network_from_json(config(R"([["a", 0, 0, {}], ["a", 0, 0, {}]])", R"([["add", 0, 0]])"));
  expect_has(error_of([&] { unused.get_config(); }), {"layer 'y'", "not connected"});
}
