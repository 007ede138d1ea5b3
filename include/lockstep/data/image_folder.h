// image_dataset_from_directory: Keras's loader for a folder of class subfolders of images.
//
//   auto [train, val] = data::image_dataset_from_directory("flower_photos", {
//       .validation_split = 0.2, .subset = "both", .seed = 123,
//       .image_size = {180, 180}, .batch_size = 32});
//   train.class_names();   // sorted subfolder names
//
// Behaviour follows Keras 3 (keras.utils.image_dataset_from_directory):
//  - labels "inferred": one class per subfolder (sorted by name, or `class_names` in that
//    order, which also filters); files are found recursively in each class folder, sorted,
//    by extension (.jpg .jpeg .png .bmp, case-insensitive) — the format itself is detected
//    from the file's bytes.
//  - the sorted file list is shuffled with `seed` (if shuffle), then validation_split takes
//    the last fraction as validation (int(split * N) files), the rest is training.
//  - elements are {image f32 [H, W, C] in 0..255, label}; label_mode "int": i32 scalar,
//    "categorical": f32 one-hot [num_classes], "binary": f32 [1] (exactly 2 classes),
//    "none": no label component. Batched by batch_size (0: unbatched), shuffled each epoch
//    with a buffer of 8 batches when shuffle, prefetched (AUTOTUNE).
//  - decoding and resizing run in the pipeline's map (num_parallel_calls, AUTOTUNE default).
//  - prints "Found N files belonging to C classes." and "Using K files for training."
//
// Errors (lockstep::Error) name the folder or file: a missing directory, no images, an
// empty class folder, class_names not among the subfolders, a bad file while iterating
// (on_error "raise"); with on_error "skip" bad files are dropped and counted in one warning.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/data/image.h"

namespace lockstep::data {

/// The options of Keras's image_dataset_from_directory. Designated initializers must keep the
/// field order:
/// labels, label_mode, class_names, color_mode, validation_split, subset, seed, image_size,
/// batch_size, shuffle, interpolation, crop_to_aspect_ratio, follow_links, then extensions.
struct ImageFolderOptions {
  std::string labels = "inferred";  ///< "inferred" or "none" (see label_list for explicit labels)
  std::string label_mode = "int";   ///< "int" | "categorical" | "binary" | "none"
  std::vector<std::string> class_names;        ///< empty: sorted subfolder names
  std::string color_mode = "rgb";              ///< "grayscale" | "rgb" | "rgba"
  double validation_split = 0.0;               ///< in (0, 1) together with subset
  std::string subset;                          ///< "" | "training" | "validation" | "both"
  std::optional<uint64_t> seed;                ///< required with validation_split and shuffle
  std::array<int, 2> image_size = {256, 256};  ///< {height, width}
  int batch_size = 32;                         ///< 0: unbatched
  bool shuffle = true;                         ///< shuffle the files (seeded) and each epoch
  std::string interpolation = "bilinear";      ///< "bilinear" | "nearest" | "area"
  bool crop_to_aspect_ratio = false;  ///< crop to image_size's aspect ratio before resizing
  bool follow_links = false;          ///< follow symbolic links to folders
  /// Explicit integer labels, one per image file of the whole tree in sorted path order
  /// (Keras's `labels=[...]`); used when non-empty (labels must then be "inferred" or "").
  std::vector<int> label_list;
  std::string on_error = "raise";  ///< "raise" | "skip"
  /// false: an image whose channel count differs from color_mode's is an error naming the
  /// file (instead of Keras's conversion).
  bool convert_channels = true;
  /// File extensions that count as images (case-insensitive).
  std::vector<std::string> allowed_extensions = {".jpg", ".jpeg", ".png", ".bmp"};
  int num_parallel_calls = AUTOTUNE;  ///< decode + resize parallelism
  bool verbose = true;                ///< the two "Found ..." / "Using ..." lines
};

/// A Dataset that also knows its classes and files (Keras's `ds.class_names`,
/// `ds.file_paths`). With subset "both" it holds the pair: `auto [train, val] = ...`
/// (get<0> is the training set, get<1> the validation set; using the result directly means
/// the training set).
class ImageDataset : public Dataset {
 public:
  ImageDataset() = default;  ///< an invalid dataset
  /// A dataset with its class names, files and labels (image_dataset_from_directory makes these).
  ImageDataset(Dataset ds, std::vector<std::string> class_names,
               std::vector<std::string> file_paths, std::vector<int> labels)
      : Dataset(std::move(ds)),
        class_names_(std::move(class_names)),
        file_paths_(std::move(file_paths)),
        labels_(std::move(labels)) {}

  /// The class names, in label order (Keras's `ds.class_names`).
  const std::vector<std::string>& class_names() const { return class_names_; }
  /// Files in this subset, in the order before the per-epoch shuffle buffer.
  const std::vector<std::string>& file_paths() const { return file_paths_; }
  /// Their labels (class indices; empty for labels "none").
  const std::vector<int>& labels() const { return labels_; }

  /// Structured bindings: get<0>() is the training set, get<1>() the validation set.
  template <size_t I>
  ImageDataset get() const {
    static_assert(I < 2, "image_dataset_from_directory(subset=\"both\") holds two datasets");
    if constexpr (I == 0) {
      ImageDataset t = *this;
      t.validation_.reset();
      return t;
    } else {
      LS_CHECK(validation_, "image_dataset_from_directory: the result holds one dataset; ",
               "pass subset = \"both\" (with validation_split) to unpack [train, val]");
      return *validation_;
    }
  }
  /// Attaches the validation set (what subset "both" returns with the training set).
  void set_validation(ImageDataset v) {
    validation_ = std::make_shared<ImageDataset>(std::move(v));
  }
  /// Whether this holds a validation set too (subset "both").
  bool has_validation() const { return validation_ != nullptr; }

 private:
  std::vector<std::string> class_names_, file_paths_;
  std::vector<int> labels_;
  std::shared_ptr<ImageDataset> validation_;
};

/// keras.utils.image_dataset_from_directory: a dataset of batches {images f32 [B, H, W, C] in
/// 0..255, labels} from a folder of class subfolders (behaviour: above).
ImageDataset image_dataset_from_directory(const std::string& directory,
                                          ImageFolderOptions options = {});

/// The file indexing step alone (no images are decoded): the sorted-then-shuffled file list
/// and labels of the chosen subset, as used by image_dataset_from_directory.
struct ImageFolderIndex {
  std::vector<std::string> class_names;  ///< sorted subfolder names (or options.class_names)
  std::vector<std::string> files;        ///< all files, after the seeded shuffle
  std::vector<int> labels;               ///< per file (empty when labels are "none")
};
/// Indexes `directory` as image_dataset_from_directory would, without decoding.
ImageFolderIndex index_image_directory(const std::string& directory,
                                       const ImageFolderOptions& options);

/// Decodes + crops/resizes one file to f32 [H, W, C] as image_dataset_from_directory does.
Tensor load_image_for_dataset(const std::string& path, const ImageFolderOptions& options);

}  // namespace lockstep::data

// The std:: specialisations behind `auto [train, val] = image_dataset_from_directory(...)`
// (ImageDataset::get documents them; Doxygen cannot place a std:: specialisation, so they are
// left out of the API reference).
/// @cond
template <>
struct std::tuple_size<lockstep::data::ImageDataset> : std::integral_constant<size_t, 2> {};
template <size_t I>
struct std::tuple_element<I, lockstep::data::ImageDataset> {
  using type = lockstep::data::ImageDataset;
};
/// @endcond
