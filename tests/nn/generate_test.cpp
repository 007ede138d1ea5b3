// GptGenerator (lockstep/nn/generate.h) on tiny GPTs (examples/gpt_model.h's "tiny": 2 layers
// of 32, T = 16) trained for a few steps on a paragraph of English: the key/value cache gives
// exactly the tokens of the full recompute (sampled, top-k and greedy, past the end of the
// context, pre-norm and post-norm blocks), a fixed seed gives the same text and another seed
// another text, and a model of another shape is refused naming its layer.
#include <gtest/gtest.h>

#include "../../examples/gpt_model.h"
#include "lockstep/nn/generate.h"
#include "test_util.h"

using namespace lockstep;

namespace {

// One compute thread while a test runs (restored after): the models are tiny, and two OpenMP
// threads on a machine whose cores other jobs hold wait on each other (a 0.4 s test took 20 s).
struct OneThread {
  int before = num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(before); }
};

const char* kText =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the "
    "winter of despair.\n";

// A tiny GPT trained 24 steps (batch 16) on kText, so that its logits are far from uniform.
Model trained_gpt(bool normalize_first = true) {
  reset_layer_names();
  set_random_seed(3);
  const GptConfig c = gpt_preset("tiny");
  Model m;
  if (normalize_first) {
    m = gpt_model(c);
  } else {  // post-norm (BERT's order) with relu, no final layer norm
    namespace hub = keras_hub;
    auto ids = layers::Input({c.seq_len}, "token_ids", DType::i32);
    KTensor x = hub::TokenAndPositionEmbedding(c.vocab, c.seq_len, c.d_model)(ids);
    for (int i = 0; i < 2; ++i) x = hub::TransformerDecoder(64, c.heads)(layers::Dropout(0.1)(x));
    m = Model(ids, layers::Dense(c.vocab)(x), "post_norm_gpt");
  }
  m.compile({.optimizer = optimizers::Adam(3e-3),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  const auto [x, y] = byte_windows(kText, 24 * 16, c.seq_len, true, 5);
  m.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
  return m;
}

}  // namespace

TEST(GptGenerator, TheCacheGivesTheTokensOfTheFullRecompute) {
  OneThread one;
  for (bool pre_norm : {true, false}) {
    Model m = trained_gpt(pre_norm);
    GptGenerator gen(m);
    EXPECT_EQ(gen.context_length(), 16);
    EXPECT_EQ(gen.vocabulary_size(), 256);
    EXPECT_EQ(gen.num_layers(), 2);
    const std::vector<int32_t> prompt = bytes_to_ids("it was the ");
    // 40 tokens after an 11-token prompt: the 16-token context fills and slides several times.
    for (auto [temperature, top_k] : {std::pair{1.0, int64_t(0)}, std::pair{0.7, int64_t(5)},
                                      std::pair{0.0, int64_t(0)}}) {
      GenerateOptions o{.max_new_tokens = 40, .temperature = temperature, .top_k = top_k,
                        .seed = 11};
      const auto cached = gen.generate(prompt, o);
      EXPECT_EQ(gen.stats().generated_tokens, 40);
      o.use_cache = false;
      const auto recomputed = gen.generate(prompt, o);
      ASSERT_EQ(cached.size(), prompt.size() + 40);
      EXPECT_EQ(std::vector<int32_t>(cached.begin(), cached.begin() + 11), prompt);
      EXPECT_EQ(cached, recomputed) << (pre_norm ? "pre-norm" : "post-norm") << ", temperature "
                                    << temperature << ", top-k " << top_k << ": \""
                                    << ids_to_bytes(cached) << "\" vs \""
                                    << ids_to_bytes(recomputed) << "\"";
    }
  }
}

TEST(GptGenerator, AFixedSeedGivesTheSameTextAndTopKLimitsTheChoice) {
  OneThread one;
  Model m = trained_gpt();
  GptGenerator gen(m);
  const std::vector<int32_t> prompt = bytes_to_ids("season");
  const GenerateOptions o{.max_new_tokens = 30, .temperature = 1.5, .seed = 4};
  const auto a = gen.generate(prompt, o);
  EXPECT_EQ(a, gen.generate(prompt, o));
  GptGenerator again(m);  // a fresh generator (new programs) too
  EXPECT_EQ(a, again.generate(prompt, o));
  GenerateOptions other = o;
  other.seed = 5;
  EXPECT_NE(a, gen.generate(prompt, other));
  // Trained on kText, the model writes its letters: with top_k = 1 every sample is the argmax,
  // so it is the greedy text whatever the seed.
  GenerateOptions greedy{.max_new_tokens = 30, .temperature = 0.0};
  GenerateOptions top1{.max_new_tokens = 30, .temperature = 1.0, .top_k = 1, .seed = 9};
  EXPECT_EQ(gen.generate(prompt, greedy), gen.generate(prompt, top1));
}

TEST(GptGenerator, RefusesAModelOfAnotherShapeNamingTheLayer) {
  OneThread one;
  auto ids = layers::Input({8}, "ids", DType::i32);
  Model m(ids, layers::Dense(4)(layers::Embedding(10, 4)(ids)), "not_a_gpt");
  test_util::expect_has(test_util::error_of([&] { GptGenerator gen(m); }),
                        {"not_a_gpt", "embedding", "TokenAndPositionEmbedding"});
  Model gpt = trained_gpt();
  GptGenerator gen(gpt);
  test_util::expect_has(test_util::error_of([&] { gen.generate({300}); }),
                        {"prompt token 300", "[0, 256)"});
  test_util::expect_has(test_util::error_of([&] { gen.generate({}); }), {"prompt is empty"});
}
