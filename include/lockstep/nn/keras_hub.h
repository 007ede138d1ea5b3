// KerasHub's building blocks (keras_hub.layers) as Lockstep layers, with KerasHub's configs,
// registered names ("keras_hub>PositionEmbedding") and weight layout, so .keras files that
// keras-hub writes load here and Lockstep's load in keras-hub. As in KerasHub:
//
//   auto ids = Input({32}, "token_ids", DType::i32);
//   auto x = keras_hub::TokenAndPositionEmbedding(100, 32, 64)(ids);
//
// Position tables (SinePositionEncoding, RotaryEmbedding) are computed for the static sequence
// length of the input when the layer is built. Integer ids embed and float features give logits
// in ReversibleEmbedding (KerasHub's `reverse=True`), one shared table for both when tied.
#pragma once
#include <optional>
#include <string>

#include "lockstep/nn/layer.h"
#include "lockstep/nn/network.h"

namespace lockstep::keras_hub {

/// keras_hub.layers.PositionEmbedding: a learned table `embeddings` [sequence_length, features];
/// for inputs [N, T, features] it returns rows start_index..start_index+T-1, broadcast over N.
LayerHandle PositionEmbedding(int64_t sequence_length, std::string initializer = "glorot_uniform",
                              std::string name = "");

/// keras_hub.layers.ReversibleEmbedding's options.
struct ReversibleEmbeddingOptions {
  bool tie_weights = true;  ///< logits use the embedding table (else `reverse_embeddings`)
  std::string embeddings_initializer = "random_uniform";  ///< Keras's "uniform"
  bool mask_zero = false;                                 ///< id 0 is padding (a mask)
  std::optional<double> logit_soft_cap;                   ///< logits = tanh(logits / cap) * cap
  std::string name;                                       ///< "" = "reversible_embedding", ...
};
/// keras_hub.layers.ReversibleEmbedding (Keras's ReversibleEmbedding): integer ids [N, ...] ->
/// [N, ..., output_dim] like Embedding; float features [N, ..., output_dim] -> logits
/// [N, ..., input_dim] against the table's transpose (tie_weights) or `reverse_embeddings`
/// [output_dim, input_dim] (KerasHub's `layer(x, reverse=True)`).
LayerHandle ReversibleEmbedding(int64_t input_dim, int64_t output_dim,
                                ReversibleEmbeddingOptions o = {});

/// keras_hub.layers.TokenAndPositionEmbedding's options.
struct TokenAndPositionEmbeddingOptions {
  bool tie_weights = true;                                ///< its token embedding's
  std::string embeddings_initializer = "random_uniform";  ///< both tables (Keras's "uniform")
  bool mask_zero = false;                                 ///< id 0 is padding (a mask)
  std::string name;  ///< "" = "token_and_position_embedding", ...
};
/// keras_hub.layers.TokenAndPositionEmbedding: a ReversibleEmbedding of the ids plus a
/// PositionEmbedding, kept as KerasHub keeps them (".../token_embedding/vars/0",
/// ".../position_embedding/vars/0").
LayerHandle TokenAndPositionEmbedding(int64_t vocabulary_size, int64_t sequence_length,
                                      int64_t embedding_dim,
                                      TokenAndPositionEmbeddingOptions o = {});

/// keras_hub.layers.SinePositionEncoding: the fixed sinusoids of "Attention Is All You Need"
/// for inputs [N, T, features] (sin on even features, cos on odd ones), broadcast over N.
LayerHandle SinePositionEncoding(double max_wavelength = 10000, std::string name = "");

/// keras_hub.layers.RotaryEmbedding's options (rope_type "linear", "dynamic" or "default";
/// KerasHub's "yarn" is refused).
struct RotaryEmbeddingOptions {
  double max_wavelength = 10000;           ///< the longest wavelength of the rotations
  double scaling_factor = 1.0;             ///< positions are divided by it
  std::string rope_type = "linear";        ///< linear, dynamic or default
  int64_t sequence_axis = 1;               ///< the axis of the positions
  int64_t feature_axis = -1;               ///< the axis whose pairs are rotated
  std::optional<int64_t> denominator_dim;  ///< the frequencies' denominator (default: features)
  std::string name;                        ///< "" = "rotary_embedding", ...
};
/// keras_hub.layers.RotaryEmbedding: rotates each pair (x[i], x[i + d/2]) of the feature axis by
/// position * max_wavelength^(-2i/d): y = x * cos + rotate_half(x) * sin.
LayerHandle RotaryEmbedding(RotaryEmbeddingOptions o = {});

/// keras_hub.layers.TransformerEncoder / TransformerDecoder's options.
struct TransformerOptions {
  double dropout = 0;                ///< attention and residual dropout (training only)
  std::string activation = "relu";   ///< the feed-forward's (also "gelu_approximate")
  double layer_norm_epsilon = 1e-5;  ///< the layer norms'
  std::string kernel_initializer = "glorot_uniform";  ///< every Dense kernel's
  std::string bias_initializer = "zeros";             ///< every Dense bias's
  bool normalize_first = false;  ///< pre-norm (GPT-2) instead of post-norm (BERT)
  bool use_causal_mask = true;   ///< TransformerDecoder: each step sees only the steps before it
  std::string name;              ///< "" = "transformer_encoder", ...
};
/// keras_hub.layers.TransformerEncoder: self-attention (num_heads heads of features / num_heads)
/// and a feed-forward block of intermediate_dim, each with a residual and a layer norm. Inputs
/// [N, T, features] and optionally a padding mask [N, T] (1 = a real step), then an attention
/// mask [N, T, T]: `enc({x, padding_mask})`. A Keras mask on x (mask_zero upstream) masks the
/// keys when no padding mask is given and, as Keras's MultiHeadAttention does, the queries too.
LayerHandle TransformerEncoder(int64_t intermediate_dim, int64_t num_heads,
                               TransformerOptions o = {});
/// keras_hub.layers.TransformerDecoder: causal self-attention, cross-attention over an encoder
/// sequence when one is passed (`dec({x, encoder_sequence})`, built into the layer on its first
/// call), then the feed-forward block. Padding masks come from the inputs' Keras masks, or by
/// keyword in a loaded config (decoder_padding_mask=, encoder_padding_mask=, ...).
LayerHandle TransformerDecoder(int64_t intermediate_dim, int64_t num_heads,
                               TransformerOptions o = {});

/// keras_hub.models.BertBackbone's hyperparameters (its config).
struct BertBackboneOptions {
  int64_t vocabulary_size = 0;        ///< token ids are in [0, vocabulary_size)
  int64_t num_layers = 0;             ///< transformer blocks
  int64_t num_heads = 0;              ///< attention heads per block
  int64_t hidden_dim = 0;             ///< the model width
  int64_t intermediate_dim = 0;       ///< the feed-forward width
  double dropout = 0.1;               ///< dropout rate (training only)
  int64_t max_sequence_length = 512;  ///< positions the position embedding holds
  int64_t num_segments = 2;           ///< segment ids are in [0, num_segments)
  /// The inputs' static length (0: max_sequence_length); Lockstep compiles for one length.
  int64_t sequence_length = 0;
  std::string name = "bert_backbone";  ///< the model's name
  std::string dtype = "float32";       ///< the layers' policy ("mixed_bfloat16")
};
/// keras_hub.models.BertBackbone, built as KerasHub builds it: inputs token_ids, segment_ids and
/// padding_mask (int32 [N, T]), outputs sequence_output [N, T, hidden] and pooled_output
/// [N, hidden] (tanh Dense of the first step). Saved, its config is the hyperparameters under
/// "keras_hub>BertBackbone", so keras-hub loads the file.
Network BertBackbone(const BertBackboneOptions& o);

/// keras_hub.models.GPT2Backbone's hyperparameters (its config).
struct GPT2BackboneOptions {
  int64_t vocabulary_size = 0;         ///< token ids are in [0, vocabulary_size)
  int64_t num_layers = 0;              ///< transformer blocks
  int64_t num_heads = 0;               ///< attention heads per block
  int64_t hidden_dim = 0;              ///< the model width
  int64_t intermediate_dim = 0;        ///< the feed-forward width
  double dropout = 0.1;                ///< dropout rate (training only)
  int64_t max_sequence_length = 1024;  ///< positions the position embedding holds
  int64_t sequence_length = 0;         ///< the inputs' static length (0: max_sequence_length)
  std::string name = "gpt2_backbone";  ///< the model's name
  std::string dtype = "float32";       ///< the layers' policy ("mixed_bfloat16")
};
/// keras_hub.models.GPT2Backbone: inputs token_ids and padding_mask (int32 [N, T]), output the
/// final layer norm's [N, T, hidden]; pre-norm causal TransformerDecoders.
Network GPT2Backbone(const GPT2BackboneOptions& o);

}  // namespace lockstep::keras_hub
