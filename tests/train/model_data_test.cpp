// ModelData (every form of Keras's x and y reaches one code path in Model) and Prediction
// (predict's result, as a Tensor, a list or a dict): each form's kind, the conversions, and the
// errors a misplaced form gets.
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using test_util::error_of;

namespace {

Tensor ramp(Shape shape, float scale) {
  std::vector<float> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(i % 7) - 1.0f;
  return Tensor::from_vector(shape, v);
}

// One input "x" [3]; outputs "reg" [2] (mse) and "cls" [3] (sparse crossentropy).
Model one_in_two_out() {
  set_random_seed(3);
  reset_layer_names();
  KTensor x = layers::Input({3}, "x");
  KTensor h = layers::Dense(4, {.activation = "tanh", .name = "hidden"})(x);
  Model m({x}, {layers::Dense(2, {.name = "reg"})(h), layers::Dense(3, {.name = "cls"})(h)}, "m");
  m.compile({.optimizer = optimizers::SGD(0.1),
             .losses = {losses::get("mse"),
                        losses::SparseCategoricalCrossentropy({.from_logits = true})}});
  return m;
}

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_TRUE(a.defined() && b.defined());
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

}  // namespace

TEST(ModelData, EachFormHasItsKind) {
  const Tensor a = ramp(Shape{4, 2}, 0.5f), b = ramp(Shape{4, 3}, 0.25f);
  using Kind = ModelData::Kind;
  EXPECT_EQ(ModelData().kind(), Kind::none);
  EXPECT_TRUE(ModelData().empty());
  EXPECT_EQ(ModelData(a).kind(), Kind::array);
  const ModelData list = {a, b};
  EXPECT_EQ(list.kind(), Kind::list);
  EXPECT_EQ(list.arrays().size(), 2u);
  EXPECT_EQ(ModelData(std::vector<Tensor>{a}).kind(), Kind::list);
  const ModelData dict = {{"a", a}, {"b", b}};
  EXPECT_EQ(dict.kind(), Kind::dict);
  EXPECT_EQ(dict.dict().tensors.size(), 2u);
  EXPECT_EQ(ModelData(TensorDict{{"a", a}}).kind(), Kind::dict);
  EXPECT_EQ(ModelData(std::map<std::string, Tensor>{{"a", a}}).kind(), Kind::dict);
  const ModelData ds = data::Dataset::from_tensor_slices(a).batch(2);
  EXPECT_EQ(ds.kind(), Kind::dataset);
  EXPECT_TRUE(ds.is_dataset());
  EXPECT_EQ(list.describe(), "a list of 2 arrays");
  EXPECT_EQ(ds.describe(), "a Dataset");
}

TEST(ModelData, PredictionIsATensorAListAndADict) {
  const Tensor r = ramp(Shape{2, 2}, 1.0f), c = ramp(Shape{2, 3}, 2.0f);
  const Prediction one({r}, {"reg"});
  EXPECT_EQ(one.raw(), r.raw());  // the one output, as a Tensor
  const std::vector<Tensor> as_list = one;
  ASSERT_EQ(as_list.size(), 1u);
  const Prediction two({r, c}, {"reg", "cls"});
  EXPECT_FALSE(two.defined());  // several outputs are no one Tensor
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].raw(), c.raw());
  const std::map<std::string, Tensor> keyed = two;
  ASSERT_EQ(keyed.size(), 2u);
  EXPECT_EQ(keyed.at("cls").raw(), c.raw());
  EXPECT_EQ(keyed.at("reg").raw(), r.raw());
}

// A single-input, two-output model: x as a list, a dict or a Dataset gives every output, the
// same numbers; x as one Tensor asks for the one output there is not.
TEST(ModelData, EveryFormOfXPredictsTheSame) {
  Model m = one_in_two_out();
  const Tensor x = ramp(Shape{5, 3}, 0.3f);
  const std::vector<Tensor> by_list = m.predict({x}, {.batch_size = 2});
  const std::map<std::string, Tensor> by_dict = m.predict(TensorDict{{"x", x}});
  const Prediction by_dataset = m.predict(data::Dataset::from_tensor_slices(x).batch(3));
  ASSERT_EQ(by_list.size(), 2u);
  ASSERT_EQ(by_dataset.size(), 2u);
  expect_same(by_list[0], by_dict.at("reg"));
  expect_same(by_list[1], by_dict.at("cls"));
  expect_same(by_list[1], by_dataset[1]);
  const Prediction on_batch = m.predict_on_batch({x});
  expect_same(on_batch[0], by_list[0]);
  EXPECT_NE(error_of([&] {
              m.predict(x);
            }).find("predict: model 'm' has 2 outputs; pass x as a list ({x}) or a dict"),
            std::string::npos);
}

TEST(ModelData, AMisplacedFormIsAClearError) {
  Model m = one_in_two_out();
  const Tensor x = ramp(Shape{4, 3}, 0.3f), y1 = ramp(Shape{4, 2}, 0.1f);
  const Tensor y2 = Tensor::from_vector_i32(Shape{4}, {0, 1, 2, 1});
  const data::Dataset ds = data::Dataset::from_tensor_slices({x, y1, y2}).batch(2);
  auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  has(error_of([&] { m.fit(x, {}, {.verbose = 0}); }), "fit: y is missing");
  has(error_of([&] {
        m.fit(ds, {y1, y2}, {.verbose = 0});
      }),
      "fit(Dataset): x is a Dataset, whose elements carry the targets; y must be empty, got a "
      "list of 2 arrays");
  has(error_of([&] { m.evaluate({x}, ds, {.verbose = 0}); }),
      "evaluate: y is a Dataset; a Dataset goes in x");
  has(error_of([&] { m.train_on_batch(ds); }),
      "train_on_batch: x is a Dataset; this call takes arrays (one batch)");
  // The right forms train: a list and the Dataset of the same rows, one epoch each.
  EXPECT_EQ(m.fit({x}, {y1, y2}, {.batch_size = 2, .verbose = 0}).epoch.size(), 1u);
  EXPECT_EQ(m.fit(ds, {.verbose = 0}).epoch.size(), 1u);
}
