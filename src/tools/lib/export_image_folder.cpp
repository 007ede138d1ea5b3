// export_image_folder: labelled arrays -> class folders of JPEG/PNG files.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "lockstep/data/idx.h"
#include "lockstep/data/image.h"
#include "lockstep/tools/export.h"

namespace lockstep::tools {

namespace fs = std::filesystem;

std::string safe_class_dir_name(const std::string& name) {
  std::string out;
  for (unsigned char c : name)
    out += (std::isalnum(c) || c == '-' || c == '_' || c == '.') ? char(c) : '_';
  if (out.find_first_not_of('.') == std::string::npos) out = "class" + out;
  return out;
}

ExportImageFolderResult export_image_folder(const Tensor& images_in, const Tensor& labels_in,
                                            const std::vector<std::string>& class_names,
                                            const std::string& out_dir,
                                            const ExportImageFolderOptions& o) {
  const char* fn = "export_image_folder";
  LS_CHECK(images_in.defined() && (images_in.rank() == 3 || images_in.rank() == 4), fn,
           ": images must be [N, H, W] or [N, H, W, C], got ",
           images_in.defined() ? images_in.shape().str() : std::string("an undefined tensor"));
  LS_CHECK(o.format == "jpeg" || o.format == "png" || o.format == "mixed", fn,
           ": format must be \"jpeg\", \"png\" or \"mixed\", got \"", o.format, "\"");
  LS_CHECK(o.size >= 0 && o.size <= 8192, fn, ": size must be in 0..8192 (0: keep), got ", o.size);
  LS_CHECK(!class_names.empty(), fn, ": class_names is empty");
  Tensor images = images_in.contiguous();
  const int64_t N = images.dim(0), H = images.dim(1), W = images.dim(2);
  const int64_t C = images.rank() == 4 ? images.dim(3) : 1;
  LS_CHECK(C == 1 || C == 3, fn, ": images need 1 or 3 channels (JPEG), got ", C);
  LS_CHECK(labels_in.defined() && labels_in.numel() == N, fn, ": labels must hold ", N,
           " values (one per image), got ",
           labels_in.defined() ? labels_in.shape().str() : std::string("an undefined tensor"));
  std::vector<float> labels = labels_in.contiguous().to_vector();
  // f32 images in 0..1 (load_fashion_mnist) are scaled to 0..255.
  Tensor u8 = Tensor::empty({N, H, W, C}, DType::u8);
  if (images.dtype() == DType::u8) {
    std::memcpy(u8.raw(), images.raw(), size_t(N * H * W * C));
  } else {
    LS_CHECK(images.dtype() == DType::f32, fn, ": images must be uint8 or float32, got ",
             dtype_name(images.dtype()));
    const float* s = images.data<float>();
    const int64_t total = N * H * W * C;
    float mx = 0.f;
    for (int64_t i = 0; i < total; ++i) mx = std::max(mx, s[i]);
    const float k = mx <= 1.f ? 255.f : 1.f;
    uint8_t* d = u8.data<uint8_t>();
    for (int64_t i = 0; i < total; ++i)
      d[i] = uint8_t(std::clamp(std::nearbyint(s[i] * k), 0.f, 255.f));
  }
  ExportImageFolderResult res;
  std::set<std::string> seen;
  for (const auto& name : class_names) {
    std::string d = safe_class_dir_name(name);
    LS_CHECK(seen.insert(d).second, fn, ": class names map to the same folder name \"", d,
             "\"; make them distinct");
    res.class_dirs.push_back(d);
  }
  std::error_code ec;
  for (const auto& d : res.class_dirs) {
    fs::create_directories(fs::path(out_dir) / d, ec);
    LS_CHECK(!ec, fn, ": cannot create '", (fs::path(out_dir) / d).string(), "': ", ec.message());
  }
  res.per_class.assign(class_names.size(), 0);
  const int digits = std::max<int>(5, int(std::to_string(N).size()));
  for (int64_t i = 0; i < N; ++i) {
    const int label = int(std::lround(labels[i]));
    LS_CHECK(label >= 0 && label < int(class_names.size()), fn, ": label ", labels[i], " of image ",
             i, " is outside 0..", class_names.size() - 1);
    int64_t& count = res.per_class[label];
    if (o.limit_per_class >= 0 && count >= o.limit_per_class) continue;
    Tensor img = u8.slice(i, i + 1).reshape({H, W, C});
    if (o.size > 0 && (o.size != H || o.size != W))
      img = data::resize_image(img, o.size, o.size, data::Interpolation::bilinear);
    const bool jpeg = o.format == "jpeg" || (o.format == "mixed" && count % 2 == 0);
    std::string name = std::to_string(i);
    name = std::string(size_t(std::max<int>(0, digits - int(name.size()))), '0') + name +
           (jpeg ? ".jpg" : ".png");
    const std::string path = (fs::path(out_dir) / res.class_dirs[label] / name).string();
    data::write_image(path, img, o.jpeg_quality);
    ++count;
    ++res.files;
  }
  return res;
}

ExportImageFolderResult export_idx_image_folder(const std::string& images_idx,
                                                const std::string& labels_idx,
                                                std::vector<std::string> class_names,
                                                const std::string& out_dir,
                                                const ExportImageFolderOptions& o) {
  Tensor x = data::read_idx(images_idx);
  Tensor y = data::read_idx(labels_idx);
  LS_CHECK(x.rank() == 3 || x.rank() == 4, "'", images_idx, "' holds ", x.shape().str(),
           "; expected images [N, H, W] or [N, H, W, C]");
  LS_CHECK(y.numel() == x.dim(0), "'", labels_idx, "' holds ", y.numel(), " labels but '",
           images_idx, "' holds ", x.dim(0), " images");
  if (class_names.empty()) {
    float mx = 0;
    for (float v : y.to_vector()) mx = std::max(mx, v);
    for (int i = 0; i <= int(mx); ++i) class_names.push_back(std::to_string(i));
  }
  return export_image_folder(x, y, class_names, out_dir, o);
}

}  // namespace lockstep::tools
