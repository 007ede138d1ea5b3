// Host kernels of upsample2d and upsample2d_grad (keras.layers.UpSampling2D), registered by
// each CPU-side backend (reference: serial; cpu: OpenMP over the batch, same arithmetic, so the
// two agree bit for bit), in float32 and natively in bfloat16. Each axis is a 1-D interpolation:
// output j reads input taps i0, i1 with weights w0, w1; the 2-D value is the product of the two
// axes' weights.
#include <algorithm>
#include <vector>

#include "ops/internal/image_kernels.h"
#include "ops/internal/kernel_util.h"
#include "ops/internal/nn_geometry.h"

namespace lockstep {
namespace {

struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

Taps axis_taps(int64_t n, int64_t s, bool bilinear) {
  Taps t;
  for (int64_t j = 0; j < n * s; ++j) {
    ops::UpsampleTap u = ops::upsample_tap(n, s, bilinear, j);
    t.i0.push_back(u.i0), t.i1.push_back(u.i1), t.w0.push_back(u.w0), t.w1.push_back(u.w1);
  }
  return t;
}

// x [N, H, W, C] <-> y [N, H*sh, W*sw, C]; grad: dy -> dx (the transpose). T: float or bf16
// storage (bf16 natively under mixed_bfloat16); sums in f32, the gradient in an f32 scratch.
template <class T>
void upsample(const Node& n, const KernelArgs& a, bool grad, bool par) {
  const auto s = ops::pair_attr(n, "size");
  const bool bilinear = attr_s(n, "interpolation") == "bilinear";
  const Shape& xs = grad ? a.out(0).shape() : a.in(0).shape();
  const int64_t N = xs[0], H = xs[1], W = xs[2], C = xs[3], OH = H * s[0], OW = W * s[1];
  const Taps th = axis_taps(H, s[0], bilinear), tw = axis_taps(W, s[1], bilinear);
  const T* src = static_cast<const T*>(a.in(0).raw());
  T* dst = static_cast<T*>(a.out(0).raw());
  std::vector<float> acc(size_t(grad ? N * H * W * C : 0), 0.f);
#pragma omp parallel for schedule(static) if (par && N > 1)
  for (int64_t b = 0; b < N; ++b) {
    const int64_t xb = b * H * W * C, yb = b * OH * OW * C;
    std::vector<float> row(static_cast<size_t>(C));
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t hs[2] = {th.i0[oh], th.i1[oh]}, ws[2] = {tw.i0[ow], tw.i1[ow]};
        const float wh[2] = {th.w0[oh], th.w1[oh]}, ww[2] = {tw.w0[ow], tw.w1[ow]};
        const int64_t y = yb + (oh * OW + ow) * C;
        std::fill(row.begin(), row.end(), 0.f);
        for (int p = 0; p < 2; ++p)
          for (int q = 0; q < 2; ++q) {
            const float w = wh[p] * ww[q];
            if (w == 0.f) continue;
            const int64_t x = xb + (hs[p] * W + ws[q]) * C;
            if (grad)
              for (int64_t c = 0; c < C; ++c) acc[size_t(x + c)] += w * ld(src[y + c]);
            else
              for (int64_t c = 0; c < C; ++c) row[size_t(c)] += w * ld(src[x + c]);
          }
        if (!grad)
          for (int64_t c = 0; c < C; ++c) dst[y + c] = st<T>(row[size_t(c)]);
      }
  }
  for (size_t i = 0; i < acc.size(); ++i) dst[i] = st<T>(acc[i]);
}

KernelFactory upsample_factory(bool grad, bool par) {
  return [grad, par](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    return by_float_kind(n, in, upsample_factory(grad, par), [&](auto t) {
      using T = decltype(t);
      return make_kernel([n, grad, par](const KernelArgs& a) { upsample<T>(n, a, grad, par); });
    });
  };
}

}  // namespace

void register_upsample_kernels(const char* backend, bool par) {
  for (bool grad : {false, true})
    OpRegistry::get().add_kernel(grad ? op::upsample2d_grad : op::upsample2d, backend,
                                 upsample_factory(grad, par), /*takes_bf16=*/true);
}

}  // namespace lockstep
