// The recurrent layers' hooks into the Keras file and config machinery (src/nn/config.cpp,
// src/nn/layers/layer_configs.cpp): Keras 3 keeps an RNN's weights under its cell, a
// Bidirectional's under forward_layer/cell and backward_layer/cell.
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/config.h"

namespace lockstep {

/// The weight slots of a SimpleRNN, LSTM, GRU or Bidirectional layer `l` stored at `path`
/// ("layers/lstm": the layer's own empty "vars", then "layers/lstm/cell"); empty for any other
/// layer.
std::vector<KerasWeightSlot> recurrent_weight_slots(const LayerPtr& l, const std::string& path);

/// Registers the config factories of SimpleRNN, LSTM, GRU and Bidirectional.
void register_recurrent_layers();

}  // namespace lockstep
