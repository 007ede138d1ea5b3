// Picture grids: images scaled up (nearest), captions in the built-in 5x7 font, PNG output.
#include "lockstep/viz/grid.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "font5x7.h"
#include "lockstep/core/file_io.h"
#include "lockstep/data/image.h"
#include "lockstep/data/image_folder.h"

namespace lockstep::viz {

namespace {

const uint8_t kBlack[3] = {20, 20, 20};
const uint8_t kGreen[3] = {0, 130, 0};
const uint8_t kRed[3] = {210, 0, 0};
constexpr int kFrame = 3;

// Images as uint8 [N, H, W, 3].
Tensor images_to_rgb_u8(const Tensor& images, int64_t n) {
  LS_CHECK(images.defined() && (images.rank() == 4 || images.rank() == 3),
           "picture grid: images must be [N, H, W, C] or [N, H, W], got ",
           images.defined() ? images.shape().str() : std::string("an undefined tensor"));
  Tensor x = images.contiguous();
  const int64_t H = x.dim(1), W = x.dim(2), C = x.rank() == 4 ? x.dim(3) : 1;
  LS_CHECK(C == 1 || C == 3 || C == 4, "picture grid: images need 1, 3 or 4 channels, got ", C,
           " (shape ", x.shape().str(), ")");
  LS_CHECK(x.dtype() == DType::u8 || x.dtype() == DType::f32,
           "picture grid: images must be uint8 or float32, got ", dtype_name(x.dtype()));
  Tensor out = Tensor::empty({n, H, W, 3}, DType::u8);
  uint8_t* o = out.data<uint8_t>();
  const int64_t pix = n * H * W;
  if (x.dtype() == DType::u8) {
    const uint8_t* s = x.data<uint8_t>();
    for (int64_t i = 0; i < pix; ++i, s += C, o += 3) {
      o[0] = s[0];
      o[1] = C == 1 ? s[0] : s[1];
      o[2] = C == 1 ? s[0] : s[2];
    }
    return out;
  }
  const float* s = x.data<float>();
  float mx = 0.f;
  for (int64_t i = 0; i < pix * C; ++i) mx = std::max(mx, s[i]);
  const float scale = mx <= 1.0f ? 255.f : 1.f;  // images already rescaled to 0..1
  auto cv = [&](float v) {
    v = std::nearbyint(v * scale);
    return uint8_t(v < 0.f ? 0.f : (v > 255.f ? 255.f : v));
  };
  for (int64_t i = 0; i < pix; ++i, s += C, o += 3) {
    o[0] = cv(s[0]);
    o[1] = cv(C == 1 ? s[0] : s[1]);
    o[2] = cv(C == 1 ? s[0] : s[2]);
  }
  return out;
}

std::vector<int> label_indices(const Tensor& labels, int64_t n, const char* what) {
  std::vector<int> out(static_cast<size_t>(n), -1);
  if (!labels.defined()) return out;
  LS_CHECK(labels.rank() >= 1 && labels.dim(0) >= n, "picture grid: ", what, " must have at least ",
           n, " rows, got ", labels.shape().str());
  std::vector<float> v = labels.contiguous().to_vector();
  if (labels.rank() == 1 ||
      (labels.rank() == 2 && labels.dim(1) == 1 && labels.dtype() != DType::f32)) {
    for (int64_t i = 0; i < n; ++i) out[i] = int(std::lround(v[i]));
  } else if (labels.rank() == 2 && labels.dim(1) == 1) {  // binary scores
    for (int64_t i = 0; i < n; ++i) out[i] = v[i] > 0.5f ? 1 : 0;
  } else {
    LS_CHECK(labels.rank() == 2, "picture grid: ", what, " must be [N] or [N, classes], got ",
             labels.shape().str());
    const int64_t C = labels.dim(1);
    for (int64_t i = 0; i < n; ++i)
      out[i] =
          int(std::max_element(v.begin() + i * C, v.begin() + (i + 1) * C) - (v.begin() + i * C));
  }
  return out;
}

// Probability of the argmax class per row (softmax first unless rows are distributions).
std::vector<float> top_probability(const Tensor& scores, int64_t n) {
  std::vector<float> out;
  if (!scores.defined() || scores.rank() != 2 || scores.dim(1) < 2) return out;
  const int64_t C = scores.dim(1);
  std::vector<float> v = scores.contiguous().to_vector();
  for (int64_t i = 0; i < n; ++i) {
    const float* r = v.data() + i * C;
    float sum = 0.f, mn = r[0], mx = r[0];
    for (int64_t k = 0; k < C; ++k) {
      sum += r[k];
      mn = std::min(mn, r[k]);
      mx = std::max(mx, r[k]);
    }
    if (mn >= 0.f && std::fabs(sum - 1.f) < 1e-3f) {
      out.push_back(mx);
    } else {
      float z = 0.f;
      for (int64_t k = 0; k < C; ++k) z += std::exp(r[k] - mx);
      out.push_back(1.f / z);
    }
  }
  return out;
}

std::string class_text(const std::vector<std::string>& names, int label) {
  if (label < 0) return "";
  if (label < int(names.size())) return names[label];
  return std::to_string(label);
}

// Word-wraps into at most two lines of max_chars; the rest is cut with "..".
std::vector<std::string> wrap(const std::string& text, int max_chars) {
  std::vector<std::string> lines;
  if (max_chars < 1) return lines;
  std::string rest = text;
  while (!rest.empty() && lines.size() < 2) {
    if (int(rest.size()) <= max_chars) {
      lines.push_back(rest);
      rest.clear();
      break;
    }
    size_t cut = rest.rfind(' ', size_t(max_chars));
    if (cut == std::string::npos || cut == 0) cut = size_t(max_chars);
    lines.push_back(rest.substr(0, cut));
    rest = rest.substr(cut);
    while (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
  }
  if (!rest.empty() && !lines.empty()) {
    std::string& last = lines.back();
    if (int(last.size()) + 2 > max_chars) last.resize(size_t(std::max(0, max_chars - 2)));
    last += "..";
  }
  return lines;
}

struct Caption {
  std::string text;
  const uint8_t* color = kBlack;
  bool frame = false;
};

Tensor render(const Tensor& images, const std::vector<Caption>& captions, GridOptions o) {
  LS_CHECK(o.rows > 0 && o.cols > 0, "picture grid: rows and cols must be positive, got ", o.rows,
           "x", o.cols);
  const int64_t n = int64_t(captions.size());
  LS_CHECK(n > 0, "picture grid: no images to draw");
  Tensor rgb = images_to_rgb_u8(images, n);
  const int H = int(rgb.dim(1)), W = int(rgb.dim(2));
  const int rows = int((n + o.cols - 1) / o.cols), cols = int(std::min<int64_t>(o.cols, n));
  const int k = std::max(1, (o.min_cell + std::max(H, W) - 1) / std::max(H, W));
  const int cw = W * k, ch = H * k;
  const int ts = o.text_scale > 0 ? o.text_scale : (cw < 200 ? 1 : 2);
  const int line_h = (detail::kGlyphH + 2) * ts;
  const int cap_h = 2 * line_h + 4;
  const int cell_w = cw + 2 * kFrame, cell_h = ch + 2 * kFrame + cap_h;
  const int pad = std::max(0, o.padding);
  const int CW = pad + cols * (cell_w + pad), CH = pad + rows * (cell_h + pad);
  Tensor canvas = Tensor::empty({CH, CW, 3}, DType::u8);
  std::fill_n(canvas.data<uint8_t>(), canvas.numel(), uint8_t(255));
  uint8_t* cv = canvas.data<uint8_t>();
  const uint8_t* src = rgb.data<uint8_t>();
  const int max_chars = cell_w / ((detail::kGlyphW + 1) * ts);
  for (int64_t i = 0; i < n; ++i) {
    const int r = int(i / o.cols), c = int(i % o.cols);
    const int x0 = pad + c * (cell_w + pad), y0 = pad + r * (cell_h + pad);
    if (captions[i].frame) {
      for (int y = y0; y < y0 + ch + 2 * kFrame; ++y)
        for (int x = x0; x < x0 + cell_w; ++x) {
          uint8_t* p = cv + (int64_t(y) * CW + x) * 3;
          p[0] = captions[i].color[0];
          p[1] = captions[i].color[1];
          p[2] = captions[i].color[2];
        }
    }
    const uint8_t* img = src + i * int64_t(H) * W * 3;
    for (int y = 0; y < ch; ++y) {
      const uint8_t* srow = img + int64_t(y / k) * W * 3;
      uint8_t* drow = cv + (int64_t(y0 + kFrame + y) * CW + x0 + kFrame) * 3;
      for (int x = 0; x < cw; ++x) {
        const uint8_t* s = srow + (x / k) * 3;
        drow[x * 3 + 0] = s[0];
        drow[x * 3 + 1] = s[1];
        drow[x * 3 + 2] = s[2];
      }
    }
    auto lines = wrap(captions[i].text, max_chars);
    int ty = y0 + ch + 2 * kFrame + 3;
    for (const auto& line : lines) {
      int tx = x0 + (cell_w - text_width(line, ts)) / 2;
      draw_text(canvas, std::max(x0, tx), ty, line, captions[i].color, ts);
      ty += line_h;
    }
  }
  return canvas;
}

int64_t grid_count(const Tensor& images, const GridOptions& o) {
  LS_CHECK(images.defined() && images.rank() >= 3, "picture grid: images must be [N, H, W, C]");
  return std::min<int64_t>(images.dim(0), int64_t(o.rows) * o.cols);
}

void write_png(const std::string& path, const Tensor& canvas) {
  write_file_atomic(path, data::encode_png(canvas), "PNG image");
}

// Stacks per-example tensors [...] into [n, ...].
Tensor stack(const std::vector<Tensor>& parts) {
  if (parts.empty()) return {};
  std::vector<int64_t> dims = {int64_t(parts.size())};
  for (int64_t d : parts[0].shape()) dims.push_back(d);
  Tensor out = Tensor::empty(Shape(dims), parts[0].dtype());
  const size_t each = parts[0].nbytes();
  for (size_t i = 0; i < parts.size(); ++i) {
    LS_CHECK(parts[i].shape() == parts[0].shape() && parts[i].dtype() == parts[0].dtype(),
             "picture grid: dataset elements differ in shape (", parts[0].shape().str(), " vs ",
             parts[i].shape().str(), ")");
    Tensor c = parts[i].contiguous();
    std::memcpy(static_cast<char*>(out.raw()) + i * each, c.raw(), each);
  }
  return out;
}

}  // namespace

int text_width(const std::string& text, int scale) {
  if (text.empty()) return 0;
  return (int(text.size()) * (detail::kGlyphW + 1) - 1) * scale;
}

void draw_text(Tensor& canvas, int x, int y, const std::string& text, const uint8_t rgb[3],
               int scale) {
  LS_CHECK(canvas.rank() == 3 && canvas.dim(2) == 3 && canvas.dtype() == DType::u8,
           "draw_text: canvas must be uint8 [H, W, 3], got ", canvas.shape().str());
  const int H = int(canvas.dim(0)), W = int(canvas.dim(1));
  uint8_t* p = canvas.data<uint8_t>();
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t* g = detail::glyph(text[i]);
    const int gx = x + int(i) * (detail::kGlyphW + 1) * scale;
    for (int row = 0; row < detail::kGlyphH; ++row)
      for (int col = 0; col < detail::kGlyphW; ++col) {
        if (!((g[row] >> (detail::kGlyphW - 1 - col)) & 1)) continue;
        for (int sy = 0; sy < scale; ++sy)
          for (int sx = 0; sx < scale; ++sx) {
            const int px = gx + col * scale + sx, py = y + row * scale + sy;
            if (px < 0 || py < 0 || px >= W || py >= H) continue;
            uint8_t* q = p + (int64_t(py) * W + px) * 3;
            q[0] = rgb[0];
            q[1] = rgb[1];
            q[2] = rgb[2];
          }
      }
  }
}

Tensor render_sample_grid(const Tensor& images, const Tensor& labels,
                          const std::vector<std::string>& class_names, GridOptions o) {
  const int64_t n = grid_count(images, o);
  std::vector<int> l = label_indices(labels, n, "labels");
  std::vector<Caption> caps(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) caps[i].text = class_text(class_names, l[i]);
  return render(images, caps, o);
}

Tensor render_prediction_grid(const Tensor& images, const Tensor& true_labels,
                              const Tensor& predictions,
                              const std::vector<std::string>& class_names, GridOptions o) {
  const int64_t n = grid_count(images, o);
  LS_CHECK(predictions.defined(), "picture grid: predictions are required");
  std::vector<int> t = label_indices(true_labels, n, "true labels");
  std::vector<int> p = label_indices(predictions, n, "predictions");
  std::vector<float> prob = top_probability(predictions, n);
  std::vector<Caption> caps(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::string text = class_text(class_names, p[i]);
    if (!prob.empty()) {
      char b[16];
      std::snprintf(b, sizeof(b), " %d%%", int(std::lround(prob[i] * 100.f)));
      text += b;
    }
    if (t[i] >= 0) text += " (" + class_text(class_names, t[i]) + ")";
    const bool right = t[i] >= 0 && t[i] == p[i];
    caps[i] = {text, right ? kGreen : kRed, !right};
  }
  return render(images, caps, o);
}

void save_sample_grid(const Tensor& images, const Tensor& labels,
                      const std::vector<std::string>& class_names, const std::string& path,
                      GridOptions o) {
  write_png(path, render_sample_grid(images, labels, class_names, o));
}

void save_prediction_grid(const Tensor& images, const Tensor& true_labels,
                          const Tensor& predictions, const std::vector<std::string>& class_names,
                          const std::string& path, GridOptions o) {
  write_png(path, render_prediction_grid(images, true_labels, predictions, class_names, o));
}

void save_prediction_grid(const PredictFn& predict, const data::ImageDataset& dataset,
                          const std::string& path, GridOptions o) {
  save_prediction_grid(predict, static_cast<const data::Dataset&>(dataset), dataset.class_names(),
                       path, o);
}

std::pair<Tensor, Tensor> take_examples(const data::Dataset& dataset, int64_t n) {
  std::vector<Tensor> xs, ys;
  data::Iterator it = dataset.iterator(0);
  while (int64_t(xs.size()) < n) {
    std::optional<data::Element> e = it.next();
    if (!e) break;
    LS_CHECK(e->size() >= 1 && e->is_tensor(0), "picture grid: dataset elements must be ",
             "{images, labels}, got ", e->str());
    const Tensor& x = e->tensor(0);
    const bool has_y = e->size() >= 2 && e->is_tensor(1);
    const bool batched = x.rank() == 4;  // [B, H, W, C]; an unbatched image is [H, W, C]
    const int64_t b = batched ? x.dim(0) : 1;
    for (int64_t i = 0; i < b && int64_t(xs.size()) < n; ++i) {
      xs.push_back(batched ? x.slice(i, i + 1).reshape({x.dim(1), x.dim(2), x.dim(3)}) : x);
      if (has_y) {
        const Tensor& y = e->tensor(1);
        if (batched) {
          std::vector<int64_t> d(y.shape().begin() + 1, y.shape().end());
          ys.push_back(y.slice(i, i + 1).contiguous().reshape(Shape(d)));
        } else {
          ys.push_back(y);
        }
      }
    }
  }
  LS_CHECK(!xs.empty(), "picture grid: the dataset is empty");
  return {stack(xs), ys.empty() ? Tensor() : stack(ys)};
}

void save_sample_grid(const data::Dataset& dataset, const std::vector<std::string>& class_names,
                      const std::string& path, GridOptions o) {
  auto [x, y] = take_examples(dataset, int64_t(o.rows) * o.cols);
  save_sample_grid(x, y, class_names, path, o);
}

void save_sample_grid(const data::ImageDataset& dataset, const std::string& path, GridOptions o) {
  save_sample_grid(static_cast<const data::Dataset&>(dataset), dataset.class_names(), path, o);
}

void save_prediction_grid(const PredictFn& predict, const data::Dataset& dataset,
                          const std::vector<std::string>& class_names, const std::string& path,
                          GridOptions o) {
  auto [x, y] = take_examples(dataset, int64_t(o.rows) * o.cols);
  Tensor p = predict(x);
  save_prediction_grid(x, y, p, class_names, path, o);
}

}  // namespace lockstep::viz
