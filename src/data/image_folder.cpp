// image_dataset_from_directory: index a class-folder tree like Keras, then a lazy pipeline
// (slices of paths + labels -> shuffle -> parallel decode/resize map -> batch -> prefetch).
#include "lockstep/data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <set>

#include "data/class_folder.h"
#include "data/dataset_node.h"
#include "lockstep/core/file_io.h"
#include "lockstep/core/rng.h"
#include "lockstep/core/strings.h"

namespace lockstep::data {

namespace fs = std::filesystem;

namespace {

const FolderKind kImageKind{"image_dataset_from_directory", "images", "image",
                            "ImageFolderOptions"};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void validate(const std::string& dir, const ImageFolderOptions& o, const FolderKind& kind) {
  const char* fn = kind.fn;
  LS_CHECK(o.labels == "inferred" || o.labels == "none" || o.labels.empty(), fn,
           ": labels must be \"inferred\" or \"none\" (explicit labels go in label_list), got \"",
           o.labels, "\"");
  LS_CHECK(o.label_mode == "int" || o.label_mode == "categorical" || o.label_mode == "binary" ||
               o.label_mode == "none",
           fn, ": label_mode must be \"int\", \"categorical\", \"binary\" or \"none\", got \"",
           o.label_mode, "\"");
  parse_color_mode(o.color_mode);
  LS_CHECK(o.color_mode != "keep", fn, ": color_mode must be grayscale, rgb or rgba");
  parse_interpolation(o.interpolation);
  LS_CHECK(o.on_error == "raise" || o.on_error == "skip", fn,
           ": on_error must be \"raise\" or \"skip\", got \"", o.on_error, "\"");
  LS_CHECK(o.image_size[0] > 0 && o.image_size[1] > 0, fn,
           ": image_size must be positive {height, width}, got {", o.image_size[0], ", ",
           o.image_size[1], "}");
  LS_CHECK(o.batch_size >= 0, fn, ": batch_size must be >= 0 (0: unbatched), got ", o.batch_size);
  LS_CHECK(
      o.subset.empty() || o.subset == "training" || o.subset == "validation" || o.subset == "both",
      fn, ": subset must be \"training\", \"validation\" or \"both\", got \"", o.subset, "\"");
  LS_CHECK(o.validation_split >= 0.0 && o.validation_split < 1.0, fn,
           ": validation_split must be in [0, 1), got ", o.validation_split);
  LS_CHECK(o.subset.empty() || o.validation_split > 0.0, fn, ": subset \"", o.subset,
           "\" needs a validation_split in (0, 1)");
  LS_CHECK(o.validation_split == 0.0 || !o.subset.empty(), fn,
           ": validation_split is set, so subset must be \"training\", \"validation\" or \"both\"");
  LS_CHECK(!(o.validation_split > 0.0 && o.shuffle && !o.seed), fn,
           ": with validation_split and shuffle, pass a seed so the training and validation "
           "subsets do not overlap");
  LS_CHECK(o.class_names.empty() || o.labels != "none", fn,
           ": class_names is only valid with labels \"inferred\"");
  std::error_code ec;
  LS_CHECK(fs::exists(dir, ec), fn, ": directory '", dir, "' does not exist");
  LS_CHECK(fs::is_directory(dir, ec), fn, ": '", dir, "' is not a directory");
}

// A directory's identity (device, inode), after following links; nullopt when it cannot be read.
std::optional<std::pair<dev_t, ino_t>> directory_id(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(st.st_dev, st.st_ino);
}

// Image files under `root` (recursively), sorted by folder then name as Keras's os.walk.
// With follow_links, a link to a directory already visited in this walk (root, one of its
// ancestors, or one listed before; by device and inode) is skipped with a one-line warning: a
// symlink loop is listed once, not until the path gets too long.
std::vector<std::string> list_images(const fs::path& root, const ImageFolderOptions& o,
                                     const FolderKind& kind) {
  std::set<std::string> exts;
  for (const auto& e : o.allowed_extensions) exts.insert(lower(e));
  std::vector<std::pair<std::string, std::string>> found;  // (parent, filename)
  auto opts = o.follow_links ? fs::directory_options::follow_directory_symlink
                             : fs::directory_options::none;
  std::error_code ec;
  // The folder itself must be readable: skip_permission_denied (for subfolders) would make an
  // unreadable class folder look empty ("contains no images").
  fs::directory_iterator probe(root, ec);
  LS_CHECK(!ec, kind.fn, ": cannot read folder '", root.string(), "': ", ec.message(),
           ec == std::errc::permission_denied ? " (check its permissions)" : "");
  fs::recursive_directory_iterator it(root, opts | fs::directory_options::skip_permission_denied,
                                      ec),
      end;
  LS_CHECK(!ec, kind.fn, ": cannot list '", root.string(), "': ", ec.message());
  std::set<std::pair<dev_t, ino_t>> visited;
  if (o.follow_links) {  // a link back to root or any of its ancestors is a loop
    std::error_code aec;
    fs::path p = fs::absolute(root, aec);
    for (; !aec; p = p.parent_path()) {
      if (auto id = directory_id(p)) visited.insert(*id);
      if (p == p.parent_path()) break;
    }
  }
  for (; it != end; it.increment(ec)) {
    LS_CHECK(!ec, kind.fn, ": cannot list '", root.string(), "': ", ec.message());
    const fs::directory_entry& e = *it;
    std::error_code ec2;
    if (e.is_directory(ec2)) {
      if (o.follow_links) {
        const auto id = directory_id(e.path());
        if (id && !visited.insert(*id).second) {
          it.disable_recursion_pending();
          std::fprintf(stderr,
                       "%s: warning: not following '%s': it leads to "
                       "a directory already listed (a symlink loop)\n",
                       kind.fn, e.path().c_str());
        }
      }
      continue;
    }
    if (!o.follow_links && e.is_symlink(ec2) && fs::is_directory(e.path(), ec2)) continue;
    if (!exts.count(lower(e.path().extension().string()))) continue;
    // Named like an image but a FIFO (reading it waits forever), a device (/dev/zero never
    // ends) or a dangling link: an error now, naming it, rather than a hang in training.
    LS_CHECK(fs::is_regular_file(e.path(), ec2), kind.fn, ": '", e.path().string(), "' is ",
             file_kind(e.path().string()), ", not a regular ", kind.file,
             " file (remove it or replace it with the ", kind.file, ")");
    found.emplace_back(e.path().parent_path().string(), e.path().filename().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  out.reserve(found.size());
  for (auto& [parent, name] : found) out.push_back((fs::path(parent) / name).string());
  return out;
}

}  // namespace

ImageFolderIndex index_class_folder(const std::string& directory, const ImageFolderOptions& o,
                                    const FolderKind& kind) {
  validate(directory, o, kind);
  ImageFolderIndex idx;
  const fs::path root(directory);
  const bool inferred = o.labels != "none" && o.label_list.empty();
  if (inferred) {
    std::vector<std::string> subdirs;
    for (const auto& e : fs::directory_iterator(root)) {
      std::error_code ec;
      if (fs::is_directory(e.path(), ec)) subdirs.push_back(e.path().filename().string());
    }
    std::sort(subdirs.begin(), subdirs.end());
    LS_CHECK(!subdirs.empty(), kind.fn, ": '", directory,
             "' has no class subfolders (labels=\"inferred\" expects one folder per class; use "
             "labels=\"none\" for a flat folder of ",
             kind.noun, ")");
    if (!o.class_names.empty()) {
      std::set<std::string> have(subdirs.begin(), subdirs.end()), seen;
      for (const auto& c : o.class_names) {
        LS_CHECK(have.count(c), kind.fn, ": class_names entry \"", c, "\" is not a subfolder of '",
                 directory, "' (subfolders: ", join(subdirs), ")");
        LS_CHECK(seen.insert(c).second, kind.fn, ": class_names lists \"", c, "\" twice");
      }
      subdirs = o.class_names;  // keeps the given order, drops the others
    }
    for (size_t c = 0; c < subdirs.size(); ++c) {
      auto files = list_images(root / subdirs[c], o, kind);
      LS_CHECK(!files.empty(), kind.fn, ": class folder '", (root / subdirs[c]).string(),
               "' contains no ", kind.noun, " (", join(o.allowed_extensions, " "),
               "); add images or remove the folder (or leave it out of class_names)");
      for (auto& f : files) {
        idx.files.push_back(std::move(f));
        idx.labels.push_back(int(c));
      }
    }
    idx.class_names = subdirs;
  } else {
    idx.files = list_images(root, o, kind);
    if (!o.label_list.empty()) {
      LS_CHECK(o.label_list.size() == idx.files.size(), kind.fn, ": label_list has ",
               o.label_list.size(), " labels but '", directory, "' holds ", idx.files.size(), " ",
               kind.noun, " (one label per file, in sorted path order)");
      idx.labels = o.label_list;
      int mx = *std::max_element(idx.labels.begin(), idx.labels.end());
      for (int i = 0; i <= mx; ++i) idx.class_names.push_back(std::to_string(i));
      if (!o.class_names.empty()) idx.class_names = o.class_names;
    }
  }
  LS_CHECK(!idx.files.empty(), kind.fn, ": no ", kind.noun, " found in directory '", directory,
           "' (allowed extensions: ", join(o.allowed_extensions, " "), ")");
  if (o.label_mode == "binary" && !idx.labels.empty())
    LS_CHECK(idx.class_names.size() == 2, kind.fn, ": label_mode \"binary\" ",
             "needs exactly 2 classes, found ", idx.class_names.size(), " (", join(idx.class_names),
             ")");
  if (o.shuffle) {  // Keras shuffles the whole sorted list with the seed before splitting
    uint64_t seed =
        o.seed ? *o.seed
               : draw_seed((std::string(kind.fn) + " (" + kind.options + "::seed)").c_str());
    Philox rng(seed, /*stream=*/0x1F0D3E);
    for (size_t i = idx.files.size(); i > 1; --i) {
      size_t j = size_t(rng.next_u64() % i);
      std::swap(idx.files[i - 1], idx.files[j]);
      if (!idx.labels.empty()) std::swap(idx.labels[i - 1], idx.labels[j]);
    }
  }
  return idx;
}

ImageFolderIndex index_image_directory(const std::string& directory, const ImageFolderOptions& o) {
  return index_class_folder(directory, o, kImageKind);
}

Tensor load_image_for_dataset(const std::string& path, const ImageFolderOptions& o) {
  const ColorMode mode = parse_color_mode(o.color_mode);
  const int want = color_mode_channels(mode);
  std::vector<uint8_t> bytes = read_file_bytes(path);
  Tensor img = decode_image(bytes, path, o.convert_channels ? mode : ColorMode::keep);
  LS_CHECK(img.dim(2) == want, "'", path, "' has ", img.dim(2), " channel(s) but color_mode \"",
           o.color_mode, "\" needs ", want, " (convert_channels is false)");
  const int h = o.image_size[0], w = o.image_size[1];
  const int ih = int(img.dim(0)), iw = int(img.dim(1));
  CropBox box{0, 0, ih, iw};
  if (o.crop_to_aspect_ratio) box = aspect_crop_box(ih, iw, h, w);
  Tensor out = Tensor::empty({h, w, want}, DType::f32);
  const int64_t stride = int64_t(iw) * want;
  thread_local std::vector<float> scratch;
  resize_u8_to_f32(img.data<uint8_t>() + box.y * stride + int64_t(box.x) * want, box.height,
                   box.width, want, stride, out.data<float>(), h, w,
                   parse_interpolation(o.interpolation), &scratch);
  return out;
}

std::pair<Dataset, std::optional<ComponentSpec>> labelled_files(
    const std::vector<std::string>& files, const std::vector<int>& labels,
    const std::vector<std::string>& class_names, const std::string& label_mode, bool shuffle,
    int batch_size, uint64_t shuffle_seed, const char* fn) {
  const int64_t n = int64_t(files.size());
  const bool with_labels = !labels.empty() && label_mode != "none";
  const int64_t C = int64_t(class_names.size());
  std::vector<Component> comps{Component(Strings(files))};
  std::optional<ComponentSpec> label_spec;
  if (with_labels) {
    Tensor t;
    if (label_mode == "int") {
      t = Tensor::from_vector_i32({n}, std::vector<int32_t>(labels.begin(), labels.end()));
      label_spec = ComponentSpec{ComponentKind::tensor, DType::i32, Shape{}};
    } else if (label_mode == "categorical") {
      t = Tensor::zeros({n, C});
      float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i) {
        LS_CHECK(labels[i] >= 0 && labels[i] < C, fn, ": label ", labels[i], " of '", files[i],
                 "' is outside 0..", C - 1);
        p[i * C + labels[i]] = 1.f;
      }
      label_spec = ComponentSpec{ComponentKind::tensor, DType::f32, Shape{C}};
    } else {  // binary
      t = Tensor::zeros({n, 1});
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = float(labels[i]);
      label_spec = ComponentSpec{ComponentKind::tensor, DType::f32, Shape{1}};
    }
    comps.push_back(Component(t));
  }
  Dataset ds = Dataset::from_tensor_slices(std::move(comps));
  if (shuffle)
    ds = ds.shuffle(batch_size > 0 ? int64_t(batch_size) * 8 : 1024, {.seed = shuffle_seed});
  return {ds, label_spec};
}

namespace {

ImageDataset build(const std::vector<std::string>& files, const std::vector<int>& labels,
                   const std::vector<std::string>& class_names, const ImageFolderOptions& o,
                   uint64_t shuffle_seed) {
  auto [ds, label_spec] =
      labelled_files(files, labels, class_names, o.label_mode, o.shuffle, o.batch_size,
                     shuffle_seed, "image_dataset_from_directory");
  const bool with_labels = label_spec.has_value();
  const int channels = color_mode_channels(parse_color_mode(o.color_mode));
  ElementSpec out_spec;
  out_spec.components.push_back(
      {ComponentKind::tensor, DType::f32, Shape{o.image_size[0], o.image_size[1], channels}});
  if (with_labels) out_spec.components.push_back(*label_spec);
  MapOptions mo;
  mo.num_parallel_calls = o.num_parallel_calls;
  mo.name = detail::concat("load_image(", o.image_size[0], "x", o.image_size[1], ",", o.color_mode,
                           ",", o.interpolation, ",crop=", o.crop_to_aspect_ratio,
                           ",convert=", o.convert_channels, ")");
  mo.output_spec = out_spec;
  ImageFolderOptions opts = o;
  ds = ds.map(
      [opts](Element e) {
        Element out;
        out.parts.reserve(e.size());
        out.parts.push_back(load_image_for_dataset(e.string(0), opts));
        for (size_t i = 1; i < e.size(); ++i) out.parts.push_back(std::move(e.parts[i]));
        return out;
      },
      mo);
  if (o.on_error == "skip") ds = ds.ignore_errors();
  if (o.batch_size > 0) ds = ds.batch(o.batch_size);
  ds = ds.prefetch(AUTOTUNE);
  return ImageDataset(std::move(ds), class_names, files, with_labels ? labels : std::vector<int>{});
}

}  // namespace

ImageDataset image_dataset_from_directory(const std::string& directory, ImageFolderOptions o) {
  if (o.labels == "none") o.label_mode = "none";
  // Without a seed, draw one now so the file split and the shuffle buffer agree.
  if (o.shuffle && !o.seed && o.validation_split == 0.0)
    o.seed = draw_seed("image_dataset_from_directory (ImageFolderOptions::seed)");
  ImageFolderIndex idx = index_image_directory(directory, o);
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
    std::vector<std::string> f(idx.files.begin() + begin, idx.files.begin() + end);
    std::vector<int> l;
    if (!idx.labels.empty()) l.assign(idx.labels.begin() + begin, idx.labels.begin() + end);
    return std::make_pair(f, l);
  };
  auto [tf, tl] = part(0, n - num_val);
  auto [vf, vl] = part(n - num_val, n);
  if (o.subset == "training" || o.subset == "both") {
    if (o.verbose) std::printf("Using %zu files for training.\n", tf.size());
  }
  if (o.subset == "validation" || o.subset == "both") {
    if (o.verbose) std::printf("Using %zu files for validation.\n", vf.size());
  }
  std::fflush(stdout);
  if (o.subset == "training") return build(tf, tl, idx.class_names, o, seed);
  if (o.subset == "validation") return build(vf, vl, idx.class_names, o, seed);
  ImageDataset train = build(tf, tl, idx.class_names, o, seed);
  // Keras 3 (subset "both"): the validation set keeps the seeded file order but gets no
  // per-epoch shuffle buffer.
  ImageFolderOptions vo = o;
  vo.shuffle = false;
  train.set_validation(build(vf, vl, idx.class_names, vo, seed));
  return train;
}

}  // namespace lockstep::data
