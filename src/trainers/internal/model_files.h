// How Model::save, save_weights and load_weights reach the saving module. saving sits above
// trainers in src/modules.txt (load_model and model_from_config build Models), so trainers may
// not call it; saving fills these in when its library loads (src/saving/model_files.cpp), and
// Model's methods call them after bringing the weights to the host (src/trainers/model.cpp).
#pragma once
#include <string>

#include "lockstep/trainers/model.h"

namespace lockstep {

struct ModelFiles {
  // model.save(path): the .keras file (saving's save_model), written by the chief only.
  void (*save)(const Model& model, const std::string& path) = nullptr;
  // model.save_weights(path): Keras's .weights.h5 / legacy .h5 by the path's name, otherwise
  // a Lockstep checkpoint (train::save_weights).
  void (*save_weights)(const Model& model, const std::string& path) = nullptr;
  // model.load_weights(path, options): what save_weights wrote, or a Keras weights file.
  LoadWeightsReport (*load_weights)(Model& model, const std::string& path,
                                    const LoadWeightsOptions& options) = nullptr;
};

// The one table (empty until saving's library has loaded; Model's methods then throw).
ModelFiles& model_files();

}  // namespace lockstep
