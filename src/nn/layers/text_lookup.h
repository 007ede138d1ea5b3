// The vocabulary behind StringLookup, IntegerLookup and TextVectorization (Keras's IndexLookup),
// and the categorical encoding they share with Hashing and CategoryEncoding. Private to nn.
#pragma once
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lockstep/data/text.h"
#include "lockstep/nn/text_layers.h"

namespace lockstep {

/// A hash of strings that also takes string_views (heterogeneous lookup).
struct TokenHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

/// Keras's IndexLookup state: [mask (int mode only)] [OOV x num_oov_indices] [tokens...].
struct IndexLookupState {
  std::string cls, name;  ///< for messages: "StringLookup", "string_lookup"
  layers::LookupOptions o;
  bool integer = false;             ///< IntegerLookup (tokens are decimal integers)
  std::vector<std::string> tokens;  ///< the vocabulary without special tokens
  /// token -> index; found by string_view too (no string built per lookup).
  std::unordered_map<std::string, int64_t, TokenHash, std::equal_to<>> table;
  std::vector<float> idf;                     ///< tf_idf: one weight per output index
  bool has_input_vocabulary = false;          ///< the vocabulary came from the options
  std::vector<std::string> input_vocabulary;  ///< as given (config "vocabulary")
  std::vector<float> input_idf;               ///< as given (config "idf_weights")
  data::TokenCounter counter;                 ///< adapt()'s counts
  int64_t frozen_size = -1;  ///< a Keras config's vocabulary_size, until the assets load

  /// Index of the first OOV bucket: 1 with a mask token in int mode, else 0.
  int64_t oov_start() const { return o.mask_token && o.output_mode == "int" ? 1 : 0; }
  int64_t token_start() const { return oov_start() + o.num_oov_indices; }
  int64_t vocabulary_size() const { return token_start() + int64_t(tokens.size()); }
  /// The width of non-int outputs (max_tokens with pad_to_max_tokens, else the vocabulary).
  int64_t depth() const;
  /// The index of one token; kDropped for the mask token outside int mode (bincount drops it).
  int64_t lookup(std::string_view token) const;
  /// Installs `tokens` (without special tokens) as the vocabulary, checking max_tokens and
  /// repeats.
  void install(std::vector<std::string> vocabulary);
  /// Keras's set_vocabulary, special tokens at the front recognised.
  void set_vocabulary(const std::vector<std::string>& vocabulary, const std::vector<float>& idf);
  /// Keras's finalize_state after adapt(): the vocabulary from the counts, idf weights.
  void finalize();
  /// Keras's get_vocabulary.
  std::vector<std::string> vocabulary(bool include_special_tokens) const;
  /// "StringLookup 'string_lookup'" for messages.
  std::string who() const { return cls + " '" + name + "'"; }
};

/// An index bincount drops (the mask token outside int mode).
inline constexpr int64_t kDropped = -1;

/// Keras's encode_categorical_inputs for rows of indices: `rank1` rows hold one sample each
/// ([N] input: one_hot -> [N, depth]; multi_hot / count -> one [depth] row, as Keras's bincount
/// of a rank-1 tensor); otherwise [N, k] -> [N, depth] (one_hot needs k == 1). Indices outside
/// [0, depth) are dropped (tf.math.bincount), or an error naming `who` when strict. idf (tf_idf)
/// multiplies the counts.
Tensor encode_categorical(const std::vector<std::vector<int64_t>>& rows, bool rank1, int64_t depth,
                          const std::string& mode, const std::vector<float>* idf,
                          const std::string& who, bool strict);

/// Rows of ids -> an int tensor [N, L] (padded with 0 / cut to `length`; -1: the longest row).
Tensor pad_rows(const std::vector<std::vector<int64_t>>& rows, int64_t length, DType dtype);

}  // namespace lockstep
