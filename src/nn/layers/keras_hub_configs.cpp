// Registers KerasHub's layers under their registered names ("keras_hub>PositionEmbedding"), as
// KerasHub's .keras files name them (src/nn/config.cpp looks them up by registered_name).
#include "nn/layers/keras_hub_util.h"

namespace lockstep {

void register_keras_hub_layers() {
  using namespace keras_hub_detail;  // NOLINT: the factories
  register_layer("keras_hub>PositionEmbedding", position_embedding_from_config);
  register_layer("keras_hub>ReversibleEmbedding", reversible_embedding_from_config);
  register_layer("ReversibleEmbedding", [](const json& c) {  // Keras's own (keras.layers)
    LayerPtr l = reversible_embedding_from_config(c);
    std::dynamic_pointer_cast<HubLayer>(l)->keras_core_ = true;
    return l;
  });
  register_layer("keras_hub>TokenAndPositionEmbedding", token_and_position_embedding_from_config);
  register_layer("keras_hub>SinePositionEncoding", sine_position_encoding_from_config);
  register_layer("keras_hub>RotaryEmbedding", rotary_embedding_from_config);
  for (std::string cls : {"TransformerEncoder", "TransformerDecoder"})
    register_layer("keras_hub>" + cls,
                   [cls](const json& c) { return transformer_from_config(cls, c); });
  // A backbone inside a model (a task model's `backbone`): its network as a nested layer.
  for (std::string cls : {"BertBackbone", "GPT2Backbone"})
    register_layer("keras_hub>" + cls, [cls](const json& c) {
      return keras_hub_model_from_config({{"class_name", cls}, {"config", c}})->as_layer();
    });
}

}  // namespace lockstep
