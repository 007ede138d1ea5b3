// Keras's EinsumDense and the normalisation / softmax / attention layers the transformers need:
// EinsumDense, RMSNormalization, UnitNormalization, Softmax, AdditiveAttention. Included by
// lockstep/nn/layers.h; the same conventions (Keras's names, defaults and weight layout):
//   auto q = layers::EinsumDense("btd,dhk->bthk", {-1, 4, 16}, {.bias_axes = "hk"})(x);
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep::layers {

/// EinsumDense's options (keras.layers.EinsumDense's keyword arguments and defaults).
struct EinsumDenseOptions {
  std::string activation = "linear";                  ///< applied to the output
  std::string bias_axes;                              ///< output letters the bias spans ("": none)
  std::string kernel_initializer = "glorot_uniform";  ///< the kernel's initializer
  std::string bias_initializer = "zeros";             ///< the bias's initializer
  double kernel_regularizer_l2 = 0.0;                 ///< L2 penalty factor on the kernel (0: none)
  double bias_regularizer_l2 = 0.0;                   ///< L2 penalty factor on the bias (0: none)
  std::string name;                                   ///< "" = "einsum_dense", ...
};
/// keras.layers.EinsumDense: einsum(equation, x, kernel) (+ bias) then activation. `equation` is
/// "<input>,<kernel>-><output>" over single letters (an ellipsis "..." allowed in the input and
/// output); `output_shape` is the output's shape without the batch axis, -1 (Keras's None) for
/// an axis taken from the input. Weights: kernel (the kernel letters' shape), bias (the
/// bias_axes letters' shape), named as Keras names them.
LayerHandle EinsumDense(std::string equation, std::vector<int64_t> output_shape,
                        EinsumDenseOptions o = {});

/// RMSNormalization's options (keras.layers.RMSNormalization).
struct RMSNormOptions {
  int64_t axis = -1;      ///< the normalised axis
  double epsilon = 1e-6;  ///< added to the mean square
  std::string name;       ///< "" = "rms_normalization", ...
};
/// keras.layers.RMSNormalization: x * rsqrt(mean(x^2, axis) + epsilon) * scale; weight "scale"
/// of the axis's size (ones). Computes in float32 under mixed_bfloat16.
LayerHandle RMSNormalization(RMSNormOptions o = {});

/// keras.layers.UnitNormalization: x / max(||x||_2 over `axis`, 1e-6) (no weights). axis: one or
/// more axes (negative from the end).
LayerHandle UnitNormalization(std::vector<int64_t> axis = {-1}, std::string name = "");

/// keras.layers.Softmax: the softmax over `axis`; with a mask (an incoming mask or a second
/// input, 1 = keep), masked entries get zero weight (Keras adds -1e9 to them, then multiplies
/// the result by the mask).
LayerHandle Softmax(std::vector<int64_t> axis = {-1}, std::string name = "");

/// AdditiveAttention's options (keras.layers.AdditiveAttention).
struct AdditiveAttentionOptions {
  bool use_scale = true;  ///< learn the "scale" vector [dim] applied inside the tanh
  double dropout = 0.0;   ///< dropout on the attention weights (training only)
  uint64_t seed = 0;      ///< dropout's seed (0: from the global seed)
  std::string name;       ///< "" = "additive_attention", ...
};
/// keras.layers.AdditiveAttention (Bahdanau): inputs [query [B, Tq, D], value [B, Tv, D]
/// (, key [B, Tv, D])]; scores[b, i, j] = sum_d scale_d * tanh(q[b, i, d] + k[b, j, d]);
/// output softmax(scores) @ value. A mask on the value (incoming, 1 = keep) hides those steps;
/// a mask on the query zeroes those output rows, as Keras does.
LayerHandle AdditiveAttention(AdditiveAttentionOptions o = {});

}  // namespace lockstep::layers
