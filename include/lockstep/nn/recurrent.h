// Keras's recurrent layers: SimpleRNN, LSTM, GRU and the Bidirectional wrapper, over
// (batch, time, features) inputs, with Keras 3's weights (kernel, recurrent_kernel, bias, in
// Keras's gate order) and config. They take Keras masks: a masked step keeps the previous state.
//   auto h = layers::LSTM(64, {.return_sequences = true})(x);
//   auto y = layers::Bidirectional(layers::GRU(32))(h);
#pragma once
#include <optional>
#include <string>

#include "lockstep/nn/layer.h"

namespace lockstep::layers {

/// The recurrent layers' options (keras.layers.LSTM's keyword arguments and defaults; the ones
/// a layer does not have are ignored: unit_forget_bias is LSTM's, reset_after GRU's).
struct RNNOptions {
  std::string activation = "tanh";                    ///< "tanh" or "relu" (SimpleRNN)
  std::string recurrent_activation = "sigmoid";       ///< the gates' ("sigmoid"; LSTM, GRU)
  bool use_bias = true;                               ///< add the bias
  std::string kernel_initializer = "glorot_uniform";  ///< the input kernel's initializer
  std::string recurrent_initializer = "orthogonal";   ///< the recurrent kernel's initializer
  std::string bias_initializer = "zeros";             ///< the bias's initializer
  bool unit_forget_bias = true;                       ///< LSTM: the forget gate's bias starts at 1
  double dropout = 0.0;            ///< in training, dropout on the inputs (one mask per sequence)
  double recurrent_dropout = 0.0;  ///< in training, dropout on the state fed back
  bool return_sequences = false;   ///< output every step (batch, time, units), else the last
  bool return_state = false;       ///< also return the final states (h; LSTM: h, c)
  bool go_backwards = false;       ///< process the sequence in reverse (the output reversed too)
  bool stateful = false;           ///< must be false: Lockstep has no stateful RNNs
  bool unroll = false;             ///< accepted for Keras configs; changes nothing
  bool reset_after = true;         ///< GRU: the reset gate after the recurrent matmul (Keras 3)
  uint64_t seed = 0;               ///< dropout's seed (0: drawn from the global seed)
  std::string name;                ///< "" = "lstm", "lstm_1", ...
};
/// keras.layers.SimpleRNN: h_t = activation(x_t @ kernel + h_{t-1} @ recurrent_kernel + bias).
LayerHandle SimpleRNN(int64_t units, RNNOptions o = {});
/// keras.layers.LSTM: gates i, f, c, o; kernel (features, 4 units), recurrent_kernel
/// (units, 4 units), bias (4 units). Outputs: y[, h, c].
LayerHandle LSTM(int64_t units, RNNOptions o = {});
/// keras.layers.GRU: gates z, r, h; bias (2, 3 units) with reset_after (Keras 3's default),
/// (3 units) without. Outputs: y[, h].
LayerHandle GRU(int64_t units, RNNOptions o = {});

/// Bidirectional's options.
struct BidirectionalOptions {
  /// "concat", "sum", "mul", "ave" or "" (Keras's None: the two outputs separately).
  std::string merge_mode = "concat";
  /// The backward layer; empty: one made from the forward layer's config with go_backwards
  /// flipped (Keras's default).
  LayerHandle backward_layer;
  std::string name;  ///< "" = "bidirectional", ...
};
/// keras.layers.Bidirectional: runs `layer` forwards and a copy backwards over the sequence and
/// merges their outputs. With return_state: outputs, then the forward states, then the backward.
LayerHandle Bidirectional(LayerHandle layer, BidirectionalOptions o = {});

}  // namespace lockstep::layers
