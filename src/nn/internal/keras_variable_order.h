// A layer's weights in Keras's trainable_variables order (shared with the train module, which
// writes a saved optimizer's slots in that order: src/train/optimizer_state.cpp).
#pragma once
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep {

// Its own weights, then its sublayers' in the order Keras tracks them
// (KerasLayerHooks::sublayer_weights: a KerasHub TransformerDecoder lists the attention, its
// norm, the two feed-forward dense layers, then their norm), which need not be the order
// Lockstep made them in; layer.weights() for a layer without sublayers.
std::vector<VariablePtr> keras_variable_order(const Layer& layer);

}  // namespace lockstep
