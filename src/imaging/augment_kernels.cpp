// Per-image augmentation kernels shared by the dataset map functions and the image op kernels
// (see src/imaging/internal/augment.h): parameter sampling from Philox, and the transformations
// themselves.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "imaging/internal/augment.h"
#include "lockstep/core/rng.h"
#include "lockstep/imaging/resize.h"

namespace lockstep::augment {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

struct Dims {
  int64_t n, h, w, c;
};

Dims dims_of(const Tensor& t, const char* what) {
  LS_CHECK(t.rank() == 4, what, " must be NHWC (rank 4), got shape ", t.shape().str());
  LS_CHECK(t.is_contiguous(), what, " must be contiguous");
  return {t.dim(0), t.dim(1), t.dim(2), t.dim(3)};
}

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class T>
inline float load(T v) {
  return float(v);
}
template <class T>
inline T store(float v);
template <>
inline float store<float>(float v) {
  return v;
}
template <>
inline uint8_t store<uint8_t>(float v) {
  // Round to nearest, saturate (NaN -> 0).
  if (!(v > 0.f)) return 0;
  if (v >= 255.f) return 255;
  return uint8_t(v + 0.5f);
}

// Calls f(T{}) with T the element type of x (f32 or u8).
template <class F>
void dispatch(const Tensor& x, F f) {
  if (x.dtype() == DType::f32)
    f(float{});
  else if (x.dtype() == DType::u8)
    f(uint8_t{});
  else
    LS_FAIL("images must be float32 or uint8, got ", dtype_name(x.dtype()));
}

template <class F>
void for_images(int64_t n, bool parallel, F f) {
#pragma omp parallel for schedule(static) if (parallel && n > 1)
  for (int64_t i = 0; i < n; ++i) f(i);
}

inline double lerp(const double r[2], float u) { return r[0] + (r[1] - r[0]) * double(u); }

// ---- flip ----
template <class T>
void flip_image(const T* in, T* out, const Dims& d, bool hor, bool ver) {
  const int64_t row = d.w * d.c;
  for (int64_t y = 0; y < d.h; ++y) {
    const T* src = in + (ver ? d.h - 1 - y : y) * row;
    T* dst = out + y * row;
    if (!hor) {
      std::memcpy(dst, src, size_t(row) * sizeof(T));
      continue;
    }
    for (int64_t x = 0; x < d.w; ++x) {
      const T* s = src + (d.w - 1 - x) * d.c;
      for (int64_t ch = 0; ch < d.c; ++ch) dst[x * d.c + ch] = s[ch];
    }
  }
}

// ---- projective sampling ----
// Maps a continuous input coordinate into [0, len) for the non-constant fill modes.
inline float map_coord(float x, int64_t len, Fill fill) {
  const float L = float(len);
  switch (fill) {
    case Fill::reflect: {  // (d c b a | a b c d | d c b a), edges at -0.5 and len - 0.5
      if (len <= 1) return 0.f;
      const float p = 2.f * L;
      x = std::fmod(x, p);
      if (x < 0) x += p;
      if (x >= L) x = p - x - 1.f;
      return std::clamp(x, 0.f, L - 1.f);
    }
    case Fill::wrap: {  // (a b c d | a b c d | a b c d); bilinear neighbours wrap too
      x = std::fmod(x, L);
      if (x < 0) x += L;
      return x >= L ? 0.f : x;
    }
    case Fill::nearest:
      return std::clamp(x, 0.f, L - 1.f);
    default:
      return x;
  }
}

// Up to four (pixel, weight) taps for the input point (sx, sy); weight outside the image (fill
// mode constant) goes to fill_w.
struct Taps {
  int64_t idx[4];
  float w[4];
  int n = 0;
  float fill_w = 0.f;
};

inline Taps taps(float sx, float sy, int64_t H, int64_t W, const FillSpec& f) {
  Taps t;
  if (!std::isfinite(sx) || !std::isfinite(sy)) {
    t.fill_w = 1.f;
    return t;
  }
  if (f.fill != Fill::constant) {
    sx = map_coord(sx, W, f.fill);
    sy = map_coord(sy, H, f.fill);
  } else if (std::fabs(sx) > 1e9f || std::fabs(sy) > 1e9f) {
    t.fill_w = 1.f;
    return t;
  }
  auto add = [&](int64_t yi, int64_t xi, float w) {
    if (w == 0.f) return;
    if (f.fill == Fill::wrap) {
      yi = yi >= H ? yi - H : yi;
      xi = xi >= W ? xi - W : xi;
    } else if (f.fill != Fill::constant) {
      yi = std::clamp<int64_t>(yi, 0, H - 1);
      xi = std::clamp<int64_t>(xi, 0, W - 1);
    } else if (yi < 0 || yi >= H || xi < 0 || xi >= W) {
      t.fill_w += w;
      return;
    }
    t.idx[t.n] = yi * W + xi;
    t.w[t.n++] = w;
  };
  if (f.interp == Interp::nearest) {
    int64_t xi = int64_t(std::round(sx)), yi = int64_t(std::round(sy));
    if (f.fill == Fill::wrap) {  // round() may reach len
      xi = xi >= W ? 0 : xi;
      yi = yi >= H ? 0 : yi;
    }
    add(yi, xi, 1.f);
  } else {
    const float fx = std::floor(sx), fy = std::floor(sy);
    const float ax = sx - fx, ay = sy - fy;
    const int64_t x0 = int64_t(fx), y0 = int64_t(fy);
    add(y0, x0, (1.f - ay) * (1.f - ax));
    add(y0, x0 + 1, (1.f - ay) * ax);
    add(y0 + 1, x0, ay * (1.f - ax));
    add(y0 + 1, x0 + 1, ay * ax);
  }
  return t;
}

// Input point of output pixel (x, y).
inline void project(const float* t, int64_t x, int64_t y, float& sx, float& sy) {
  const float fx = float(x), fy = float(y);
  sx = t[0] * fx + t[1] * fy + t[2];
  sy = t[3] * fx + t[4] * fy + t[5];
  if (t[6] != 0.f || t[7] != 0.f) {  // projective (affine maps skip the exact division by 1)
    const float k = t[6] * fx + t[7] * fy + 1.f;
    sx /= k;
    sy /= k;
  }
}

// NC > 0: the channel count known at compile time (1, 3); 0: d.c at run time.
template <class T, int NC>
void affine_image(const T* in, T* out, const Dims& d, const float* t, const FillSpec& f) {
  const int64_t C = NC > 0 ? NC : d.c;
  const float xmax = float(d.w - 1), ymax = float(d.h - 1);
  float acc[64];
  for (int64_t y = 0; y < d.h; ++y)
    for (int64_t x = 0; x < d.w; ++x) {
      float sx, sy;
      project(t, x, y, sx, sy);
      T* o = out + (y * d.w + x) * C;
      // Interior fast paths (every fill mode maps interior points to themselves); the same
      // weights and summation order as the general path below.
      if (f.interp == Interp::bilinear && sx >= 0.f && sy >= 0.f && sx < xmax && sy < ymax) {
        const int64_t x0 = int64_t(sx), y0 = int64_t(sy);
        const float ax = sx - float(x0), ay = sy - float(y0);
        const float w00 = (1.f - ay) * (1.f - ax), w01 = (1.f - ay) * ax, w10 = ay * (1.f - ax),
                    w11 = ay * ax;
        const T* p = in + (y0 * d.w + x0) * C;
        const T* q = p + d.w * C;
        for (int64_t ch = 0; ch < C; ++ch)
          o[ch] = store<T>(0.f + w00 * load(p[ch]) + w01 * load(p[C + ch]) + w10 * load(q[ch]) +
                           w11 * load(q[C + ch]));
        continue;
      }
      if (f.interp == Interp::nearest && sx >= 0.f && sy >= 0.f && sx <= xmax && sy <= ymax) {
        const T* p = in + (int64_t(std::round(sy)) * d.w + int64_t(std::round(sx))) * C;
        for (int64_t ch = 0; ch < C; ++ch) o[ch] = store<T>(0.f + 1.f * load(p[ch]));
        continue;
      }
      const Taps tp = taps(sx, sy, d.h, d.w, f);
      for (int64_t c0 = 0; c0 < C; c0 += 64) {
        const int64_t nc = std::min<int64_t>(64, C - c0);
        for (int64_t ch = 0; ch < nc; ++ch) acc[ch] = tp.fill_w * f.value;
        for (int k = 0; k < tp.n; ++k) {
          const T* p = in + tp.idx[k] * C + c0;
          const float w = tp.w[k];
          for (int64_t ch = 0; ch < nc; ++ch) acc[ch] += w * load(p[ch]);
        }
        for (int64_t ch = 0; ch < nc; ++ch) o[c0 + ch] = store<T>(acc[ch]);
      }
    }
}

void affine_grad_image(const float* dy, float* dx, const Dims& d, const float* t,
                       const FillSpec& f) {
  std::memset(dx, 0, size_t(d.h * d.w * d.c) * sizeof(float));
  for (int64_t y = 0; y < d.h; ++y)
    for (int64_t x = 0; x < d.w; ++x) {
      float sx, sy;
      project(t, x, y, sx, sy);
      const Taps tp = taps(sx, sy, d.h, d.w, f);
      const float* g = dy + (y * d.w + x) * d.c;
      for (int k = 0; k < tp.n; ++k) {
        float* p = dx + tp.idx[k] * d.c;
        for (int64_t ch = 0; ch < d.c; ++ch) p[ch] += tp.w[k] * g[ch];
      }
    }
}

// 3x3 row-major products for composing affine maps.
using M3 = std::array<double, 9>;
M3 mul(const M3& a, const M3& b) {
  M3 r{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 3; ++k) r[i * 3 + j] += a[i * 3 + k] * b[k * 3 + j];
  return r;
}

// ---- contrast / brightness ----
template <class T>
void channel_means(const T* in, int64_t hw, int64_t c, std::vector<double>& m) {
  m.assign(size_t(c), 0.0);
  for (int64_t p = 0; p < hw; ++p)
    for (int64_t ch = 0; ch < c; ++ch) m[ch] += load(in[p * c + ch]);
  for (auto& v : m) v /= double(hw);
}

template <class T>
void contrast_image(const T* in, T* out, const Dims& d, float f, float lo, float hi) {
  std::vector<double> md;
  channel_means(in, d.h * d.w, d.c, md);
  std::vector<float> m(md.begin(), md.end());
  for (int64_t p = 0; p < d.h * d.w; ++p)
    for (int64_t ch = 0; ch < d.c; ++ch) {
      const float v = (load(in[p * d.c + ch]) - m[ch]) * f + m[ch];
      out[p * d.c + ch] = store<T>(std::clamp(v, lo, hi));
    }
}

void contrast_grad_image(const float* dy, const float* x, float* dx, const Dims& d, float f,
                         float lo, float hi) {
  const int64_t hw = d.h * d.w;
  std::vector<double> md, gm(size_t(d.c), 0.0);
  channel_means(x, hw, d.c, md);
  std::vector<float> m(md.begin(), md.end());
  // g = dy where the output was not clipped; dx = f * g + (1 - f) * mean(g) per channel.
  for (int64_t p = 0; p < hw; ++p)
    for (int64_t ch = 0; ch < d.c; ++ch) {
      const int64_t i = p * d.c + ch;
      const float v = (x[i] - m[ch]) * f + m[ch];
      const float g = (v >= lo && v <= hi) ? dy[i] : 0.f;
      dx[i] = g;
      gm[ch] += g;
    }
  for (int64_t ch = 0; ch < d.c; ++ch) gm[ch] = gm[ch] / double(hw) * (1.0 - double(f));
  for (int64_t p = 0; p < hw; ++p)
    for (int64_t ch = 0; ch < d.c; ++ch) dx[p * d.c + ch] = dx[p * d.c + ch] * f + float(gm[ch]);
}

}  // namespace

Fill parse_fill_mode(const std::string& s) {
  if (s == "reflect") return Fill::reflect;
  if (s == "wrap") return Fill::wrap;
  if (s == "constant") return Fill::constant;
  if (s == "nearest") return Fill::nearest;
  LS_FAIL("fill_mode must be \"reflect\", \"wrap\", \"constant\" or \"nearest\", got \"", s, "\"");
}

Interp parse_interpolation(const std::string& s) {
  if (s == "bilinear") return Interp::bilinear;
  if (s == "nearest") return Interp::nearest;
  if (s == "area") return Interp::area;
  LS_FAIL("interpolation must be \"bilinear\", \"nearest\" or \"area\", got \"", s, "\"");
}

int parse_flip_mode(const std::string& s) {
  if (s == "horizontal") return 1;
  if (s == "vertical") return 2;
  if (s == "horizontal_and_vertical") return 3;
  LS_FAIL("mode must be \"horizontal\", \"vertical\" or \"horizontal_and_vertical\", got \"", s,
          "\"");
}

Draws draws(Kind kind, uint64_t key, uint64_t counter, uint64_t index) {
  const uint64_t k = mix(key ^ mix(uint64_t(kind)));
  auto a = philox4x32(k, counter, 2 * index), b = philox4x32(k, counter, 2 * index + 1);
  Draws d;
  for (int i = 0; i < 4; ++i) {
    d.u[i] = uint_to_unit_float(a[i]);
    d.u[4 + i] = uint_to_unit_float(b[i]);
  }
  return d;
}

void sample_flip(int mode, uint64_t key, uint64_t counter, int64_t n, float* flags,
                 uint64_t first_index) {
  for (int64_t i = 0; i < n; ++i) {
    Draws d = draws(Kind::flip, key, counter, first_index + uint64_t(i));
    flags[2 * i] = (mode & 1) && d.u[0] < 0.5f ? 1.f : 0.f;
    flags[2 * i + 1] = (mode & 2) && d.u[1] < 0.5f ? 1.f : 0.f;
  }
}

void apply_flip(const Tensor& x, const Tensor& y, const float* flags, bool parallel) {
  Dims d = dims_of(x, "images");
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t sz = d.h * d.w * d.c;
    for_images(d.n, parallel, [&](int64_t i) {
      flip_image(in + i * sz, out + i * sz, d, flags[2 * i] != 0.f, flags[2 * i + 1] != 0.f);
    });
  });
}

void sample_affine(const AffineRanges& r, uint64_t key, uint64_t counter, int64_t n, int64_t height,
                   int64_t width, float* transforms, uint64_t first_index) {
  const double H1 = double(height - 1), W1 = double(width - 1);
  for (int64_t i = 0; i < n; ++i) {
    Draws d = draws(Kind::affine, key, counter, first_index + uint64_t(i));
    const double angle = lerp(r.rotation, d.u[0]) * kTwoPi;
    const double zy = 1.0 + lerp(r.zoom_height, d.u[1]);
    const double zx = r.zoom_width_from_height ? zy : 1.0 + lerp(r.zoom_width, d.u[2]);
    const double ty = lerp(r.translation_height, d.u[3]) * double(height);
    const double tx = lerp(r.translation_width, d.u[4]) * double(width);
    const double c = std::cos(angle), s = std::sin(angle);
    // Output -> input maps (Keras's zoom, rotation and translation matrices); an image zoomed,
    // then rotated, then translated samples the input at Z * R * T * p.
    const M3 Z{zx, 0, W1 / 2 * (1 - zx), 0, zy, H1 / 2 * (1 - zy), 0, 0, 1};
    const M3 R{c, -s, (W1 - (c * W1 - s * H1)) / 2, s, c, (H1 - (s * W1 + c * H1)) / 2, 0, 0, 1};
    const M3 T{1, 0, -tx, 0, 1, -ty, 0, 0, 1};
    const M3 M = mul(mul(Z, R), T);
    float* t = transforms + 8 * i;
    for (int k = 0; k < 6; ++k) t[k] = float(M[k]);
    t[6] = float(M[6]);
    t[7] = float(M[7]);
  }
}

void apply_affine(const Tensor& x, const Tensor& y, const float* transforms, const FillSpec& f,
                  bool parallel, bool shared) {
  Dims d = dims_of(x, "images");
  LS_CHECK(f.interp != Interp::area,
           "affine transforms support bilinear and nearest interpolation");
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t sz = d.h * d.w * d.c;
    for_images(d.n, parallel, [&](int64_t i) {
      const float* t = transforms + (shared ? 0 : 8 * i);
      if (d.c == 3)
        affine_image<T, 3>(in + i * sz, out + i * sz, d, t, f);
      else if (d.c == 1)
        affine_image<T, 1>(in + i * sz, out + i * sz, d, t, f);
      else
        affine_image<T, 0>(in + i * sz, out + i * sz, d, t, f);
    });
  });
}

void apply_affine_grad(const Tensor& dy, const Tensor& dx, const float* transforms,
                       const FillSpec& f, bool parallel) {
  Dims d = dims_of(dy, "dy");
  const int64_t sz = d.h * d.w * d.c;
  const float* g = dy.data<float>();
  float* out = dx.data<float>();
  for_images(d.n, parallel, [&](int64_t i) {
    affine_grad_image(g + i * sz, out + i * sz, d, transforms + 8 * i, f);
  });
}

void sample_uniform(Kind kind, double lo, double hi, uint64_t key, uint64_t counter, int64_t n,
                    float* out, uint64_t first_index) {
  const double r[2] = {lo, hi};
  for (int64_t i = 0; i < n; ++i)
    out[i] = float(lerp(r, draws(kind, key, counter, first_index + uint64_t(i)).u[0]));
}

void apply_contrast(const Tensor& x, const Tensor& y, const float* factors, float lo, float hi,
                    bool parallel) {
  Dims d = dims_of(x, "images");
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t sz = d.h * d.w * d.c;
    for_images(d.n, parallel, [&](int64_t i) {
      contrast_image(in + i * sz, out + i * sz, d, factors[i], lo, hi);
    });
  });
}

void apply_contrast_grad(const Tensor& dy, const Tensor& x, const Tensor& dx, const float* factors,
                         float lo, float hi, bool parallel) {
  Dims d = dims_of(x, "images");
  const int64_t sz = d.h * d.w * d.c;
  for_images(d.n, parallel, [&](int64_t i) {
    contrast_grad_image(dy.data<float>() + i * sz, x.data<float>() + i * sz,
                        dx.data<float>() + i * sz, d, factors[i], lo, hi);
  });
}

void apply_brightness(const Tensor& x, const Tensor& y, const float* deltas, float lo, float hi,
                      bool parallel) {
  Dims d = dims_of(x, "images");
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t sz = d.h * d.w * d.c;
    for_images(d.n, parallel, [&](int64_t i) {
      const float delta = deltas[i];
      for (int64_t e = i * sz; e < (i + 1) * sz; ++e)
        out[e] = store<T>(std::clamp(load(in[e]) + delta, lo, hi));
    });
  });
}

void apply_brightness_grad(const Tensor& dy, const Tensor& x, const Tensor& dx, const float* deltas,
                           float lo, float hi, bool parallel) {
  Dims d = dims_of(x, "images");
  const int64_t sz = d.h * d.w * d.c;
  const float *g = dy.data<float>(), *xv = x.data<float>();
  float* out = dx.data<float>();
  for_images(d.n, parallel, [&](int64_t i) {
    for (int64_t e = i * sz; e < (i + 1) * sz; ++e) {
      const float v = xv[e] + deltas[i];
      out[e] = (v >= lo && v <= hi) ? g[e] : 0.f;
    }
  });
}

void sample_crop(uint64_t key, uint64_t counter, int64_t n, int64_t height, int64_t width,
                 int64_t crop_height, int64_t crop_width, float* offsets, uint64_t first_index) {
  LS_CHECK(crop_height <= height && crop_width <= width, "crop ", crop_height, "x", crop_width,
           " is larger than the image ", height, "x", width);
  for (int64_t i = 0; i < n; ++i) {
    Draws d = draws(Kind::crop, key, counter, first_index + uint64_t(i));
    const int64_t mh = height - crop_height, mw = width - crop_width;
    offsets[2 * i] = float(std::min<int64_t>(int64_t(d.u[0] * float(mh + 1)), mh));
    offsets[2 * i + 1] = float(std::min<int64_t>(int64_t(d.u[1] * float(mw + 1)), mw));
  }
}

void apply_crop(const Tensor& x, const Tensor& y, const float* offsets, bool parallel) {
  Dims d = dims_of(x, "images"), o = dims_of(y, "crop");
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t i = 0; i < d.n; ++i) {  // validate serially: no throw inside OpenMP
      const int64_t top = int64_t(offsets[2 * i]), left = int64_t(offsets[2 * i + 1]);
      LS_CHECK(top >= 0 && left >= 0 && top + o.h <= d.h && left + o.w <= d.w, "crop offset (", top,
               ", ", left, ") of image ", i, " is out of range for a ", o.h, "x", o.w, " crop of ",
               d.h, "x", d.w);
    }
    for_images(d.n, parallel, [&](int64_t i) {
      const int64_t top = int64_t(offsets[2 * i]), left = int64_t(offsets[2 * i + 1]);
      for (int64_t r = 0; r < o.h; ++r)
        std::memcpy(out + ((i * o.h + r) * o.w) * o.c,
                    in + ((i * d.h + top + r) * d.w + left) * d.c, size_t(o.w * o.c) * sizeof(T));
    });
  });
}

void apply_crop_grad(const Tensor& dy, const Tensor& dx, const float* offsets, bool parallel) {
  Dims o = dims_of(dy, "dy"), d = dims_of(dx, "dx");
  const float* g = dy.data<float>();
  float* out = dx.data<float>();
  for_images(d.n, parallel, [&](int64_t i) {
    const int64_t top = int64_t(offsets[2 * i]), left = int64_t(offsets[2 * i + 1]);
    std::memset(out + i * d.h * d.w * d.c, 0, size_t(d.h * d.w * d.c) * sizeof(float));
    for (int64_t r = 0; r < o.h; ++r)
      std::memcpy(out + ((i * d.h + top + r) * d.w + left) * d.c, g + ((i * o.h + r) * o.w) * o.c,
                  size_t(o.w * o.c) * sizeof(float));
  });
}

CropBox aspect_crop_box(int64_t height, int64_t width, int64_t target_height,
                        int64_t target_width) {
  // The image layer's Keras smart_resize box, so Resizing and image_dataset_from_directory agree.
  imaging::CropBox b =
      imaging::aspect_crop_box(int(height), int(width), int(target_height), int(target_width));
  return {b.y, b.x, b.height, b.width};
}

void resize(const Tensor& x, const Tensor& y, Interp interp, bool parallel) {
  // tf.image.resize semantics from lockstep/data/image.h, per image.
  Dims d = dims_of(x, "images"), o = dims_of(y, "resized images");
  const imaging::Interpolation di = interp == Interp::nearest ? imaging::Interpolation::nearest
                                    : interp == Interp::area  ? imaging::Interpolation::area
                                                              : imaging::Interpolation::bilinear;
  const int64_t isz = d.h * d.w * d.c, osz = o.h * o.w * o.c;
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for_images(d.n, parallel, [&](int64_t i) {
      std::vector<float> scratch, tmp;
      float* dst;
      if constexpr (std::is_same_v<T, float>) {
        dst = out + i * osz;
      } else {
        tmp.resize(size_t(osz));
        dst = tmp.data();
      }
      if constexpr (std::is_same_v<T, float>)
        imaging::resize_f32_to_f32(in + i * isz, int(d.h), int(d.w), int(d.c), d.w * d.c, dst,
                                   int(o.h), int(o.w), di, &scratch);
      else
        imaging::resize_u8_to_f32(in + i * isz, int(d.h), int(d.w), int(d.c), d.w * d.c, dst,
                                  int(o.h), int(o.w), di, &scratch);
      if constexpr (!std::is_same_v<T, float>)
        for (int64_t e = 0; e < osz; ++e) out[i * osz + e] = store<T>(dst[e]);
    });
  });
}

}  // namespace lockstep::augment
