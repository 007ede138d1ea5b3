// Text generation with a decoder-only transformer (a GPT): the next token sampled with a
// temperature and top-k, one token at a time, with a key/value cache so that each new token
// costs one step of the model rather than a pass over the whole prefix.
//
//   GptGenerator gen(model);                      // a trained GPT (or load_model("gpt.keras"))
//   std::vector<int32_t> ids = gen.generate(prompt_ids, {.max_new_tokens = 200,
//                                                       .temperature = 0.8, .top_k = 40,
//                                                       .seed = 7});
//
// The model is the GPT of examples/gpt.cpp, as KerasHub builds one: token ids [batch, T] (int32)
// -> keras_hub::TokenAndPositionEmbedding -> keras_hub::TransformerDecoder x N (pre- or
// post-norm, no cross-attention) -> LayerNormalization (optional) -> Dense(vocabulary) logits
// [batch, T, vocabulary]; Dropout layers anywhere are skipped. Any other structure is refused
// with an error naming the layer.
//
// How the cache runs on a graph compiler: the generator compiles, once, a program for one token
// whose inputs are the token, its position and each layer's key and value caches
// [1, T, heads, key_dim] and whose outputs are the logits and this token's keys and values
// [1, 1, heads, key_dim]; attention reads the cached rows before the position and the token's
// own key and value. The caches are the program's input buffers, which keep their contents
// between runs: after each run the host writes the token's keys and values into row
// `position` (a copy of heads x key_dim floats per layer), never a whole cache. The prompt goes
// through it token by token (prefill). Without the cache (use_cache = false) it
// compiles the model's own forward on [1, T] and re-runs it over the whole context for every
// token. Both feed the same sampling program (the random_categorical op, keyed by the seed and
// the token's index), so they pick the same tokens and a fixed seed gives the same text.
// The context holds at most T tokens (the model's sequence length): when it is full, both
// paths keep its last T/2 tokens and go on (the cache is refilled from them).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/network.h"

namespace lockstep {

/// How GptGenerator::generate picks each next token (KerasHub's samplers' arguments).
struct GenerateOptions {
  int64_t max_new_tokens = 100;  ///< tokens generated after the prompt
  /// Logits are divided by it before the softmax; 0: greedy (the most likely token).
  double temperature = 1.0;
  int64_t top_k = 0;      ///< sample among the k most likely tokens (0: all)
  uint64_t seed = 0;      ///< the sampling seed: the same seed, prompt and model give the same text
  bool use_cache = true;  ///< false: recompute the whole context for every token (the oracle)
};

/// What one generate() call did, for benchmarks (the last call's).
struct GenerateStats {
  int64_t prompt_tokens = 0;     ///< tokens of the prompt (the prefill)
  int64_t generated_tokens = 0;  ///< tokens generated
  double prefill_seconds = 0;    ///< time spent on the prompt
  double decode_seconds = 0;     ///< time spent generating (after the prompt)
  double compile_seconds = 0;    ///< compiling the programs (the first call only)
};

/// Generates token ids from a GPT-shaped model (see the top of this header) on the cpu backend.
/// The cached path computes in float32 whatever the model's dtype policy; the full recompute
/// (use_cache = false) runs the model as built, so under mixed_bfloat16 the two may pick
/// different tokens. The model's weights are read, not copied (train further and generate
/// again); the model must outlive the generator. Not thread-safe; one generator per thread.
class GptGenerator {
 public:
  /// Checks the model's structure (an error names the first layer that does not fit) and reads
  /// its sizes; the programs are compiled on the first generate() that needs them.
  explicit GptGenerator(const Network& model);
  ~GptGenerator();
  GptGenerator(const GptGenerator&) = delete;
  GptGenerator& operator=(const GptGenerator&) = delete;

  /// The prompt (at least one id, each in [0, vocabulary_size())) followed by
  /// options.max_new_tokens generated ids.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt,
                                const GenerateOptions& options = {});

  int64_t context_length() const;      ///< T: the model's sequence length
  int64_t vocabulary_size() const;     ///< the logits' width
  int64_t num_layers() const;          ///< the transformer blocks
  const GenerateStats& stats() const;  ///< the last generate() call's timings

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// UTF-8 / byte-level text helpers for a model whose tokens are bytes (vocabulary 256, as
/// examples/gpt.cpp trains): each byte of `text` is one id.
std::vector<int32_t> bytes_to_ids(const std::string& text);
/// The inverse of bytes_to_ids (each id taken as one byte).
std::string ids_to_bytes(const std::vector<int32_t>& ids);

}  // namespace lockstep
