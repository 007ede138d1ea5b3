// cpu backend: vectorised NHWC max/avg pooling (forward and backward), parallel over images.
// max_pool2d_grad recomputes the first argmax of each window from x and y (no saved indices).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/internal/kernel_util.h"
#include "ops/internal/nn_geometry.h"

// The vector kernels below (16 channels per AVX-512 register) need AVX-512 F, BW and VL;
// otherwise the scalar loops run.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define LOCKSTEP_POOL_VECTORS 1
#endif

namespace lockstep::cpu {
namespace {

using ops::ConvGeom;

using ops::pool_window;
using Window = ops::PoolWindow;

// Non-overlapping windows without leading padding (the usual 2x2/2): the gradient kernels write
// every covered dx element exactly once.
inline bool tiled_windows(const ConvGeom& g) {
  return g.SH == g.KH && g.SW == g.KW && g.PT == 0 && g.PL == 0;
}

// Zeroes one image plane of dx ([H, W, V] values of `bytes` each, V values per position): all of
// it, or with tiled windows only the rows and columns past the last window.
inline void zero_dx_plane(const ConvGeom& g, void* plane, int64_t V, size_t bytes, bool tiled) {
  char* d = static_cast<char*>(plane);
  const size_t pos = bytes * size_t(V);  // one position's values
  if (!tiled) {
    std::memset(d, 0, pos * size_t(g.H * g.W));
    return;
  }
  const int64_t ch = std::min(g.H, g.OH * g.KH), cw = std::min(g.W, g.OW * g.KW);
  for (int64_t ih = 0; ih < ch; ++ih)
    std::memset(d + pos * size_t(ih * g.W + cw), 0, pos * size_t(g.W - cw));
  std::memset(d + pos * size_t(ch * g.W), 0, pos * size_t((g.H - ch) * g.W));
}

// f(n, yo, window) for every output position of an NHWC pool (yo: the position's first
// element in y), parallel over images and output rows.
template <class F>
void for_each_output(const ConvGeom& g, F&& f) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow)
        f(n, ((n * g.OH + oh) * g.OW + ow) * g.C, pool_window(g, oh, ow));
}

// The window maximum so far, m, after x: a NaN in the window makes the maximum NaN, as
// TensorFlow's and PyTorch's max pooling do (std::max(m, x) dropped it, so a NaN input left the
// loss finite and fit's NaN stop silent); of equal values (+0 and -0) the first stays.
inline float max_keep_nan(float m, float x) { return x > m || x != x ? x : m; }

#ifdef LOCKSTEP_POOL_VECTORS
// GCC 12 warns about its own intrinsics' _mm512_undefined_* placeholders (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 channels as f32 lanes: f32 loads as is, bf16 widens exactly (its bits are the high half of
// an f32). Stores narrow back exactly: every value stored is one of the loaded ones.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline void store16(bf16* p, __m512 v) {
  const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
}
// dy's 16 values where `keep`, else 0 (raw bits: no rounding, no arithmetic).
inline void store_masked16(float* p, __mmask16 keep, const float* dy) {
  _mm512_storeu_ps(p, _mm512_maskz_loadu_ps(keep, dy));
}
inline void store_masked16(bf16* p, __mmask16 keep, const bf16* dy) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_maskz_loadu_epi16(keep, dy));
}

// One window's 16 channels: x points at its first row and column, `row` and `col` step to the
// next input row and column (NHWC: W*C and C; nChw16c: W*16 and 16). As max_keep_nan:
// _mm512_max_ps(x, m) returns its second operand m when either is NaN or both are zeros (so the
// first of equal zeros stays), and a NaN x is then put in by its mask.
template <class T>
inline __m512 window_max16(const T* x, const Window& wd, int64_t row, int64_t col) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
    for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
      const __m512 v = load16(x + ih * row + iw * col);
      m = _mm512_mask_mov_ps(_mm512_max_ps(v, m), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
    }
  return m;
}

// One tiled window's 16 channels of dx, each element written once, in window order: dy goes to
// the first x equal to the max y (and, Relu, only where x > 0); addressing as window_max16.
template <class T, bool Relu>
inline void window_grad16(const T* x, T* dx, const T* y, const T* dy, const Window& wd, int64_t row,
                          int64_t col) {
  const __m512 yv = load16(y);
  __mmask16 free = 0xffff;  // lanes whose maximum is not placed yet
  for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
    for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
      const int64_t off = ih * row + iw * col;
      const __m512 xv = load16(x + off);
      const __mmask16 hit = _mm512_mask_cmp_ps_mask(free, xv, yv, _CMP_EQ_OQ);
      free &= __mmask16(~hit);
      const __mmask16 keep =
          Relu ? _mm512_mask_cmp_ps_mask(hit, xv, _mm512_setzero_ps(), _CMP_GT_OQ) : hit;
      store_masked16(dx + off, keep, dy);
    }
}

// NHWC, C % 16 == 0: 16 channels per vector.
template <class T>
void max_fwd_vec(const ConvGeom& g, const T* x, T* y) {
  const int64_t C = g.C;
  for_each_output(g, [&](int64_t n, int64_t yo, const Window& wd) {
    for (int64_t c = 0; c < C; c += 16)
      store16(y + yo + c, window_max16(x + n * g.H * g.W * C + c, wd, g.W * C, C));
  });
}

// Tiled windows, NHWC, C % 16 == 0.
template <class T, bool Relu>
void max_bwd_tiled_vec(const ConvGeom& g, const T* dy, const T* x, const T* y, T* dx) {
  const int64_t C = g.C, img = g.H * g.W * C;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    zero_dx_plane(g, dx + n * img, C, sizeof(T), true);
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t yo = ((n * g.OH + oh) * g.OW + ow) * C;
        const Window wd = pool_window(g, oh, ow);
        for (int64_t c = 0; c < C; c += 16)
          window_grad16<T, Relu>(x + n * img + c, dx + n * img + c, y + yo + c, dy + yo + c, wd,
                                 g.W * C, C);
      }
  }
}
#pragma GCC diagnostic pop
#endif

// T: the storage type (f32, or bf16 under mixed precision: a maximum of bf16 values is one of
// them, so the bf16 kernels are exact).
template <class T>
void max_fwd(const ConvGeom& g, const T* x, T* y) {
  const int64_t C = g.C;
#ifdef LOCKSTEP_POOL_VECTORS
  if (C % 16 == 0) return max_fwd_vec(g, x, y);
#endif
  for_each_output(g, [&](int64_t n, int64_t yo, const Window& wd) {
    T* __restrict yp = y + yo;
    for (int64_t c = 0; c < C; ++c) yp[c] = st<T>(-std::numeric_limits<float>::infinity());
    for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
      for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
        const T* __restrict xp = x + ((n * g.H + ih) * g.W + iw) * C;
        for (int64_t c = 0; c < C; ++c) yp[c] = st<T>(max_keep_nan(ld(yp[c]), ld(xp[c])));
      }
  });
}

// x in nChw16c (a conv's output the layout pass kept blocked; C a multiple of 16), y in NHWC:
// the pool and the reorder back to NHWC in one pass, 16 channels per vector. Each (image,
// channel block) walks its plane of x front to back (one stream for the prefetcher); its
// 16-channel slices of y land in the image's NHWC rows.
void max_fwd_blocked(const ConvGeom& g, const float* x, float* y) {
  const int64_t C = g.C, CB = C / 16;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb)
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const float* __restrict xb = x + (n * CB + cb) * g.H * g.W * 16;
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const Window wd = pool_window(g, oh, ow);
          float* __restrict yp = y + ((n * g.OH + oh) * g.OW + ow) * C + cb * 16;
#ifdef LOCKSTEP_POOL_VECTORS
          store16(yp, window_max16(xb, wd, g.W * 16, 16));
          continue;
#endif
          float m[16];
          for (int c = 0; c < 16; ++c) m[c] = -std::numeric_limits<float>::infinity();
          for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
            for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
              const float* __restrict xp = xb + (ih * g.W + iw) * 16;
#pragma omp simd
              for (int c = 0; c < 16; ++c) m[c] = max_keep_nan(m[c], xp[c]);
            }
          for (int c = 0; c < 16; ++c) yp[c] = m[c];
        }
      }
}

// x > 0 for the fused relu_grad, on f32 values or bf16 bits (NaN is not > 0).
inline bool positive(float v) { return v > 0.f; }
inline bool positive(uint16_t bits) { return bits != 0 && bits < 0x7f81; }

// idx_ws: per thread C int32 (offset of the chosen x element within the image). Relu: dx is
// masked by x > 0 (max_pool2d_grad with the fused relu_grad(dx, x)).
template <class T, bool Relu>
void max_bwd(const ConvGeom& g, const T* dy_t, const T* x_t, const T* y_t, T* dx_t, int32_t* idx_ws,
             int threads) {
  // Compared and copied as raw values (uint16 bits for bf16, which vectorises); only the
  // overlapping-window sum needs T's arithmetic.
  using U = std::conditional_t<std::is_same_v<T, bf16>, uint16_t, float>;
  const U* dy = reinterpret_cast<const U*>(dy_t);
  const U* x = reinterpret_cast<const U*>(x_t);
  const U* y = reinterpret_cast<const U*>(y_t);
  U* dx = reinterpret_cast<U*>(dx_t);
  const int64_t C = g.C, img = g.H * g.W * C;
#ifdef LOCKSTEP_POOL_VECTORS
  if (C % 16 == 0 && tiled_windows(g)) return max_bwd_tiled_vec<T, Relu>(g, dy_t, x_t, y_t, dx_t);
#endif
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < g.N; ++n) {
    int32_t* __restrict idx = idx_ws + omp_get_thread_num() * C;
    U* __restrict dxi = dx + n * img;
    const U* __restrict xi = x + n * img;
    const bool tiled = tiled_windows(g);
    zero_dx_plane(g, dxi, C, sizeof(T), tiled);
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t yo = ((n * g.OH + oh) * g.OW + ow) * C;
        const U* __restrict yp = y + yo;
        const U* __restrict dyp = dy + yo;
        const Window wd = pool_window(g, oh, ow);
        for (int64_t c = 0; c < C; ++c) idx[c] = -1;
        // Reverse window order, so the last write is the first maximum.
        for (int64_t ih = wd.h1 - 1; ih >= wd.h0; --ih)
          for (int64_t iw = wd.w1 - 1; iw >= wd.w0; --iw) {
            const int32_t off = int32_t((ih * g.W + iw) * C);
            const U* __restrict xp = xi + off;
            for (int64_t c = 0; c < C; ++c) idx[c] = xp[c] == yp[c] ? off + int32_t(c) : idx[c];
          }
        if (tiled) {
          for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
            for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
              const int32_t off = int32_t((ih * g.W + iw) * C);
              U* __restrict dp = dxi + off;
              const U* __restrict xp = xi + off;
              for (int64_t c = 0; c < C; ++c)
                dp[c] = idx[c] == off + int32_t(c) && (!Relu || positive(xp[c])) ? dyp[c] : U(0);
            }
        } else {
          for (int64_t c = 0; c < C; ++c)
            if (idx[c] >= 0 && (!Relu || positive(xi[idx[c]]))) {
              T* d = reinterpret_cast<T*>(dxi + idx[c]);
              *d = st<T>(ld(*d) + ld(reinterpret_cast<const T*>(dyp)[c]));
            }
        }
      }
  }
}

// x and dx in nChw16c (the layout pass's, f32, C a multiple of 16), dy and y in NHWC: as max_bwd,
// 16 channels per vector, parallel over (image, channel block).
template <bool Relu>
void max_bwd_blocked(const ConvGeom& g, const float* dy, const float* x, const float* y,
                     float* dx) {
  const int64_t C = g.C, CB = C / 16, plane = g.H * g.W * 16;
  const bool tiled = tiled_windows(g);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb) {
      const float* __restrict xb = x + (n * CB + cb) * plane;
      float* __restrict db = dx + (n * CB + cb) * plane;
      zero_dx_plane(g, db, 16, sizeof(float), tiled);
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t yo = ((n * g.OH + oh) * g.OW + ow) * C + cb * 16;
          const float* __restrict yp = y + yo;
          const float* __restrict dyp = dy + yo;
          const Window wd = pool_window(g, oh, ow);
#ifdef LOCKSTEP_POOL_VECTORS
          if (tiled) {
            window_grad16<float, Relu>(xb, db, yp, dyp, wd, g.W * 16, 16);
            continue;
          }
#endif
          if (tiled) {
            // Each dx element once, in window order: dy goes to the first x equal to the max.
            float taken[16] = {};
            for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
              for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
                const int64_t off = (ih * g.W + iw) * 16;
                const float* __restrict xp = xb + off;
                float* __restrict dp = db + off;
#pragma omp simd
                for (int c = 0; c < 16; ++c) {
                  const bool hit = xp[c] == yp[c] && taken[c] == 0.f;
                  dp[c] = hit && (!Relu || xp[c] > 0.f) ? dyp[c] : 0.f;
                  taken[c] = hit ? 1.f : taken[c];
                }
              }
            continue;
          }
          int32_t idx[16];
          for (int c = 0; c < 16; ++c) idx[c] = -1;
          for (int64_t ih = wd.h1 - 1; ih >= wd.h0; --ih)
            for (int64_t iw = wd.w1 - 1; iw >= wd.w0; --iw) {
              const int32_t off = int32_t((ih * g.W + iw) * 16);
              const float* __restrict xp = xb + off;
#pragma omp simd
              for (int c = 0; c < 16; ++c) idx[c] = xp[c] == yp[c] ? off + c : idx[c];
            }
          for (int c = 0; c < 16; ++c)
            if (idx[c] >= 0 && (!Relu || xb[idx[c]] > 0.f)) db[idx[c]] += dyp[c];
        }
    }
}

void avg_fwd(const ConvGeom& g, const float* x, float* y) {
  const int64_t C = g.C;
  for_each_output(g, [&](int64_t n, int64_t yo, const Window& wd) {
    float* __restrict yp = y + yo;
    const float inv = 1.f / float(wd.size());
    for (int64_t c = 0; c < C; ++c) yp[c] = 0.f;
    for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
      for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
        const float* __restrict xp = x + ((n * g.H + ih) * g.W + iw) * C;
        for (int64_t c = 0; c < C; ++c) yp[c] += xp[c];
      }
    for (int64_t c = 0; c < C; ++c) yp[c] *= inv;
  });
}

void avg_bwd(const ConvGeom& g, const float* dy, float* dx) {
  const int64_t C = g.C, img = g.H * g.W * C;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.N; ++n) {
    float* __restrict dxi = dx + n * img;
    std::memset(dxi, 0, sizeof(float) * img);
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const float* __restrict dyp = dy + ((n * g.OH + oh) * g.OW + ow) * C;
        const Window wd = pool_window(g, oh, ow);
        const float inv = 1.f / float(wd.size());
        for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
          for (int64_t iw = wd.w0; iw < wd.w1; ++iw) {
            float* __restrict xp = dxi + (ih * g.W + iw) * C;
            for (int64_t c = 0; c < C; ++c) xp[c] += dyp[c] * inv;
          }
      }
  }
}

KernelFactory max_fwd_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) {
    ConvGeom g = ops::pool_geometry(in[0].shape, n);
    if (attr_s(n, "src_layout") == "nChw16c") {
      LS_CHECK(in[0].dtype == DType::f32 && g.C % 16 == 0,
               "max_pool2d: a blocked (nChw16c) input must be float32 with channels a multiple of "
               "16, got ",
               in[0].str());
      return make_kernel(
          [g](const KernelArgs& a) { max_fwd_blocked(g, a.in(0).data<float>(), out_f(a, 0)); });
    }
    return by_float_kind(n, in, max_fwd_factory(), [g](auto t) {
      using T = decltype(t);
      return make_kernel(
          [g](const KernelArgs& a) { max_fwd(g, a.in(0).data<T>(), a.out(0).data<T>()); });
    });
  };
}

KernelFactory max_bwd_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) {
    ConvGeom g = ops::pool_geometry(in[1].shape, n);
    LS_CHECK(g.H * g.W * g.C < (int64_t(1) << 31), "max_pool2d_grad: image too large");
    const int threads = omp_get_max_threads();
    const bool relu = attr_activation(n) == FusedActivation::relu;
    if (attr_s(n, "src_layout") == "nChw16c") {
      LS_CHECK(in[1].dtype == DType::f32 && in[0].dtype == DType::f32 &&
                   in[2].dtype == DType::f32 && g.C % 16 == 0,
               "max_pool2d_grad: a blocked (nChw16c) x must be float32 with channels a multiple "
               "of 16, got ",
               in[1].str());
      auto f = relu ? max_bwd_blocked<true> : max_bwd_blocked<false>;
      return make_kernel([g, f](const KernelArgs& a) {
        f(g, a.in(0).data<float>(), a.in(1).data<float>(), a.in(2).data<float>(), out_f(a, 0));
      });
    }
    return by_float_kind(n, in, max_bwd_factory(), [g, threads, relu](auto t) {
      using T = decltype(t);
      auto f = relu ? max_bwd<T, true> : max_bwd<T, false>;
      return make_kernel(
          [g, threads, f](const KernelArgs& a) {
            f(g, a.in(0).data<T>(), a.in(1).data<T>(), a.in(2).data<T>(), a.out(0).data<T>(),
              static_cast<int32_t*>(a.workspace), threads);
          },
          sizeof(int32_t) * threads * g.C);
    });
  };
}

LOCKSTEP_REGISTER(cpu_pool_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::max_pool2d, "cpu", max_fwd_factory(), /*takes_bf16=*/true);
  R.add_kernel(op::max_pool2d_grad, "cpu", max_bwd_factory(), /*takes_bf16=*/true);
  R.add_kernel(op::avg_pool2d, "cpu", [](const Node& n, const std::vector<TensorType>& in) {
    ConvGeom g = ops::pool_geometry(in[0].shape, n);
    return make_kernel([g](const KernelArgs& a) { avg_fwd(g, in_f(a, 0), out_f(a, 0)); });
  });
  R.add_kernel(op::avg_pool2d_grad, "cpu", [](const Node& n, const std::vector<TensorType>& in) {
    ConvGeom g = ops::pool_grad_geometry(n, in[0].shape);
    return make_kernel([g](const KernelArgs& a) { avg_bwd(g, in_f(a, 0), out_f(a, 0)); });
  });
}

}  // namespace
}  // namespace lockstep::cpu
