// The class-folder indexing shared by image_dataset_from_directory and
// text_dataset_from_directory (private to the data module): one walk, one set of rules (symlink
// loops, FIFOs and devices named, an empty class folder an error), messages naming the loader.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/data/image_folder.h"

namespace lockstep::data {

/// How messages name the loader and its files.
struct FolderKind {
  const char* fn;       ///< "image_dataset_from_directory"
  const char* noun;     ///< "images" ("contains no images")
  const char* file;     ///< "image" ("not a regular image file")
  const char* options;  ///< "ImageFolderOptions" (the seed's option, in draw_seed's message)
};

/// index_image_directory with `kind`'s names in its messages; `o.allowed_extensions` picks the
/// files (the image-only options are validated with their defaults).
ImageFolderIndex index_class_folder(const std::string& directory, const ImageFolderOptions& o,
                                    const FolderKind& kind);

/// The files (one string component) and, unless label_mode is "none" or there are no labels,
/// their labels as `label_mode` asks ("int": i32, "categorical": one-hot f32, "binary": f32 [1]),
/// shuffled (when `shuffle`) with a buffer of 8 batches; with the labels' spec. `fn` names the
/// loader in errors.
std::pair<Dataset, std::optional<ComponentSpec>> labelled_files(
    const std::vector<std::string>& files, const std::vector<int>& labels,
    const std::vector<std::string>& class_names, const std::string& label_mode, bool shuffle,
    int batch_size, uint64_t shuffle_seed, const char* fn);

}  // namespace lockstep::data
