// Keras 3 files for Models: `.keras` archives (config.json + metadata.json +
// model.weights.h5) and `.weights.h5` weight files in Keras's HDF5 layout
// (layers/<snake_case_class>[_N]/vars/<i>, layers in keras `model.layers` order), mapped onto
// io's files of named tensors (lockstep/io/keras_file.h).
//
//   model.save("m.keras");                 // Keras: keras.saving.load_model("m.keras")
//   Model m = load_model("m.keras");       // also files Keras wrote (model.save in Python)
//   model.save_weights("x.weights.h5");    // Keras layout; other names: Lockstep checkpoints
//   Model m2 = model_from_json(keras_model.to_json());
//
// Not yet: include_optimizer (the optimizer's config and state are not written, and a file's
// "optimizer" group is ignored on load; compile the loaded model yourself).
#pragma once
#include <string>

#include "lockstep/nn/config.h"
#include "lockstep/train/model.h"

namespace lockstep {

Model model_from_config(const json& config);
Model model_from_json(const std::string& json_text);

void save_model(const Network& model, const std::string& path);  // .keras
Model load_model(const std::string& path);                       // .keras

// True when `path` names a Keras weights file (ends in ".weights.h5" or ".h5").
bool is_keras_weights_path(const std::string& path);
void save_keras_weights(const Network& model, const std::string& path);
void load_keras_weights(Network& model, const std::string& path);

}  // namespace lockstep
