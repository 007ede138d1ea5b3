// Reference (naive) kernels: max/avg pooling forward and backward, NHWC.
#include <cstring>
#include <limits>

#include "ops/internal/kernel_util.h"
#include "ops/internal/nn_geometry.h"

namespace lockstep {
namespace {

using ops::ConvGeom;

// Calls fn(y_index, x_index) for each valid window position of each output, window order.
template <typename Fn>
void for_each_window(const ConvGeom& g, Fn fn) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const ops::PoolWindow wd = ops::pool_window(g, oh, ow);
        for (int64_t c = 0; c < g.C; ++c) {
          const int64_t yi = ((n * g.OH + oh) * g.OW + ow) * g.C + c;
          for (int64_t ih = wd.h0; ih < wd.h1; ++ih)
            for (int64_t iw = wd.w0; iw < wd.w1; ++iw)
              fn(yi, ((n * g.H + ih) * g.W + iw) * g.C + c);
        }
      }
}

int64_t ny(const ConvGeom& g) { return g.N * g.OH * g.OW * g.C; }
int64_t nx(const ConvGeom& g) { return g.N * g.H * g.W * g.C; }

// Workspace: one int64 per output (argmax / count).
void max_fwd(const ConvGeom& g, const float* x, float* y) {
  for (int64_t i = 0; i < ny(g); ++i) y[i] = -std::numeric_limits<float>::infinity();
  for_each_window(g, [&](int64_t yi, int64_t xi) {
    // A NaN in the window makes the maximum NaN (TensorFlow and PyTorch); the first one stays.
    if (x[xi] > y[yi] || (x[xi] != x[xi] && y[yi] == y[yi])) y[yi] = x[xi];
  });
}

void max_bwd(const ConvGeom& g, const float* dy, const float* x, int64_t* arg, float* dx) {
  for (int64_t i = 0; i < ny(g); ++i) arg[i] = -1;
  for_each_window(g, [&](int64_t yi, int64_t xi) {
    if (arg[yi] < 0 || x[xi] > x[arg[yi]]) arg[yi] = xi;
  });
  std::memset(dx, 0, sizeof(float) * nx(g));
  for (int64_t i = 0; i < ny(g); ++i)
    if (arg[i] >= 0) dx[arg[i]] += dy[i];
}

void avg_fwd(const ConvGeom& g, const float* x, float* y, int64_t* cnt) {
  std::memset(y, 0, sizeof(float) * ny(g));
  std::memset(cnt, 0, sizeof(int64_t) * ny(g));
  for_each_window(g, [&](int64_t yi, int64_t xi) {
    y[yi] += x[xi];
    cnt[yi]++;
  });
  for (int64_t i = 0; i < ny(g); ++i) y[i] /= float(cnt[i]);
}

void avg_bwd(const ConvGeom& g, const float* dy, float* dx, int64_t* cnt) {
  std::memset(cnt, 0, sizeof(int64_t) * ny(g));
  for_each_window(g, [&](int64_t yi, int64_t) { cnt[yi]++; });
  std::memset(dx, 0, sizeof(float) * nx(g));
  for_each_window(g, [&](int64_t yi, int64_t xi) { dx[xi] += dy[yi] / float(cnt[yi]); });
}

LOCKSTEP_REGISTER(reference_pool_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::max_pool2d, "reference", [](const Node& n, const std::vector<TensorType>& in) {
    ConvGeom g = ops::pool_geometry(in[0].shape, n);
    return make_kernel([g](const KernelArgs& a) { max_fwd(g, in_f(a, 0), out_f(a, 0)); });
  });
  R.add_kernel(op::max_pool2d_grad, "reference",
               [](const Node& n, const std::vector<TensorType>& in) {
                 ConvGeom g = ops::pool_geometry(in[1].shape, n);
                 const bool relu = attr_activation(n) == FusedActivation::relu;
                 return make_kernel(
                     [g, relu](const KernelArgs& a) {
                       const float* x = in_f(a, 1);
                       float* dx = out_f(a, 0);
                       max_bwd(g, in_f(a, 0), x, static_cast<int64_t*>(a.workspace), dx);
                       if (relu)  // the fused relu_grad(dx, x)
                         for (int64_t i = 0; i < nx(g); ++i) dx[i] = x[i] > 0.f ? dx[i] : 0.f;
                     },
                     sizeof(int64_t) * ny(g));
               });
  R.add_kernel(op::avg_pool2d, "reference", [](const Node& n, const std::vector<TensorType>& in) {
    ConvGeom g = ops::pool_geometry(in[0].shape, n);
    return make_kernel(
        [g](const KernelArgs& a) {
          avg_fwd(g, in_f(a, 0), out_f(a, 0), static_cast<int64_t*>(a.workspace));
        },
        sizeof(int64_t) * ny(g));
  });
  R.add_kernel(op::avg_pool2d_grad, "reference",
               [](const Node& n, const std::vector<TensorType>& in) {
                 ConvGeom g = ops::pool_grad_geometry(n, in[0].shape);
                 return make_kernel(
                     [g](const KernelArgs& a) {
                       avg_bwd(g, in_f(a, 0), out_f(a, 0), static_cast<int64_t*>(a.workspace));
                     },
                     sizeof(int64_t) * ny(g));
               });
}

}  // namespace
}  // namespace lockstep
