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
// A compiled model's file also holds Keras's "compile_config" (optimizer, loss, metrics) in
// config.json and the optimizer's variables under optimizer/vars/<i> in model.weights.h5
// (Keras 3's layout: iteration, learning_rate unless a schedule, then the slots in Keras's
// order), so load_model returns a compiled model whose training resumes where it stopped, and
// Keras's own compiled files load the same way.
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/config.h"
#include "lockstep/trainers/model.h"

namespace lockstep {

/// A model from a Keras 3 model config (Sequential or Functional, as model.get_config() gives).
Model model_from_config(const json& config);
/// keras.models.model_from_json: a model (new weights) from Python's model.to_json().
Model model_from_json(const std::string& json_text);

/// What save_model writes beyond the architecture and weights.
struct SaveOptions {
  /// Write compile_config and the optimizer's state when the model is compiled (Keras 3 always
  /// does); false: architecture and weights only.
  bool include_optimizer = true;
  /// Extra metadata.json entries, e.g. {"class_names": [...]} (lockstep train writes them and
  /// lockstep predict reads them); keras_version, date_saved and producer are added.
  json metadata = json::object();
};
/// keras model.save(path): a Keras 3 `.keras` file (config, weights, and the optimizer's state
/// when compiled), written atomically; only the chief writes under a multi-worker strategy.
void save_model(const Model& model, const std::string& path, const SaveOptions& options = {});
/// keras.saving.load_model(path, compile=True): with compile, a file with a compile_config comes
/// back compiled, its optimizer's variables loaded; an optimizer, loss or option Lockstep lacks
/// is an error naming it (load with compile = false to get the model uncompiled).
Model load_model(const std::string& path, bool compile = true);
/// The metadata.json of a .keras file (keras_version, date_saved, and any extra entries).
json load_model_metadata(const std::string& path);

/// True when `path` names a Keras weights file (ends in ".h5" or ".hdf5").
bool is_keras_weights_path(const std::string& path);
/// Writes the weights as Keras's `.weights.h5` (HDF5, Keras 3's layout); a path ending in ".h5"
/// or ".hdf5" but not ".weights.h5" gets Keras 2's legacy layout (save_legacy_weights), which
/// Keras 3 reads with model.load_weights("x.h5").
void save_keras_weights(const Network& model, const std::string& path);

// LoadWeightsOptions and LoadWeightsReport: lockstep/trainers/model.h.
/// Reads a Keras weights file into `model`: Keras 3's `.weights.h5` layout, or Keras 2's legacy
/// layout (lockstep/io/keras_file.h), told apart by content. A missing, extra or wrong-shape
/// weight is an error naming the file, the layer, and both shapes, unless skip_mismatch.
/// Nothing changes when it fails.
LoadWeightsReport load_keras_weights(Network& model, const std::string& path,
                                     const LoadWeightsOptions& options = {});
/// Writes Keras 2's legacy layout: layer_names = model.layers, one group per layer with its
/// weights in Keras's legacy order (trainable first), named "<layer>/<weight>".
void save_legacy_weights(const Network& model, const std::string& path);
/// Reads the legacy layout (load_keras_weights picks it by itself).
LoadWeightsReport load_legacy_weights(Network& model, const std::string& path,
                                      const LoadWeightsOptions& options = {});

}  // namespace lockstep
