// Image resizing with tf.image.resize semantics (antialias=false), separable and
// allocation-free in the hot path: a vertical pass over whole source rows (contiguous,
// vectorisable) into a float scratch row, then a horizontal pass per output pixel.
#include "lockstep/imaging/resize.h"

#include <algorithm>
#include <cmath>

namespace lockstep::imaging {

Interpolation parse_interpolation(const std::string& s) {
  if (s == "bilinear") return Interpolation::bilinear;
  if (s == "nearest") return Interpolation::nearest;
  if (s == "area") return Interpolation::area;
  LS_FAIL("interpolation must be \"bilinear\", \"nearest\" or \"area\", got \"", s, "\"");
}

CropBox aspect_crop_box(int height, int width, int target_height, int target_width) {
  // keras.preprocessing.image.smart_resize / image_dataset_from_directory's crop.
  int crop_h = int(double(width) * target_height / target_width);
  crop_h = std::max(std::min(height, crop_h), 1);
  int crop_w = int(double(height) * target_width / target_height);
  crop_w = std::max(std::min(width, crop_w), 1);
  return {(height - crop_h) / 2, (width - crop_w) / 2, crop_h, crop_w};
}

namespace {

struct Tap2 {
  int64_t lo, hi;  // element offsets (index * channels)
  float t;         // weight of hi
};

// Half-pixel-centre bilinear taps exactly as TensorFlow's compute_interpolation_weights.
void bilinear_taps(int in, int out, int mult, Tap2* taps) {
  const float scale = float(in) / float(out);
  for (int i = 0; i < out; ++i) {
    const float src = (float(i) + 0.5f) * scale - 0.5f;
    const float f = std::floor(src);
    const int64_t lo = std::max<int64_t>(int64_t(f), 0);
    const int64_t hi = std::min<int64_t>(int64_t(std::ceil(src)), in - 1);
    taps[i] = {lo * mult, hi * mult, src - f};
  }
}

// TensorFlow's half-pixel nearest neighbour: floor((i + 0.5) * scale), clamped.
int64_t nearest_index(int i, int in, int out) {
  const float scale = float(in) / float(out);
  int64_t s = int64_t(std::floor((float(i) + 0.5f) * scale));
  return std::clamp<int64_t>(s, 0, in - 1);
}

// Area taps: input cells overlapping [i*scale, (i+1)*scale), weighted by the overlap and
// normalised by 1/scale (TensorFlow's ResizeArea).
struct AreaTaps {
  std::vector<int> begin;    // per output index: first entry in idx/w
  std::vector<int64_t> idx;  // source index (times mult)
  std::vector<float> w;
};
void area_taps(int in, int out, int mult, AreaTaps* a) {
  const float scale = float(in) / float(out);
  a->begin.assign(out + 1, 0);
  a->idx.clear();
  a->w.clear();
  for (int i = 0; i < out; ++i) {
    a->begin[i] = int(a->idx.size());
    const float x0 = float(i) * scale, x1 = float(i + 1) * scale;
    const int64_t s = int64_t(std::floor(x0)), e = int64_t(std::ceil(x1));
    for (int64_t k = s; k < e; ++k) {
      float wk = std::min(float(k + 1), x1) - std::max(float(k), x0);
      if (wk <= 0.f) continue;
      a->idx.push_back(std::min<int64_t>(k, in - 1) * mult);
      a->w.push_back(wk / scale);
    }
  }
  a->begin[out] = int(a->idx.size());
}

template <typename T>
inline void lerp_rows(const T* __restrict r0, const T* __restrict r1, float t, int64_t n,
                      float* __restrict out) {
  if (r0 == r1 || t == 0.f) {
    for (int64_t i = 0; i < n; ++i) out[i] = float(r0[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float a = float(r0[i]);
    out[i] = a + (float(r1[i]) - a) * t;
  }
}

template <int C>
void bilinear_h(const float* __restrict row, const Tap2* taps, int dw, int c_dyn,
                float* __restrict out) {
  const int c = C > 0 ? C : c_dyn;
  for (int x = 0; x < dw; ++x) {
    const float* a = row + taps[x].lo;
    const float* b = row + taps[x].hi;
    const float t = taps[x].t;
    for (int k = 0; k < c; ++k) out[k] = a[k] + (b[k] - a[k]) * t;
    out += c;
  }
}

template <typename T, int C>
void resize_bilinear(const T* src, int sh, int sw, int c_dyn, int64_t stride, float* dst, int dh,
                     int dw, std::vector<float>& scratch) {
  const int c = C > 0 ? C : c_dyn;
  const int64_t row_n = int64_t(sw) * c;
  // scratch: [row_n floats][dw Tap2][dh Tap2]
  const size_t tap_floats = (sizeof(Tap2) * size_t(dw + dh) + sizeof(float) - 1) / sizeof(float);
  scratch.resize(size_t(row_n) + tap_floats + 4);
  float* row = scratch.data();
  Tap2* xt = reinterpret_cast<Tap2*>(
      (reinterpret_cast<uintptr_t>(scratch.data() + row_n) + alignof(Tap2) - 1) &
      ~(uintptr_t(alignof(Tap2)) - 1));
  Tap2* yt = xt + dw;
  bilinear_taps(sw, dw, c, xt);
  bilinear_taps(sh, dh, 1, yt);
  for (int y = 0; y < dh; ++y) {
    lerp_rows(src + yt[y].lo * stride, src + yt[y].hi * stride, yt[y].t, row_n, row);
    bilinear_h<C>(row, xt, dw, c, dst + int64_t(y) * dw * c);
  }
}

template <typename T>
void resize_nearest(const T* src, int sh, int sw, int c, int64_t stride, float* dst, int dh, int dw,
                    std::vector<float>& scratch) {
  thread_local std::vector<int64_t> xi;
  xi.resize(size_t(dw));
  for (int x = 0; x < dw; ++x) xi[x] = nearest_index(x, sw, dw) * c;
  for (int y = 0; y < dh; ++y) {
    const T* r = src + nearest_index(y, sh, dh) * stride;
    float* o = dst + int64_t(y) * dw * c;
    for (int x = 0; x < dw; ++x)
      for (int k = 0; k < c; ++k) *o++ = float(r[xi[x] + k]);
  }
}

template <typename T>
void resize_area(const T* src, int sh, int sw, int c, int64_t stride, float* dst, int dh, int dw,
                 std::vector<float>& scratch) {
  AreaTaps xa, ya;
  area_taps(sw, dw, c, &xa);
  area_taps(sh, dh, 1, &ya);
  const int64_t row_n = int64_t(sw) * c;
  scratch.resize(size_t(row_n));
  float* row = scratch.data();
  for (int y = 0; y < dh; ++y) {
    std::fill(row, row + row_n, 0.f);
    for (int j = ya.begin[y]; j < ya.begin[y + 1]; ++j) {
      const T* r = src + ya.idx[j] * stride;
      const float wy = ya.w[j];
      for (int64_t i = 0; i < row_n; ++i) row[i] += wy * float(r[i]);
    }
    float* o = dst + int64_t(y) * dw * c;
    for (int x = 0; x < dw; ++x, o += c) {
      for (int k = 0; k < c; ++k) o[k] = 0.f;
      for (int j = xa.begin[x]; j < xa.begin[x + 1]; ++j) {
        const float* p = row + xa.idx[j];
        const float wx = xa.w[j];
        for (int k = 0; k < c; ++k) o[k] += wx * p[k];
      }
    }
  }
}

template <typename T>
void resize_any(const T* src, int sh, int sw, int c, int64_t stride, float* dst, int dh, int dw,
                Interpolation interp, std::vector<float>* scratch) {
  LS_CHECK(sh > 0 && sw > 0 && c > 0, "resize: empty source image ", sh, "x", sw, "x", c);
  LS_CHECK(dh > 0 && dw > 0, "resize: target size must be positive, got ", dh, "x", dw);
  thread_local std::vector<float> local;
  std::vector<float>& s = scratch ? *scratch : local;
  switch (interp) {
    case Interpolation::bilinear:
      if (c == 3) return resize_bilinear<T, 3>(src, sh, sw, c, stride, dst, dh, dw, s);
      if (c == 1) return resize_bilinear<T, 1>(src, sh, sw, c, stride, dst, dh, dw, s);
      if (c == 4) return resize_bilinear<T, 4>(src, sh, sw, c, stride, dst, dh, dw, s);
      return resize_bilinear<T, 0>(src, sh, sw, c, stride, dst, dh, dw, s);
    case Interpolation::nearest:
      return resize_nearest<T>(src, sh, sw, c, stride, dst, dh, dw, s);
    case Interpolation::area:
      return resize_area<T>(src, sh, sw, c, stride, dst, dh, dw, s);
  }
}

}  // namespace

void resize_u8_to_f32(const uint8_t* src, int sh, int sw, int c, int64_t stride, float* dst, int dh,
                      int dw, Interpolation interp, std::vector<float>* scratch) {
  resize_any<uint8_t>(src, sh, sw, c, stride, dst, dh, dw, interp, scratch);
}

void resize_f32_to_f32(const float* src, int sh, int sw, int c, int64_t stride, float* dst, int dh,
                       int dw, Interpolation interp, std::vector<float>* scratch) {
  resize_any<float>(src, sh, sw, c, stride, dst, dh, dw, interp, scratch);
}

Tensor resize_image(const Tensor& image, int height, int width, Interpolation interp,
                    bool crop_to_aspect_ratio) {
  LS_CHECK(image.defined() && image.rank() == 3, "resize_image: expected an image [H, W, C], got ",
           image.defined() ? image.shape().str() : std::string("an undefined tensor"));
  LS_CHECK(height > 0 && width > 0, "resize_image: target size must be positive, got ", height, "x",
           width);
  Tensor src = image.contiguous();
  const int h = int(src.dim(0)), w = int(src.dim(1)), c = int(src.dim(2));
  CropBox box{0, 0, h, w};
  if (crop_to_aspect_ratio) box = aspect_crop_box(h, w, height, width);
  Tensor out = Tensor::empty({height, width, c}, DType::f32);
  const int64_t stride = int64_t(w) * c;
  const int64_t off = box.y * stride + int64_t(box.x) * c;
  if (src.dtype() == DType::u8) {
    resize_u8_to_f32(src.data<uint8_t>() + off, box.height, box.width, c, stride, out.data<float>(),
                     height, width, interp);
  } else {
    LS_CHECK(src.dtype() == DType::f32, "resize_image: dtype must be uint8 or float32, got ",
             dtype_name(src.dtype()));
    resize_f32_to_f32(src.data<float>() + off, box.height, box.width, c, stride, out.data<float>(),
                      height, width, interp);
  }
  return out;
}

}  // namespace lockstep::imaging
