// cpu backend: depthwise conv2d_backward_filter.
//
// Why not oneDNN: libdnnl 2.7's depthwise backward-weights kernel (jit_dw) takes 3x3 filters
// only; a 5x5 depthwise conv (EfficientNet has nine) ran as a generic grouped jit conv or as
// gemm, 3.7-15 ms for what is 0.04 GFLOP (EfficientNetB0 at 96 px, batch 32: 41% of a float32
// training step and 55% of a bfloat16 one in conv2d_backward_filter). The sum per filter tap is
// simple enough to write directly: dw[kh, kw, c] = sum over n, oh, ow of
// dy[n, oh, ow, c] * x[n, oh*SH - PT + kh*DH, ow*SW - PL + kw*DW, c].
//
// Vectorised over 16 channels (one AVX-512 register of float32): every output position loads its
// 16 dy values once and multiplies them into the KH*KW tap accumulators (for 3x3 and 5x5 a local
// copy the compiler keeps in registers for a whole output row). Work is split over the threads
// by output rows (n, oh), each split walking every channel block of its rows into its own
// accumulators in the workspace, added at the end (DepthwiseBackwardFilter). The same loop reads
// NHWC (16 channels of a position contiguous) and nChw16c (the blocked layout the layout pass
// keeps float32 activations in): only the strides differ.
#include "backends/cpu/depthwise_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "ops/internal/kernel_util.h"

namespace lockstep::cpu {
namespace {

using ops::ConvGeom;

constexpr int64_t kLanes = 16;    // channels per vector
constexpr int64_t kMaxTaps = 49;  // up to 7x7 filters (the sizes tested); larger ones run oneDNN

// Element strides of one image, one row, one position and one 16-channel block.
struct Strides {
  int64_t n, h, w, cb;
};

Strides strides_of(int64_t H, int64_t W, int64_t C, bool blocked) {
  const int64_t CB = (C + kLanes - 1) / kLanes;
  if (blocked) return {CB * H * W * kLanes, W * kLanes, kLanes, H * W * kLanes};
  return {H * W * C, W * C, C, kLanes};
}

// First and one-past-last tap k with 0 <= i0 + k*D < size.
inline void tap_range(int64_t i0, int64_t D, int64_t K, int64_t size, int64_t& lo, int64_t& hi) {
  lo = i0 >= 0 ? 0 : (-i0 + D - 1) / D;
  hi = i0 >= size ? 0 : std::min(K, (size - 1 - i0) / D + 1);
}

// One output row (oh) of one 16-channel block: acc[k*16 + l] += dy[.., l] * x[.., l] for every
// tap k = kh*KW + kw inside the image. KH, KW > 0: the filter size known at compile time (the
// tap loops unroll and the accumulators stay in registers); 0: read from g. kFull: all 16 lanes
// (false only for the last block of an NHWC tensor whose channels are not a multiple of 16).
template <class T, int KH, int KW, bool kFull>
void accumulate_row(const ConvGeom& g, const T* xn, const Strides& sx, const T* dyr,
                    const Strides& sy, int64_t ih0, int64_t lanes, float* acc) {
  constexpr bool kFixed = KH > 0 && KW > 0;
  const int64_t kh_n = kFixed ? KH : g.KH, kw_n = kFixed ? KW : g.KW;
  const int64_t L = kFull ? kLanes : lanes;
  int64_t kh_lo, kh_hi;
  tap_range(ih0, g.DH, kh_n, g.H, kh_lo, kh_hi);
  alignas(64) float local[kFixed ? KH * KW * kLanes : 1];
  float* r = kFixed ? local : acc;
  if constexpr (kFixed) std::memcpy(local, acc, sizeof(local));
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    const int64_t iw0 = ow * g.SW - g.PL;
    int64_t kw_lo, kw_hi;
    tap_range(iw0, g.DW, kw_n, g.W, kw_lo, kw_hi);
    const T* dp = dyr + ow * sy.w;
    alignas(64) float d[kLanes] = {};
#pragma omp simd
    for (int64_t l = 0; l < L; ++l) d[l] = ld(dp[l]);
    const T* xc = xn + (ih0 * sx.h) + iw0 * sx.w;
    for (int64_t kh = 0; kh < kh_n; ++kh) {
      if (kh < kh_lo || kh >= kh_hi) continue;
      const T* xr = xc + kh * g.DH * sx.h;
      for (int64_t kw = 0; kw < kw_n; ++kw) {
        if (kw < kw_lo || kw >= kw_hi) continue;
        const T* xp = xr + kw * g.DW * sx.w;
        float* a = r + (kh * kw_n + kw) * kLanes;
#pragma omp simd aligned(a : 64)
        for (int64_t l = 0; l < L; ++l) a[l] += d[l] * ld(xp[l]);
      }
    }
  }
  if constexpr (kFixed) std::memcpy(acc, local, sizeof(local));
}

using RowFn = void (*)(const ConvGeom&, const void*, const Strides&, const void*, const Strides&,
                       int64_t, int64_t, float*);

template <class T, int KH, int KW, bool kFull>
void row_fn(const ConvGeom& g, const void* xn, const Strides& sx, const void* dyr,
            const Strides& sy, int64_t ih0, int64_t lanes, float* acc) {
  accumulate_row<T, KH, KW, kFull>(g, static_cast<const T*>(xn), sx, static_cast<const T*>(dyr), sy,
                                   ih0, lanes, acc);
}

template <class T, bool kFull>
RowFn pick_row_fn(const ConvGeom& g) {
  if (g.KH == 3 && g.KW == 3) return row_fn<T, 3, 3, kFull>;
  if (g.KH == 5 && g.KW == 5) return row_fn<T, 5, 5, kFull>;
  return row_fn<T, 0, 0, kFull>;
}

// The work is split over the threads by output rows (n, oh); each split walks its rows once,
// every channel block of a row in turn (so x and dy stream from memory once, and the KH input
// rows a block needs are still in cache for the next block), into its own accumulators
// [blocks][taps][16] in the workspace; the splits are added at the end.
template <class T>
class DepthwiseBackwardFilter final : public Kernel {
 public:
  DepthwiseBackwardFilter(const ConvGeom& g, bool x_blocked, bool dy_blocked)
      : g_(g),
        sx_(strides_of(g.H, g.W, g.C, x_blocked)),
        sy_(strides_of(g.OH, g.OW, g.C, dy_blocked)),
        blocks_((g.C + kLanes - 1) / kLanes),
        taps_(g.KH * g.KW),
        full_(pick_row_fn<T, true>(g)),
        tail_(pick_row_fn<T, false>(g)) {
    splits_ = std::clamp<int64_t>(omp_get_max_threads(), 1, g.N * g.OH);
  }

  size_t workspace_bytes() const override {
    return sizeof(float) * size_t(splits_ * blocks_ * taps_ * kLanes);
  }

  void run(const KernelArgs& a) override {
    const T* dy = a.in(0).data<T>();
    const T* x = a.in(1).data<T>();
    T* dw = a.out(0).data<T>();
    float* partial = static_cast<float*>(a.workspace);
    const int64_t C = g_.C, rows = g_.N * g_.OH, per_split = blocks_ * taps_ * kLanes;
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < splits_; ++s) {
      float* acc = partial + s * per_split;
      std::memset(acc, 0, sizeof(float) * size_t(per_split));
      for (int64_t row = rows * s / splits_; row < rows * (s + 1) / splits_; ++row) {
        const int64_t n = row / g_.OH, oh = row % g_.OH;
        for (int64_t cb = 0; cb < blocks_; ++cb) {
          const int64_t lanes = std::min(kLanes, C - cb * kLanes);
          (lanes == kLanes ? full_ : tail_)(g_, x + n * sx_.n + cb * sx_.cb, sx_,
                                            dy + n * sy_.n + oh * sy_.h + cb * sy_.cb, sy_,
                                            oh * g_.SH - g_.PT, lanes, acc + cb * taps_ * kLanes);
        }
      }
    }
#pragma omp parallel for schedule(static)
    for (int64_t cb = 0; cb < blocks_; ++cb) {
      const int64_t lanes = std::min(kLanes, C - cb * kLanes);
      for (int64_t k = 0; k < taps_; ++k)
        for (int64_t l = 0; l < lanes; ++l) {
          float sum = 0;
          for (int64_t s = 0; s < splits_; ++s)
            sum += partial[s * per_split + (cb * taps_ + k) * kLanes + l];
          dw[k * C + cb * kLanes + l] = st<T>(sum);
        }
    }
  }

 private:
  ConvGeom g_;
  Strides sx_, sy_;
  int64_t blocks_, taps_, splits_ = 1;
  RowFn full_, tail_;
};

}  // namespace

std::unique_ptr<Kernel> depthwise_backward_filter(const ConvGeom& g, DType x, DType dy, DType dw,
                                                  bool x_blocked, bool dy_blocked) {
  const bool depthwise = g.G > 1 && g.G == g.C && g.O == g.C;
  if (!depthwise || g.KH * g.KW > kMaxTaps || x != dy || x != dw) return nullptr;
  if (x == DType::f32)
    return std::make_unique<DepthwiseBackwardFilter<float>>(g, x_blocked, dy_blocked);
  if (x == DType::bf16 && !x_blocked && !dy_blocked)
    return std::make_unique<DepthwiseBackwardFilter<bf16>>(g, false, false);
  return nullptr;
}

}  // namespace lockstep::cpu
