// Keras 3 files as files of named tensors + JSON (this module knows no models:
// lockstep/saving/saving.h maps a Model onto them).
//
//   .weights.h5  an HDF5 file whose datasets are the tensors, at their names as HDF5 paths
//                ("layers/dense/vars/0"); groups are created as the paths need them.
//   .keras       a zip of config.json, metadata.json and model.weights.h5 (as above).
//
// Uses Debian's HDF5 C library and libzip. Errors name the file and the part; HDF5's own error
// stack is silenced (H5Eset_auto) so each failure is reported once, in our words.
//
// Both formats are built in memory (HDF5's core driver, libzip's buffer source) and written with
// write_file_atomic (lockstep/core/file_io.h): a failed save leaves the previous file
// byte-identical and no temporary behind. Reading a .keras never writes a file: its
// model.weights.h5 is opened as an in-memory HDF5 image. Sizes are checked before allocating:
// config.json and metadata.json at most 64 MiB uncompressed (by the zip's declared size), no
// member claiming more than deflate can expand to, every dataset's bytes overflow-checked and
// within the file that holds it (compressed ones within 1032x their stored size).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/core/json.h"
#include "lockstep/io/checkpoint.h"

namespace lockstep::io {

/// Writes `tensors` (f32/f64/i32/i64/u8 ...) at their names; `groups` are created even when
/// empty (Keras writes a "vars" group for every layer). Atomic and checked (see above).
void write_h5_tensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::vector<std::string>& groups = {});
/// Every dataset in the file, named by its path without the leading '/', in HDF5's order
/// (names sorted; "vars/10" after "vars/9" is NOT guaranteed: callers order by index).
std::vector<NamedTensor> read_h5_tensors(const std::string& path);

/// Keras 2's HDF5 weights layout, which the published keras.applications weight files use (and
/// Keras 2's model.save_weights("x.h5"), Keras 3's legacy model.save("x.h5") under
/// model_weights/): the root group's attribute `layer_names` lists the layers; each layer's group
/// lists its datasets in the attribute `weight_names` ("conv1/kernel:0", paths relative to the
/// group). Attributes over 64 KB come in chunks (layer_names0, layer_names1, ...), as Keras
/// writes them; strings may be fixed or variable length.
/// One layer's group of a legacy .h5 file.
struct LegacyLayerWeights {
  std::string layer;                 ///< the layer's name (its group)
  std::vector<NamedTensor> weights;  ///< in weight_names order, named as listed there
};
/// A whole legacy .h5 weights file (read_legacy_h5 / write_legacy_h5).
struct LegacyWeightsFile {
  std::vector<LegacyLayerWeights> layers;  ///< in layer_names order
  std::string keras_version;               ///< the file's keras_version attribute ("" when absent)
  std::string backend;                     ///< the file's backend attribute ("" when absent)
};
/// Whether `path` is an HDF5 file in the legacy layout (layer_names at the root or under
/// model_weights/); false for Keras 3's .weights.h5 layout. Errors only when it is not HDF5.
bool is_legacy_h5(const std::string& path);
/// Reads the legacy layout; errors name the file, the group and the attribute or dataset.
/// `budget`: the most bytes of weights to decode in all (0: only the file's own limits).
LegacyWeightsFile read_legacy_h5(const std::string& path, uint64_t budget = 0);
/// Writes the legacy layout (layer groups sorted by name, as Keras does); atomic. Refuses a
/// layer or weight name that would not read back as written (empty, a NUL, a trailing space).
void write_legacy_h5(const std::string& path, const LegacyWeightsFile& file);

/// The three parts of a Keras 3 `.keras` file, in memory.
struct KerasArchive {
  json config = json::object();      ///< config.json: the model's Keras config (class_name, config)
  json metadata = json::object();    ///< metadata.json: keras_version, date_saved, ...
  std::vector<NamedTensor> weights;  ///< model.weights.h5
  std::vector<std::string> groups;   ///< written even when empty
  /// Members under assets/ (Keras's save_assets: a lookup layer's vocabulary.txt at
  /// "assets/layers/<layer>/vocabulary.txt"), name -> bytes. Read: at most kMaxKerasAssets
  /// members of at most kMaxKerasAssetBytes each.
  std::vector<std::pair<std::string, std::string>> assets;
};
/// The most members under assets/ read_keras_archive reads.
inline constexpr size_t kMaxKerasAssets = 1024;
/// The largest asset member read_keras_archive reads (a vocabulary of millions of tokens).
inline constexpr uint64_t kMaxKerasAssetBytes = uint64_t(256) << 20;
/// Writes `archive` as a `.keras` zip at `path` (atomic and checked, see above).
void write_keras_archive(const std::string& path, const KerasArchive& archive);
/// Reads a `.keras` zip: its config.json, metadata.json and the tensors of model.weights.h5.
/// Errors name the file and the member; sizes are checked before anything is allocated.
/// `weight_budget`, when given, is called with config.json (a JSON object) before the weights
/// are read and returns the most bytes of tensors model.weights.h5 may decode to (what the model
/// that config describes can use); beyond it, the read is an error naming the file.
KerasArchive read_keras_archive(
    const std::string& path,
    const std::function<uint64_t(const json& config)>& weight_budget = nullptr);

}  // namespace lockstep::io
