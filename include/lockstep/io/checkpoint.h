// Checkpoints: a model's weights, optionally with the optimizer's state and training progress,
// in one binary file written atomically (temporary file, fsync, rename, fsync of the folder),
// so a crash while saving never damages the last good checkpoint.
//
// File format (little-endian), version 1:
//   "LSCKPT\0\1"                     8 bytes magic (the last byte is the format version)
//   u64 metadata_bytes, metadata     JSON: {"format", "model", "epoch", "step", "optimizer", ...}
//   u64 tensor_count
//   per tensor: u32 name_bytes, name ("weights/<layer>/<weight>" or "optimizer/<variable>"),
//               u8 dtype (DType enum value), u8 rank, i64 dims[rank], u64 data_bytes, data
//   u32 CRC-32 (zlib) of every byte before it, then "LSCKEND\0"
//
// Weights are matched to the model by position (Keras order) and checked by shape, so a model
// rebuilt in another process (where default layer names get other suffixes) loads fine.
// Strategy-agnostic: replicas share one set of weights, so a file written under any replica
// count loads under any other. Under a multi-worker strategy only the chief writes.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep {
class Model;
}

namespace lockstep::io {

using json = nlohmann::json;

struct NamedTensor {
  std::string name;
  Tensor value;
};

struct CheckpointFile {
  json metadata = json::object();
  std::vector<NamedTensor> tensors;
};

// Low level: writes atomically / reads and verifies (magic, sizes, checksum). Errors name the
// file and what is wrong.
void write_checkpoint_file(const std::string& path, const CheckpointFile& file);
CheckpointFile read_checkpoint_file(const std::string& path);

// Weights only (Keras model.save_weights / load_weights). save_weights is a no-op on a
// non-chief worker (returns false).
bool save_weights(const Model& model, const std::string& path);
void load_weights(Model& model, const std::string& path);

// Where training stands: epochs completed and steps done in the current epoch.
struct TrainingProgress {
  int epoch = 0;     // the epoch to run next (or to resume)
  int64_t step = 0;  // steps of that epoch already done
  json extra = json::object();
};

// Model weights + the compiled optimizer's variables (iterations, slots) + progress.
class Checkpoint {
 public:
  explicit Checkpoint(Model& model) : model_(model) {}
  // Returns false (and writes nothing) on a non-chief worker.
  bool save(const std::string& path, const TrainingProgress& progress = {}) const;
  // Loads weights and optimizer state (creating the optimizer's slots if no program has yet)
  // and returns the progress stored in the file.
  TrainingProgress restore(const std::string& path);

 private:
  Model& model_;
};

}  // namespace lockstep::io
