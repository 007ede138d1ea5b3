// text_dataset_from_directory: the class-folder index shared with the image loader, then a lazy
// pipeline (slices of paths + labels -> shuffle -> parallel read map -> batch -> prefetch).
#include <filesystem>
#include <set>

#include "data/class_folder.h"
#include "data/dataset_node.h"
#include "lockstep/core/file_io.h"
#include "lockstep/core/strings.h"
#include "lockstep/data/text.h"

namespace lockstep::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFn = "text_dataset_from_directory";
const FolderKind kTextKind{kFn, "text files", "text", "TextFolderOptions"};

void validate(const TextFolderOptions& o) {
  LS_CHECK(o.labels == "inferred" || o.labels == "none" || o.labels.empty(), kFn,
           ": labels must be \"inferred\" or \"none\", got \"", o.labels, "\"");
  LS_CHECK(o.label_mode == "int" || o.label_mode == "categorical" || o.label_mode == "binary" ||
               o.label_mode == "none",
           kFn, ": label_mode must be \"int\", \"categorical\", \"binary\" or \"none\", got \"",
           o.label_mode, "\"");
  LS_CHECK(o.max_length == -1 || o.max_length > 0, kFn,
           ": max_length must be positive (or -1: whole texts), got ", o.max_length);
  LS_CHECK(o.max_file_bytes > 0, kFn, ": max_file_bytes must be positive, got ", o.max_file_bytes);
  LS_CHECK(!o.allowed_extensions.empty(), kFn, ": allowed_extensions is empty");
}

ImageFolderOptions as_folder_options(const TextFolderOptions& o) {
  ImageFolderOptions f;
  f.labels = o.labels;
  f.label_mode = o.label_mode;
  f.class_names = o.class_names;
  f.validation_split = o.validation_split;
  f.subset = o.subset;
  f.seed = o.seed;
  f.batch_size = o.batch_size;
  f.shuffle = o.shuffle;
  f.follow_links = o.follow_links;
  f.allowed_extensions = o.allowed_extensions;
  return f;
}

// Every file is checked against the cap while indexing: a huge file is named before training.
void check_sizes(const std::vector<std::string>& files, int64_t cap) {
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    LS_CHECK(ec || int64_t(size) <= cap, kFn, ": '", f, "' is ", size,
             " bytes, more than max_file_bytes (", cap,
             "); raise TextFolderOptions::max_file_bytes, or split or remove the file");
  }
}

TextDataset build(const std::vector<std::string>& files, const std::vector<int>& labels,
                  const std::vector<std::string>& class_names, const TextFolderOptions& o,
                  uint64_t shuffle_seed) {
  auto [ds, label_spec] = labelled_files(files, labels, class_names, o.label_mode, o.shuffle,
                                         o.batch_size, shuffle_seed, "text_dataset_from_directory");
  const bool with_labels = label_spec.has_value();
  ElementSpec out_spec;
  out_spec.components.push_back({ComponentKind::string, DType::f32, Shape{}});
  if (with_labels) out_spec.components.push_back(*label_spec);
  MapOptions mo;
  mo.num_parallel_calls = o.num_parallel_calls;
  mo.name = detail::concat("read_text(max_length=", o.max_length, ")");
  mo.output_spec = out_spec;
  const int64_t cap = o.max_file_bytes, max_length = o.max_length;
  ds = ds.map(
      [cap, max_length](Element e) {
        e.parts[0] = read_text_file(e.string(0), cap, max_length);
        return e;
      },
      mo);
  if (o.batch_size > 0) ds = ds.batch(o.batch_size);
  ds = ds.prefetch(AUTOTUNE);
  return TextDataset(std::move(ds), class_names, files, with_labels ? labels : std::vector<int>{});
}

}  // namespace

Element first_component(Element e) {
  LS_CHECK(e.size() >= 1, "first_component: the element has no components");
  Element out;
  out.parts.push_back(std::move(e.parts[0]));
  return out;
}

std::string read_text_file(const std::string& path, int64_t max_file_bytes, int64_t max_length) {
  std::string bytes = read_regular_file(path, uint64_t(max_file_bytes),
                                        "text file (TextFolderOptions::max_file_bytes)");
  std::string text = is_valid_utf8(bytes) ? std::move(bytes) : sanitize_utf8(bytes);
  if (max_length >= 0) text = truncate_utf8(std::move(text), size_t(max_length));
  return text;
}

TextDataset text_dataset_from_directory(const std::string& directory, TextFolderOptions o) {
  validate(o);
  if (o.labels == "none") o.label_mode = "none";
  if (o.shuffle && !o.seed && o.validation_split == 0.0)
    o.seed = draw_seed("text_dataset_from_directory (TextFolderOptions::seed)");
  const ImageFolderIndex idx = index_class_folder(directory, as_folder_options(o), kTextKind);
  check_sizes(idx.files, o.max_file_bytes);
  const size_t n = idx.files.size();
  if (o.verbose) {
    if (idx.class_names.empty() || o.labels == "none")
      std::printf("Found %zu files.\n", n);
    else
      std::printf("Found %zu files belonging to %zu classes.\n", n, idx.class_names.size());
  }
  const uint64_t seed = o.seed.value_or(0);
  if (o.subset.empty()) return build(idx.files, idx.labels, idx.class_names, o, seed);
  const size_t num_val = size_t(o.validation_split * double(n));
  auto part = [&](size_t begin, size_t end) {
    std::vector<std::string> f(idx.files.begin() + long(begin), idx.files.begin() + long(end));
    std::vector<int> l;
    if (!idx.labels.empty())
      l.assign(idx.labels.begin() + long(begin), idx.labels.begin() + long(end));
    return std::make_pair(f, l);
  };
  auto [tf, tl] = part(0, n - num_val);
  auto [vf, vl] = part(n - num_val, n);
  if (o.verbose && (o.subset == "training" || o.subset == "both"))
    std::printf("Using %zu files for training.\n", tf.size());
  if (o.verbose && (o.subset == "validation" || o.subset == "both"))
    std::printf("Using %zu files for validation.\n", vf.size());
  std::fflush(stdout);
  if (o.subset == "training") return build(tf, tl, idx.class_names, o, seed);
  if (o.subset == "validation") return build(vf, vl, idx.class_names, o, seed);
  TextDataset train = build(tf, tl, idx.class_names, o, seed);
  TextFolderOptions vo = o;
  vo.shuffle = false;  // Keras 3: the validation set gets no per-epoch shuffle
  train.set_validation(build(vf, vl, idx.class_names, vo, seed));
  return train;
}

}  // namespace lockstep::data
