// Checkpoints: a model's weights, optionally with the optimizer's state and training progress,
// in one binary file written atomically (temporary file, fsync, rename, fsync of the folder),
// so a crash while saving never damages the last good checkpoint. A save first removes the
// temporaries ("<path>.tmp-<pid>") that earlier saves to the same path left when they were
// killed (their process is gone and no one holds them locked).
//
// File format (little-endian), version 1:
//   "LSCKPT\0\1"                     8 bytes magic (the last byte is the format version)
//   u64 metadata_bytes, metadata     JSON: {"format", "model", "epoch", "step", "optimizer", ...}
//   u64 tensor_count
//   per tensor: u32 name_bytes, name ("weights/<layer>/<weight>" or "optimizer/<variable>"),
//               u8 dtype (DType enum value), u8 rank, i64 dims[rank], u64 data_bytes, data
//   u32 CRC-32 (zlib) of every byte before it, then "LSCKEND\0"
//
// This module knows files of named tensors, not models: lockstep/saving/checkpoint.h maps a
// Model's weights and optimizer state onto them.
#pragma once
#include <string>
#include <vector>

#include "lockstep/core/json.h"
#include "lockstep/core/tensor.h"

namespace lockstep::io {

/// A tensor with its name in a file ("dense/kernel", "layers/dense/vars/0").
struct NamedTensor {
  std::string name;  ///< its path in the file
  Tensor value;      ///< its value
};

/// A checkpoint file's content: JSON metadata and named tensors.
struct CheckpointFile {
  json metadata = json::object();    ///< free-form (the writer's)
  std::vector<NamedTensor> tensors;  ///< in the file's order
};

/// Low level: writes atomically / reads and verifies (magic, sizes, checksum). Errors name the
/// file and what is wrong.
///@{
void write_checkpoint_file(const std::string& path, const CheckpointFile& file);
CheckpointFile read_checkpoint_file(const std::string& path);
///@}

/// Where training stands: epochs completed and steps done in the current epoch.
struct TrainingProgress {
  int epoch = 0;                ///< the epoch to run next (or to resume)
  int64_t step = 0;             ///< steps of that epoch already done
  json extra = json::object();  ///< anything else the writer keeps with it (seeds, ...)
};

}  // namespace lockstep::io
