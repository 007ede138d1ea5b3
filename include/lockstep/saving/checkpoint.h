// Checkpoints of a Model (tf.train.Checkpoint's role): weights, optionally with the compiled
// optimizer's state and training progress, in io's atomic checkpoint files.
//
// Weights are matched to the model by position (Keras order) and checked by shape, so a model
// rebuilt in another process (where default layer names get other suffixes) loads fine.
// Strategy-agnostic: replicas share one set of weights, so a file written under any replica
// count loads under any other. Under a multi-worker strategy only the chief writes.
#pragma once
#include <string>

#include "lockstep/io/checkpoint.h"

namespace lockstep {
class Model;
}

namespace lockstep::train {

/// Weights only (Keras model.save_weights / load_weights). save_weights is a no-op on a
/// non-chief worker (returns false).
///@{
bool save_weights(const Model& model, const std::string& path);
void load_weights(Model& model, const std::string& path);
///@}

/// Model weights + the compiled optimizer's variables (iterations, slots) + progress.
class Checkpoint {
 public:
  /// A checkpoint of `model` (which must outlive it).
  explicit Checkpoint(Model& model) : model_(model) {}
  /// Returns false (and writes nothing) on a non-chief worker.
  bool save(const std::string& path, const io::TrainingProgress& progress = {}) const;
  /// Loads weights and optimizer state (creating the optimizer's slots if no program has yet)
  /// and returns the progress stored in the file.
  io::TrainingProgress restore(const std::string& path);

 private:
  Model& model_;
};

}  // namespace lockstep::train
