// Keras's sequence-input layers: Embedding (a lookup table of vectors, optionally producing a
// mask for id 0) and Masking (a mask for the steps whose features all equal a value).
#pragma once
#include <string>

#include "lockstep/nn/layer.h"

namespace lockstep::layers {

/// Embedding's options (keras.layers.Embedding's keyword arguments and defaults).
struct EmbeddingOptions {
  /// Keras's default "uniform": RandomUniform in [-0.05, 0.05] ("uniform" is read as this).
  std::string embeddings_initializer = "random_uniform";
  double embeddings_regularizer_l2 = 0.0;  ///< L2 penalty factor on the table (0: none)
  /// Id 0 is padding: the layer's output carries a mask (Keras's mask_zero), 0 where the id is 0.
  /// Then ids run over [0, input_dim) as without it (Keras: input_dim counts the padding id).
  bool mask_zero = false;
  std::string name;  ///< "" = "embedding", "embedding_1", ...
};
/// keras.layers.Embedding: integer ids of any shape [N, ...] (int32 or int64; float ids are
/// truncated) -> [N, ..., output_dim], row `id` of the table `embeddings` [input_dim,
/// output_dim]. An id outside [0, input_dim) is an error naming the layer, the id and the range.
/// Under mixed_bfloat16 the table is read in bfloat16 and the output is bfloat16.
LayerHandle Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions o = {});

/// keras.layers.Masking: y = x where any feature (last axis) of a step differs from
/// `mask_value`, 0 where all equal it; the output carries that mask ([N, T], 1 = kept).
LayerHandle Masking(double mask_value = 0.0, std::string name = "");

}  // namespace lockstep::layers
