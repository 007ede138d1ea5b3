// Keras's 1D (sequence) layers: Conv1D, the 1D pooling layers, and the reshaping layers for
// (batch, steps, features) tensors, plus Permute, RepeatVector and TimeDistributed. Included by
// lockstep/nn/layers.h; the same conventions (Keras's names, defaults and weight order):
//   auto y = layers::Conv1D(64, 5, {.padding = "causal", .activation = "relu"})(x);
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep::layers {

/// Conv1D's options (keras.layers.Conv1D's keyword arguments and defaults).
struct Conv1DOptions {
  int64_t strides = 1;                                ///< the step between windows
  std::string padding = "valid";                      ///< "valid" | "same" | "causal"
  int64_t dilation_rate = 1;                          ///< the kernel's dilation
  int64_t groups = 1;                                 ///< channels split in `groups` groups
  std::string activation = "linear";                  ///< applied to the output
  bool use_bias = true;                               ///< add a bias per filter
  std::string kernel_initializer = "glorot_uniform";  ///< the kernel's initializer
  std::string bias_initializer = "zeros";             ///< the bias's initializer
  double kernel_regularizer_l2 = 0.0;                 ///< L2 penalty factor on the kernel (0: none)
  double bias_regularizer_l2 = 0.0;                   ///< L2 penalty factor on the bias (0: none)
  std::string name;                                   ///< "" = "conv1d", "conv1d_1", ...
};
/// keras.layers.Conv1D: [N, W, C] -> [N, W', filters]; kernel [kernel_size, C / groups,
/// filters] (Keras's layout). "causal" pads dilation_rate * (kernel_size - 1) zeros ahead of
/// the sequence, so step t sees only steps <= t. Runs as conv2d over a unit height axis.
LayerHandle Conv1D(int64_t filters, int64_t kernel_size, Conv1DOptions o = {});

/// The 1D pooling layers' options.
struct Pool1DOptions {
  int64_t strides = 0;            ///< 0: pool_size (Keras's None)
  std::string padding = "valid";  ///< "valid" | "same"
  std::string name;               ///< "" = a unique default
};
/// keras.layers.MaxPooling1D: the maximum of each window of pool_size steps; [N, W, C].
LayerHandle MaxPooling1D(int64_t pool_size = 2, Pool1DOptions o = {});
/// keras.layers.AveragePooling1D: the mean of each window ("same" padding excludes the padding).
LayerHandle AveragePooling1D(int64_t pool_size = 2, Pool1DOptions o = {});
/// keras.layers.GlobalAveragePooling1D: [N, W, C] -> [N, C] ([N, 1, C] with keepdims). With a
/// mask, the mean over the unmasked steps only (Keras).
LayerHandle GlobalAveragePooling1D(bool keepdims = false, std::string name = "");
/// keras.layers.GlobalMaxPooling1D: [N, W, C] -> [N, C] ([N, 1, C] with keepdims). Takes a
/// masked input and, as Keras 3 does, takes the maximum over every step (the mask is dropped).
LayerHandle GlobalMaxPooling1D(bool keepdims = false, std::string name = "");

/// keras.layers.UpSampling1D: each step repeated `size` times, [N, W, C] -> [N, W * size, C].
LayerHandle UpSampling1D(int64_t size = 2, std::string name = "");
/// keras.layers.ZeroPadding1D: zeros ahead of and behind each sequence. padding: {p} (both
/// ends) or {left, right}.
LayerHandle ZeroPadding1D(std::vector<int64_t> padding = {1}, std::string name = "");
/// keras.layers.Cropping1D: steps removed from both ends. cropping: {c} (both) or {left, right}.
LayerHandle Cropping1D(std::vector<int64_t> cropping = {1, 1}, std::string name = "");
/// keras.layers.SpatialDropout1D: Dropout that drops whole channels, [N, W, C]: one draw per
/// (example, channel), shared along the steps. seed 0: drawn from the global seed.
LayerHandle SpatialDropout1D(double rate, uint64_t seed = 0, std::string name = "");
/// keras.layers.RepeatVector: [N, F] -> [N, n, F].
LayerHandle RepeatVector(int64_t n, std::string name = "");
/// keras.layers.Permute: the non-batch axes permuted; dims is 1-based ({2, 1}: [N, A, B] ->
/// [N, B, A]). Runs the transpose op.
LayerHandle Permute(std::vector<int64_t> dims, std::string name = "");
/// keras.layers.TimeDistributed: `layer` applied to every step of [N, T, ...] (one call on the
/// [N * T, ...] reshape); its weights are the inner layer's.
LayerHandle TimeDistributed(LayerHandle layer, std::string name = "");

}  // namespace lockstep::layers
