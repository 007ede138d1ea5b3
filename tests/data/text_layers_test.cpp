// The host-side text preprocessing layers (lockstep/nn/text_layers.h): exact values for each
// mode on small inputs (Keras's documented examples where there is one), adapt()'s vocabulary
// order, configs both ways, and the errors.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/data/text.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"
#include "test_util.h"

using namespace lockstep;
using data::Strings;

namespace {

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> v;
  for (float x : t.to_vector()) v.push_back(int64_t(x));
  return v;
}

template <typename L>
std::shared_ptr<L> round_trip(const std::shared_ptr<L>& layer) {
  json wrapped = {{"class_name", layer->class_name()}, {"config", layer->config()}};
  auto again = std::dynamic_pointer_cast<L>(layer_from_config(json::parse(wrapped.dump())));
  EXPECT_TRUE(again) << wrapped.dump();
  return again;
}

}  // namespace

TEST(TextVectorization, IntWithAFixedVocabularyKerasDocExample) {
  auto tv = layers::TextVectorization(
      {.output_sequence_length = 4, .vocabulary = {"earth", "wind", "and", "fire"}});
  EXPECT_EQ(tv->get_vocabulary(),
            (std::vector<std::string>{"", "[UNK]", "earth", "wind", "and", "fire"}));
  Tensor y = tv->apply(Strings{"earth wind and fire", "fire and earth michigan"});
  EXPECT_EQ(y.dtype(), DType::i64);
  EXPECT_EQ(y.shape(), Shape({2, 4}));
  EXPECT_EQ(ints(y), (std::vector<int64_t>{2, 3, 4, 5, 5, 4, 2, 1}));
  // Padding and truncation; "Earth," standardizes to "earth".
  y = tv->apply(Strings{"Earth, FIRE!", "wind wind wind wind wind"});
  EXPECT_EQ(ints(y), (std::vector<int64_t>{2, 5, 0, 0, 3, 3, 3, 3}));
  // Without output_sequence_length: padded to the longest text of the batch.
  auto ragged = layers::TextVectorization({.vocabulary = {"a"}, .int_dtype = DType::i32});
  y = ragged->apply(Strings{"a", "a b a"});
  EXPECT_EQ(y.dtype(), DType::i32);
  EXPECT_EQ(ints(y), (std::vector<int64_t>{2, 0, 0, 2, 1, 2}));
}

TEST(TextVectorization, AdaptOrdersByCountThenTokenDescending) {
  auto tv = layers::TextVectorization({.max_tokens = 10, .output_sequence_length = 4});
  tv->adapt(Strings{"the cat sat", "the dog", "a b b"});
  // What Keras 3.15 (TensorFlow 2.21) gives for the same adapt().
  EXPECT_EQ(tv->get_vocabulary(),
            (std::vector<std::string>{"", "[UNK]", "the", "b", "sat", "dog", "cat", "a"}));
  EXPECT_EQ(tv->vocabulary_size(), 8);
  auto capped = layers::TextVectorization({.max_tokens = 4});
  capped->adapt(Strings{"the cat sat", "the dog", "a b b"});
  EXPECT_EQ(capped->get_vocabulary(), (std::vector<std::string>{"", "[UNK]", "the", "b"}));
  // adapt over a Dataset of {texts, labels} batches, as from text_dataset_from_directory.
  auto ds =
      data::Dataset::from_tensor_slices({data::Component(Strings{"x y", "y"}),
                                         data::Component(Tensor::from_vector_i32({2}, {0, 1}))})
          .batch(1);
  auto from_ds = layers::TextVectorization();
  from_ds->adapt(ds.map(data::first_component));
  EXPECT_EQ(from_ds->get_vocabulary(), (std::vector<std::string>{"", "[UNK]", "y", "x"}));
}

TEST(TextVectorization, MultiHotCountAndTfIdf) {
  auto mh = layers::TextVectorization({.output_mode = "multi_hot", .vocabulary = {"a", "b"}});
  EXPECT_EQ(mh->get_vocabulary(), (std::vector<std::string>{"[UNK]", "a", "b"}));  // no ""
  EXPECT_EQ(mh->apply(Strings{"a a c", ""}).to_vector(), (std::vector<float>{1, 1, 0, 0, 0, 0}));
  auto count = layers::TextVectorization({.output_mode = "count", .vocabulary = {"a", "b"}});
  EXPECT_EQ(count->apply(Strings{"a a c"}).to_vector(), (std::vector<float>{1, 2, 0}));
  auto padded = layers::TextVectorization(
      {.max_tokens = 5, .output_mode = "count", .pad_to_max_tokens = true, .vocabulary = {"a"}});
  EXPECT_EQ(padded->apply(Strings{"a"}).shape(), Shape({1, 5}));
  // A given vocabulary without special tokens: the OOV idf is the mean of the given ones.
  auto tfidf = layers::TextVectorization(
      {.output_mode = "tf_idf", .vocabulary = {"a", "b"}, .idf_weights = {0.5f, 2.f}});
  EXPECT_EQ(tfidf->apply(Strings{"a a c b"}).to_vector(), (std::vector<float>{1.25f, 1.f, 2.f}));
  // adapt: idf = log(1 + documents / (1 + documents with the token)).
  auto learned = layers::TextVectorization({.output_mode = "tf_idf"});
  learned->adapt(Strings{"a b", "a"});
  const float ia = std::log(1.f + 2.f / 3.f), ib = std::log(2.f);
  auto y = learned->apply(Strings{"a b b z"}).to_vector();
  ASSERT_EQ(y.size(), 3u);
  EXPECT_NEAR(y[0], (ia + ib) / 2, 1e-6);  // one OOV token x the mean idf
  EXPECT_NEAR(y[1], ia, 1e-6);
  EXPECT_NEAR(y[2], 2 * ib, 1e-6);
}

TEST(TextVectorization, StandardizeSplitAndNgrams) {
  auto chars = layers::TextVectorization(
      {.standardize = "lower", .split = "character", .vocabulary = {"a", "\xC3\xA9"}});
  EXPECT_EQ(ints(chars->apply(Strings{"A\xC3\xA9!"})), (std::vector<int64_t>{2, 3, 1}));
  auto none =
      layers::TextVectorization({.standardize = "", .split = "", .vocabulary = {"Hi there"}});
  EXPECT_EQ(ints(none->apply(Strings{"Hi there", "hi there"})), (std::vector<int64_t>{2, 1}));
  auto bigrams = layers::TextVectorization({.ngrams = {2}, .vocabulary = {"a b", "a"}});
  EXPECT_EQ(bigrams->tokens("A b c"), (std::vector<std::string>{"a", "b", "c", "a b", "b c"}));
  EXPECT_EQ(ints(bigrams->apply(Strings{"a b"})), (std::vector<int64_t>{3, 1, 2}));
  auto only2 =
      layers::TextVectorization({.ngrams = {2}, .ngrams_up_to = false, .vocabulary = {"x"}});
  EXPECT_EQ(only2->tokens("a b c"), (std::vector<std::string>{"a b", "b c"}));
  // Invalid UTF-8 in a text: replaced, never a crash.
  EXPECT_EQ(chars->tokens("a\xFF").back(), "\xEF\xBF\xBD");
}

TEST(TextVectorization, MapFnOnABatchedTextDataset) {
  auto tv = layers::TextVectorization({.output_sequence_length = 3, .vocabulary = {"a", "b"}});
  auto ds =
      data::Dataset::from_tensor_slices({data::Component(Strings{"a b", "b", "c a"}),
                                         data::Component(Tensor::from_vector_i32({3}, {0, 1, 2}))})
          .batch(2)
          .map(tv->map_fn());
  auto it = ds.iterator();
  auto b = it.next();
  ASSERT_TRUE(b->is_tensor(0));
  EXPECT_EQ(ints(b->tensor(0)), (std::vector<int64_t>{2, 3, 0, 3, 0, 0}));
  EXPECT_EQ(ints(b->tensor(1)), (std::vector<int64_t>{0, 1}));
  // Unbatched elements give unbatched ids.
  auto one = data::Dataset::from_tensor_slices({data::Component(Strings{"b a"})}).map(tv->map_fn());
  EXPECT_EQ(one.iterator().next()->tensor(0).shape(), Shape({3}));
}

TEST(TextVectorization, ConfigBothWays) {
  auto tv = layers::TextVectorization({.max_tokens = 20,
                                       .ngrams = {1, 3},
                                       .ngrams_up_to = false,
                                       .output_sequence_length = 5,
                                       .vocabulary = {"a", "b c"},
                                       .name = "vec"});
  json c = tv->config();
  EXPECT_EQ(c["ngrams"], json({1, 3}));
  EXPECT_EQ(c["vocabulary_size"], 4);
  EXPECT_EQ(c["standardize"], "lower_and_strip_punctuation");
  auto again = round_trip(tv);
  EXPECT_EQ(again->name(), "vec");
  EXPECT_EQ(again->get_vocabulary(), tv->get_vocabulary());
  EXPECT_EQ(ints(again->apply(Strings{"a b c"})), ints(tv->apply(Strings{"a b c"})));
  // A config as Keras writes it (the "dtype" policy, encoding, vocabulary_size, null ngrams).
  json keras = json::parse(R"({"class_name": "TextVectorization", "config": {
      "name": "text_vectorization", "trainable": true,
      "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}},
      "max_tokens": 10, "standardize": "lower_and_strip_punctuation", "split": "whitespace",
      "ngrams": null, "output_mode": "int", "output_sequence_length": 4,
      "pad_to_max_tokens": false, "sparse": false, "ragged": false, "vocabulary": null,
      "idf_weights": null, "encoding": "utf-8", "vocabulary_size": 8}})");
  auto k = std::dynamic_pointer_cast<TextVectorizationLayer>(layer_from_config(keras));
  ASSERT_TRUE(k);
  EXPECT_EQ(k->options().output_sequence_length, 4);
  EXPECT_FALSE(k->has_input_vocabulary());
}

TEST(StringLookup, IndicesMaskAndOov) {
  auto l = layers::StringLookup({.vocabulary = {"a", "b", "c", "d"}});
  EXPECT_EQ(ints(l->apply(Strings{"a", "c", "d", "z"})), (std::vector<int64_t>{1, 3, 4, 0}));
  auto masked = layers::StringLookup({.mask_token = "", .vocabulary = {"a", "b"}});
  EXPECT_EQ(masked->get_vocabulary(), (std::vector<std::string>{"", "[UNK]", "a", "b"}));
  EXPECT_EQ(ints(masked->apply(Strings{"", "b", "q"})), (std::vector<int64_t>{0, 3, 1}));
  // Special tokens at the front of a given vocabulary are recognised, not repeated.
  auto front = layers::StringLookup({.vocabulary = {"[UNK]", "a"}});
  EXPECT_EQ(front->vocabulary_size(), 2);
  // Two OOV buckets: FarmHash of the token, as tf.strings.to_hash_bucket_fast.
  auto two = layers::StringLookup({.num_oov_indices = 2, .vocabulary = {"a"}});
  const auto y = ints(two->apply(Strings{"a", "hello"}));
  EXPECT_EQ(y[0], 2);
  EXPECT_EQ(y[1], int64_t(data::farmhash_fingerprint64("hello") % 2));
  auto oh = layers::StringLookup({.vocabulary = {"a", "b"}, .output_mode = "one_hot"});
  EXPECT_EQ(oh->apply(Strings{"b", "x"}).to_vector(), (std::vector<float>{0, 0, 1, 1, 0, 0}));
  auto mh = layers::StringLookup({.vocabulary = {"a", "b"}, .output_mode = "multi_hot"});
  EXPECT_EQ(mh->apply(Strings{"b", "a"}).to_vector(), (std::vector<float>{0, 1, 1}));  // one row
  auto adapted = layers::StringLookup();
  adapted->adapt(Strings{"x", "y", "y", "[UNK]"});
  EXPECT_EQ(adapted->get_vocabulary(), (std::vector<std::string>{"[UNK]", "y", "x"}));
  auto again = round_trip(l);
  EXPECT_EQ(ints(again->apply(Strings{"d"})), (std::vector<int64_t>{4}));
}

TEST(IntegerLookup, KerasDocExample) {
  auto l = layers::IntegerLookup({.oov_token = "-1", .vocabulary = {"12", "36", "1138", "42"}});
  Tensor x = Tensor::from_vector_i32({2, 3}, {12, 1138, 42, 42, 1000, 36});
  EXPECT_EQ(ints(l->apply(x)), (std::vector<int64_t>{1, 3, 4, 4, 0, 2}));
  EXPECT_EQ(l->apply(x).shape(), Shape({2, 3}));
  json c = l->config();
  EXPECT_EQ(c["vocabulary"], json({12, 36, 1138, 42}));
  EXPECT_EQ(c["oov_token"], -1);
  auto again = round_trip(l);
  EXPECT_EQ(ints(again->apply(x)), ints(l->apply(x)));
  // num_oov_indices 2: floormod, Keras's default for integers.
  auto two = layers::IntegerLookup({.num_oov_indices = 2, .oov_token = "-1", .vocabulary = {"5"}});
  EXPECT_EQ(ints(two->apply(Tensor::from_vector_i32({3}, {5, 7, -3}))),
            (std::vector<int64_t>{2, 1, 1}));
}

TEST(Hashing, KerasDocExamples) {
  auto h = layers::Hashing(3);
  EXPECT_EQ(ints(h->apply(Strings{"A", "B", "C", "D", "E"})),
            (std::vector<int64_t>{1, 0, 1, 1, 2}));
  auto m = layers::Hashing(3, {.mask_value = ""});
  EXPECT_EQ(ints(m->apply(Strings{"A", "B", "", "C", "D"})), (std::vector<int64_t>{1, 1, 0, 2, 2}));
  // Integers hash as their decimal strings.
  EXPECT_EQ(ints(h->apply(Tensor::from_vector_i32({2}, {1, 2}))),
            (std::vector<int64_t>{h->bin("1"), h->bin("2")}));
  auto oh = layers::Hashing(3, {.output_mode = "one_hot"});
  EXPECT_EQ(oh->apply(Strings{"A"}).to_vector(), (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(round_trip(m)->bin(""), 0);
}

TEST(CategoryEncoding, KerasDocExamplesAndOutOfRange) {
  auto oh = layers::CategoryEncoding(4, {.output_mode = "one_hot"});
  EXPECT_EQ(oh->apply(Tensor::from_vector_i32({4}, {3, 2, 0, 1})).to_vector(),
            (std::vector<float>{0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0}));
  Tensor x = Tensor::from_vector_i32({4, 2}, {0, 1, 0, 0, 1, 2, 3, 1});
  EXPECT_EQ(layers::CategoryEncoding(4)->apply(x).to_vector(),
            (std::vector<float>{1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1}));
  EXPECT_EQ(layers::CategoryEncoding(4, {.output_mode = "count"})->apply(x).to_vector(),
            (std::vector<float>{1, 1, 0, 0, 2, 0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1}));
  auto named = layers::CategoryEncoding(4, {.name = "enc"});
  test_util::expect_has(test_util::error_of([&] {
                          named->apply(Tensor::from_vector_i32({2}, {1, 7}));
                        }),
                        {"CategoryEncoding 'enc'", "7", "[0, 4)"});
  EXPECT_EQ(round_trip(named)->config()["num_tokens"], 4);
}

TEST(TextLayers, ErrorsNameTheLayerAndTheOption) {
  test_util::expect_has(test_util::error_of([] {
                          layers::TextVectorization({.standardize = "upper", .name = "tv"});
                        }),
                        {"TextVectorization 'tv'", "standardize"});
  auto empty = layers::TextVectorization({.name = "fresh"});
  test_util::expect_has(test_util::error_of([&] { empty->apply(Strings{"a"}); }),
                        {"fresh", "adapt()"});
  auto fixed = layers::StringLookup({.num_oov_indices = 0, .vocabulary = {"a"}, .name = "sl"});
  test_util::expect_has(test_util::error_of([&] { fixed->apply(Strings{"b"}); }),
                        {"StringLookup 'sl'", "\"b\"", "num_oov_indices"});
  test_util::expect_has(test_util::error_of([] {
                          layers::StringLookup({.max_tokens = 3, .vocabulary = {"a", "b", "c"}});
                        }),
                        {"max_tokens"});
  json salted = {{"class_name", "Hashing"},
                 {"config", {{"name", "h"}, {"num_bins", 3}, {"salt", 7}}}};
  test_util::expect_has(test_util::error_of([&] { layer_from_config(salted); }), {"salt"});
  // In a compiled model: refused, saying to run it in the input pipeline.
  auto tv = layers::TextVectorization({.vocabulary = {"a"}, .name = "in_graph"});
  Graph g;
  CallContext ctx{g};
  test_util::expect_has(test_util::error_of([&] { tv->call(ctx, {}); }),
                        {"in_graph", "input pipeline"});
}

namespace {

// A Keras 3 functional config: Input(shape=(1,), dtype="string") -> TextVectorization -> Dense.
json string_model_config(const json& tv_config) {
  auto tensor = [](const std::string& layer, json shape, const std::string& dtype) {
    return json{{"class_name", "__keras_tensor__"},
                {"config", {{"shape", shape}, {"dtype", dtype}, {"keras_history", {layer, 0, 0}}}}};
  };
  json layers = json::array();
  layers.push_back({{"module", "keras.layers"},
                    {"class_name", "InputLayer"},
                    {"config",
                     {{"batch_shape", {nullptr, 1}},
                      {"dtype", "string"},
                      {"sparse", false},
                      {"ragged", false},
                      {"name", "text"},
                      {"optional", false}}},
                    {"registered_name", nullptr},
                    {"name", "text"},
                    {"inbound_nodes", json::array()}});
  layers.push_back(
      {{"module", "keras.layers"},
       {"class_name", "TextVectorization"},
       {"config", tv_config},
       {"registered_name", nullptr},
       {"name", "tv"},
       {"inbound_nodes",
        {{{"args", {tensor("text", {nullptr, 1}, "string")}}, {"kwargs", json::object()}}}}});
  layers.push_back(
      {{"module", "keras.layers"},
       {"class_name", "Dense"},
       {"config", {{"name", "dense"}, {"units", 2}, {"activation", "linear"}, {"use_bias", false}}},
       {"registered_name", nullptr},
       {"name", "dense"},
       {"inbound_nodes",
        {{{"args", {tensor("tv", {nullptr, 3}, "int64")}}, {"kwargs", json::object()}}}}});
  return {{"class_name", "Functional"},
          {"config",
           {{"name", "strings_in"},
            {"layers", layers},
            {"input_layers", {"text", 0, 0}},
            {"output_layers", {"dense", 0, 0}}}}};
}

}  // namespace

TEST(StringModels, KerasConfigWithAStringInputLoadsPredictsAndSaves) {
  json tv = layers::TextVectorization({.output_sequence_length = 3, .name = "tv"})->config();
  Model m = network_from_config(string_model_config(tv));
  ASSERT_TRUE(m.host_preprocessing());
  EXPECT_EQ(m.inputs()[0].shape(), Shape({-1, 3}));  // the compiled part takes the ids
  // Adapt the (still empty) layer the way load_model fills it from the file's assets.
  auto head = m.host_preprocessing()->all_layers();
  ASSERT_EQ(head.size(), 1u);
  head[0]->load_vocabulary_asset("\n[UNK]\nb\na");
  m.set_weights({Tensor::from_vector({3, 2}, {1, 0, 0, 1, 0, 0})});  // out = (id0, id1)
  auto ds =
      data::Dataset::from_tensor_slices({data::Component(Strings{"a b", "B c d e"})}).batch(2);
  EXPECT_EQ(m.predict(ds).to_vector(), (std::vector<float>{3, 2, 2, 1}));
  // Saved: the string input and the layer come back in front, the vocabulary in the assets.
  const auto dir = test_util::temp_dir("string_models", true);
  const std::string path = (dir / "m.keras").string();
  m.save(path);
  json cfg = m.get_config();
  EXPECT_EQ(cfg["config"]["layers"][0]["config"]["dtype"], "string");
  EXPECT_NE(cfg["config"]["input_layers"].dump().find("\"text\""), std::string::npos)
      << cfg["config"]["input_layers"].dump();
  Model again = load_model(path);
  ASSERT_TRUE(again.host_preprocessing());
  EXPECT_EQ(again.predict(ds).to_vector(), (std::vector<float>{3, 2, 2, 1}));
  EXPECT_EQ(
      std::dynamic_pointer_cast<TextVectorizationLayer>(again.host_preprocessing()->all_layers()[0])
          ->get_vocabulary(),
      (std::vector<std::string>{"", "[UNK]", "b", "a"}));
  // Arrays go to the compiled part: ids.
  EXPECT_EQ(again.predict(Tensor::from_vector({1, 3}, {2, 3, 0})).to_vector(),
            (std::vector<float>{2, 3}));
}

TEST(StringModels, AStringInputIntoANumericLayerIsRefused) {
  json tv = layers::TextVectorization({.name = "tv"})->config();  // no output_sequence_length
  test_util::expect_has(test_util::error_of([&] { network_from_config(string_model_config(tv)); }),
                        {"TextVectorization 'tv'", "output_sequence_length"});
}
