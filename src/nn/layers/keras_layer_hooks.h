// What a Keras config says about a layer beyond its class and config, for the layers that need
// it (KerasHub's): the module and registered name it is saved under ("keras_hub>
// TransformerEncoder"), the keyword arguments of its calls (padding_mask=<tensor>,
// reverse=True), and weights kept under sublayer paths (".../token_embedding/vars/0").
// src/nn/config.cpp asks a layer for these through dynamic_cast; a layer without them is saved
// as a plain keras.layers one.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/json.h"
#include "lockstep/nn/layer.h"
#include "lockstep/nn/network.h"

namespace lockstep {

/// A layer's Keras call signature beyond its positional tensors, and where its weights lie.
class KerasLayerHooks {
 public:
  virtual ~KerasLayerHooks() = default;
  /// The config entry's "module" ("keras_hub.src.layers.modeling.position_embedding").
  virtual std::string keras_module() const = 0;
  /// The config entry's "registered_name" ("keras_hub>PositionEmbedding"; "" writes null).
  virtual std::string keras_registered_name() const = 0;
  /// Loading: one inbound node's "kwargs" object and how many tensors its "args" held. Returns
  /// the names of the kwargs that hold tensors, in the order their tensors are to follow the
  /// positional ones in the layer's inputs; throws (naming the layer and the argument) for a
  /// keyword it does not take or a value it cannot represent.
  virtual std::vector<std::string> bind_call_kwargs(const json& kwargs, size_t num_args) = 0;
  /// Saving: how one call of this layer is written. `num_args` of the inputs are positional,
  /// the rest are the keyword tensors named in `tensor_kwargs` (in input order); `kwargs` holds
  /// the other keyword arguments.
  struct CallSpec {
    size_t num_args = 1;                     ///< positional tensors
    std::vector<std::string> tensor_kwargs;  ///< names of the remaining inputs
    json kwargs = json::object();            ///< non-tensor keyword arguments
  };
  /// The spec of `call` (a call of this layer).
  virtual CallSpec call_spec(const LayerCall& call) const = 0;
  /// Weights kept below the layer's own path, by sublayer path relative to it
  /// ("_self_attention_layer/query_dense"), in the order Keras tracks the sublayers (its
  /// trainable_variables: a saved optimizer's slots follow it). Empty: all weights are the
  /// layer's own "vars".
  virtual std::vector<std::pair<std::string, std::vector<VariablePtr>>> sublayer_weights() const {
    return {};
  }
};

/// The hooks of `l`, or nullptr for a layer without them.
inline const KerasLayerHooks* keras_hooks(const Layer& l) {
  return dynamic_cast<const KerasLayerHooks*>(&l);
}

/// KerasHub's layers and backbones (src/nn/layers/keras_hub*.cpp): registers their factories
/// under their registered names ("keras_hub>TransformerEncoder").
void register_keras_hub_layers();

/// A KerasHub model config ({"class_name": "BertBackbone", "registered_name":
/// "keras_hub>BertBackbone", "config": {hyperparameters}}) as the network KerasHub builds from
/// it; std::nullopt for a class Lockstep does not build.
std::optional<Network> keras_hub_model_from_config(const json& entry);
/// The KerasHub model config `net` was built from (its inputs and outputs are a backbone's):
/// what get_config() writes for it, so KerasHub rebuilds the same class. nullopt otherwise.
std::optional<json> keras_hub_model_config(const Network& net);

}  // namespace lockstep
