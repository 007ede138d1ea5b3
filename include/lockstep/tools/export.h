// Exports labelled image arrays (Fashion-MNIST, any IDX pair) to a folder of class
// subfolders of JPEG/PNG files — the layout image_dataset_from_directory reads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::tools {

/// What export_image_folder writes (`lockstep export-image-folder`'s flags).
struct ExportImageFolderOptions {
  int64_t limit_per_class = -1;  ///< < 0: every image
  std::string format = "mixed";  ///< "jpeg" | "png" | "mixed" (alternates per class: jpg, png, ...)
  int size = 0;                  ///< > 0: resize (bilinear) to size x size before encoding
  int jpeg_quality = 95;         ///< JPEG quality, 1..100
};

/// What export_image_folder wrote.
struct ExportImageFolderResult {
  int64_t files = 0;                    ///< files written in all
  std::vector<std::string> class_dirs;  ///< folder names, in label order
  std::vector<int64_t> per_class;       ///< files written per class
};

/// Filesystem-safe folder name for a class: letters, digits, '-', '_' and '.' are kept, every
/// other character (space, '/', ...) becomes '_'; an empty or dot-only name becomes "class".
std::string safe_class_dir_name(const std::string& name);

/// images: uint8 [N, H, W] or [N, H, W, C] (C = 1 or 3), or float32 (0..255, or 0..1 when
/// every value is <= 1); labels: integer [N] in [0, class_names.size()). Writes
/// `out_dir/<safe class name>/<index>.{jpg,png}` (index = position in `images`, zero-padded)
/// and creates the folders. Throws naming the problem (bad shapes, a label out of range,
/// colliding folder names, unwritable out_dir).
ExportImageFolderResult export_image_folder(const Tensor& images, const Tensor& labels,
                                            const std::vector<std::string>& class_names,
                                            const std::string& out_dir,
                                            const ExportImageFolderOptions& options = {});

/// Reads an IDX images/labels pair (plain or .gz) and exports it. Class names default to
/// "0", "1", ... when empty.
ExportImageFolderResult export_idx_image_folder(const std::string& images_idx,
                                                const std::string& labels_idx,
                                                std::vector<std::string> class_names,
                                                const std::string& out_dir,
                                                const ExportImageFolderOptions& options = {});

}  // namespace lockstep::tools
