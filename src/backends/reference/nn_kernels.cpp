// Reference (naive, obviously-correct) kernels: matmul and conv2d forward/backward.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"
#include "ops/internal/nn_geometry.h"

namespace lockstep {
namespace {

using ops::ConvGeom;

// Index helpers: x/y NHWC, filter [KH, KW, Cg, O].
struct Idx {
  const ConvGeom& g;
  int64_t x(int64_t n, int64_t h, int64_t w, int64_t c) const {
    return ((n * g.H + h) * g.W + w) * g.C + c;
  }
  int64_t y(int64_t n, int64_t h, int64_t w, int64_t o) const {
    return ((n * g.OH + h) * g.OW + w) * g.O + o;
  }
  int64_t f(int64_t kh, int64_t kw, int64_t ic, int64_t o) const {
    return ((kh * g.KW + kw) * g.Cg() + ic) * g.O + o;
  }
};

// Calls fn(n, oh, ow, o, kh, kw, ic, x_index) for every valid (output, tap) pair.
template <typename Fn>
void for_each_tap(const ConvGeom& g, Fn fn) {
  Idx I{g};
  const int64_t Cg = g.Cg(), Og = g.Og();
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow)
        for (int64_t o = 0; o < g.O; ++o) {
          const int64_t grp = o / Og;
          for (int64_t kh = 0; kh < g.KH; ++kh) {
            const int64_t ih = oh * g.SH - g.PT + kh * g.DH;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              const int64_t iw = ow * g.SW - g.PL + kw * g.DW;
              if (iw < 0 || iw >= g.W) continue;
              for (int64_t ic = 0; ic < Cg; ++ic)
                fn(I.y(n, oh, ow, o), I.f(kh, kw, ic, o), I.x(n, ih, iw, grp * Cg + ic));
            }
          }
        }
}

// acc: double scratch (from the workspace) of the size of the result.
void conv_fwd(const ConvGeom& g, const float* x, const float* w, const float* b, float* y,
              double* acc) {
  const int64_t ny = g.N * g.OH * g.OW * g.O;
  std::fill(acc, acc + ny, 0.0);
  for_each_tap(g, [&](int64_t yi, int64_t fi, int64_t xi) { acc[yi] += double(x[xi]) * w[fi]; });
  for (int64_t i = 0; i < ny; ++i) {
    y[i] = ew::fused_activation(g.act, acc[i] + (b ? b[i % g.O] : 0.0));
  }
}

void conv_bwd_input(const ConvGeom& g, const float* dy, const float* w, float* dx, double* acc) {
  const int64_t nx = g.N * g.H * g.W * g.C;
  std::fill(acc, acc + nx, 0.0);
  for_each_tap(g, [&](int64_t yi, int64_t fi, int64_t xi) { acc[xi] += double(dy[yi]) * w[fi]; });
  for (int64_t i = 0; i < nx; ++i) dx[i] = float(acc[i]);
}

void conv_bwd_filter(const ConvGeom& g, const float* dy, const float* x, float* dw, double* acc) {
  const int64_t nw = g.KH * g.KW * g.Cg() * g.O;
  std::fill(acc, acc + nw, 0.0);
  for_each_tap(g, [&](int64_t yi, int64_t fi, int64_t xi) { acc[fi] += double(dy[yi]) * x[xi]; });
  for (int64_t i = 0; i < nw; ++i) dw[i] = float(acc[i]);
}

std::unique_ptr<Kernel> make_matmul(const Node& n, const std::vector<TensorType>& in) {
  const bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
  const int64_t M = in[0].shape[ta ? 1 : 0], K = in[0].shape[ta ? 0 : 1],
                N = in[1].shape[tb ? 0 : 1];
  return make_kernel([=](const KernelArgs& a) {
    const float *A = in_f(a, 0), *B = in_f(a, 1);
    float* C = out_f(a, 0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
        C[m * N + j] = float(s);
      }
  });
}

LOCKSTEP_REGISTER(reference_nn_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::matmul, "reference", make_matmul);
  R.add_kernel(op::conv2d, "reference", [](const Node& n, const std::vector<TensorType>& in) {
    ConvGeom g = ops::conv2d_geometry(in[0].shape, in[1].shape, n);
    return make_kernel(
        [g](const KernelArgs& a) {
          conv_fwd(g, in_f(a, 0), in_f(a, 1), g.fused_bias ? in_f(a, 2) : nullptr, out_f(a, 0),
                   static_cast<double*>(a.workspace));
        },
        sizeof(double) * g.N * g.OH * g.OW * g.O);
  });
  // The pair as two convolutions, the intermediate in the workspace after the accumulator.
  R.add_kernel(op::conv2d_pointwise_depthwise, "reference",
               [](const Node& n, const std::vector<TensorType>& in) {
                 const ops::PointwiseDepthwise g =
                     ops::pointwise_depthwise_geometry(in[0].shape, in[1].shape, in[3].shape, n);
                 const int64_t mid = g.pw.N * g.pw.OH * g.pw.OW * g.pw.O;
                 const int64_t acc = std::max(mid, g.dw.N * g.dw.OH * g.dw.OW * g.dw.O);
                 return make_kernel(
                     [g, acc](const KernelArgs& a) {
                       double* ws = static_cast<double*>(a.workspace);
                       float* y1 = reinterpret_cast<float*>(ws + acc);
                       conv_fwd(g.pw, in_f(a, 0), in_f(a, 1), in_f(a, 2), y1, ws);
                       conv_fwd(g.dw, y1, in_f(a, 3), in_f(a, 4), out_f(a, 0), ws);
                     },
                     sizeof(double) * acc + sizeof(float) * mid);
               });
  R.add_kernel(
      op::conv2d_backward_input, "reference", [](const Node& n, const std::vector<TensorType>& in) {
        ConvGeom g = ops::conv_geometry(ops::input_shape_attr(n, in[0].shape[0]), in[1].shape, n);
        return make_kernel(
            [g](const KernelArgs& a) {
              conv_bwd_input(g, in_f(a, 0), in_f(a, 1), out_f(a, 0),
                             static_cast<double*>(a.workspace));
            },
            sizeof(double) * g.N * g.H * g.W * g.C);
      });
  R.add_kernel(op::conv2d_backward_filter, "reference",
               [](const Node& n, const std::vector<TensorType>& in) {
                 ConvGeom g =
                     ops::conv_geometry(in[1].shape, Shape(attr_ints(n, "filter_shape")), n);
                 return make_kernel(
                     [g](const KernelArgs& a) {
                       conv_bwd_filter(g, in_f(a, 0), in_f(a, 1), out_f(a, 0),
                                       static_cast<double*>(a.workspace));
                     },
                     sizeof(double) * g.KH * g.KW * g.Cg() * g.O);
               });
}

}  // namespace
}  // namespace lockstep
