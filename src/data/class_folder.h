// The class-folder indexing shared by image_dataset_from_directory and
// text_dataset_from_directory (private to the data module): one walk, one set of rules (symlink
// loops, FIFOs and devices named, an empty class folder an error), messages naming the loader.
#pragma once
#include <string>

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

}  // namespace lockstep::data
