// Keras 3 files as files of named tensors + JSON (this module knows no models:
// lockstep/train/saving.h maps a Model onto them).
//
//   .weights.h5  an HDF5 file whose datasets are the tensors, at their names as HDF5 paths
//                ("layers/dense/vars/0"); groups are created as the paths need them.
//   .keras       a zip of config.json, metadata.json and model.weights.h5 (as above).
//
// Uses Debian's HDF5 C library and libzip. Errors name the file and the part.
#pragma once
#include <string>
#include <vector>

#include "lockstep/core/json.h"
#include "lockstep/io/checkpoint.h"

namespace lockstep::io {

/// Writes `tensors` (f32/f64/i32/i64/u8 ...) at their names; `groups` are created even when
/// empty (Keras writes a "vars" group for every layer). Atomic (temporary file + rename).
void write_h5_tensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::vector<std::string>& groups = {});
/// Every dataset in the file, named by its path without the leading '/', in HDF5's order
/// (names sorted; "vars/10" after "vars/9" is NOT guaranteed: callers order by index).
std::vector<NamedTensor> read_h5_tensors(const std::string& path);

/// The parts of a Keras 3 `.keras` zip: config.json, metadata.json and model.weights.h5.
struct KerasArchive {
  json config = json::object();    ///< config.json
  json metadata = json::object();  ///< metadata.json
  std::vector<NamedTensor> weights;  ///< model.weights.h5
  std::vector<std::string> groups;   ///< written even when empty
};
/// Writes `archive` as a .keras zip at `path` (atomically); errors name the file.
void write_keras_archive(const std::string& path, const KerasArchive& archive);
/// Reads a .keras zip; errors name the file and the part (not a zip, no config.json, ...).
KerasArchive read_keras_archive(const std::string& path);

}  // namespace lockstep::io
