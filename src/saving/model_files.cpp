// Model::save, save_weights and load_weights, as saving carries them out: what
// src/trainers/model.cpp did after bringing the weights to the host, registered in trainers'
// table (trainers/internal/model_files.h) when this library loads.
#include "trainers/internal/model_files.h"

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/saving/checkpoint.h"
#include "lockstep/saving/saving.h"

namespace lockstep {
namespace {

void save(const Model& model, const std::string& path) {
  if (!model.strategy() || model.strategy()->is_chief()) save_model(model, path);
}

void save_weights(const Model& model, const std::string& path) {
  if (is_keras_weights_path(path)) {
    if (!model.strategy() || model.strategy()->is_chief()) save_keras_weights(model, path);
    return;
  }
  train::save_weights(model, path);
}

LoadWeightsReport load_weights(Model& model, const std::string& path,
                               const LoadWeightsOptions& options) {
  if (is_keras_weights_path(path)) return load_keras_weights(model, path, options);
  train::load_weights(model, path);
  return {};
}

const bool registered = [] {
  ModelFiles& files = model_files();
  files.save = save;
  files.save_weights = save_weights;
  files.load_weights = load_weights;
  return true;
}();

}  // namespace
}  // namespace lockstep
