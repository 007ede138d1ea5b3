// cpu backend: OpenMP-parallel, vectorised batch_norm (train/infer/grad) and layer_norm (+grad).
// Per-thread partial sums live in the kernel workspace (sized for the thread count at compile
// time).
#include <omp.h>

#include <cmath>

#include "ops/internal/kernel_util.h"

namespace lockstep::cpu {
namespace {

struct Dims {
  int64_t R, C;
  double eps;
  int T;  // threads
};

Dims dims_of(const Node& n, const Shape& x) {
  const int64_t C = x[-1];
  return {x.numel() / C, C, attr_f(n, "epsilon"), omp_get_max_threads()};
}

inline void rows_of(const Dims& d, int64_t* r0, int64_t* r1) {
  const int t = omp_get_thread_num(), nt = omp_get_num_threads();
  *r0 = d.R * t / nt;
  *r1 = d.R * (t + 1) / nt;
}

// Workspace: T*C doubles of partials x2, then C doubles x4 of per-channel coefficients.
size_t bn_ws(const Dims& d) { return sizeof(double) * d.C * (2 * d.T + 4); }

void bn_train(const Dims& d, const KernelArgs& a) {
  const float *x = in_f(a, 0), *gm = in_f(a, 1), *bt = in_f(a, 2);
  float *y = out_f(a, 0), *mean = out_f(a, 1), *var = out_f(a, 2);
  const int64_t C = d.C;
  double* part = static_cast<double*>(a.workspace);
  double *m = part + 2 * d.T * C, *scale = m + C, *shift = scale + C;
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    double* __restrict s = part + t * C;
    for (int64_t c = 0; c < C; ++c) s[c] = 0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) s[c] += x[r * C + c];
#pragma omp barrier
#pragma omp single
    for (int64_t c = 0; c < C; ++c) {
      double v = 0;
      for (int k = 0; k < nt; ++k) v += part[k * C + c];
      m[c] = v / d.R;
    }
    for (int64_t c = 0; c < C; ++c) s[c] = 0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const double dv = x[r * C + c] - m[c];
        s[c] += dv * dv;
      }
#pragma omp barrier
#pragma omp single
    for (int64_t c = 0; c < C; ++c) {
      double v = 0;
      for (int k = 0; k < nt; ++k) v += part[k * C + c];
      v /= d.R;
      const double rstd = 1.0 / std::sqrt(v + d.eps);
      scale[c] = gm[c] * rstd;
      shift[c] = bt[c] - m[c] * scale[c];
      mean[c] = float(m[c]);
      var[c] = float(v);
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) y[r * C + c] = float(x[r * C + c] * scale[c] + shift[c]);
  }
}

// dx = a*dy + b*(x - mean) + c0 per channel, after one reduction pass for sum(dy), sum(dy*xhat).
void bn_train_grad(const Dims& d, const KernelArgs& a) {
  const float *dy = in_f(a, 0), *x = in_f(a, 1), *gm = in_f(a, 2), *mean = in_f(a, 3),
              *var = in_f(a, 4);
  const float* dmean = a.num_inputs > 5 ? in_f(a, 5) : nullptr;
  const float* dvar = a.num_inputs > 5 ? in_f(a, 6) : nullptr;
  float *dx = out_f(a, 0), *dg = out_f(a, 1), *db = out_f(a, 2);
  const int64_t C = d.C;
  double* part = static_cast<double*>(a.workspace);
  double *ka = part + 2 * d.T * C, *kb = ka + C, *kc = kb + C;
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    double* __restrict s1 = part + 2 * t * C;
    double* __restrict s2 = s1 + C;
    for (int64_t c = 0; c < C; ++c) s1[c] = s2[c] = 0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) {
        s1[c] += dy[r * C + c];
        s2[c] += dy[r * C + c] * (x[r * C + c] - mean[c]);
      }
#pragma omp barrier
#pragma omp single
    for (int64_t c = 0; c < C; ++c) {
      double sdy = 0, sdyxc = 0;
      for (int k = 0; k < nt; ++k) {
        sdy += part[2 * k * C + c];
        sdyxc += part[2 * k * C + C + c];
      }
      const double rstd = 1.0 / std::sqrt(double(var[c]) + d.eps), sdyx = sdyxc * rstd;
      dg[c] = float(sdyx);
      db[c] = float(sdy);
      ka[c] = gm[c] * rstd;
      kb[c] = -gm[c] * rstd * rstd * sdyx / d.R + (dvar ? 2.0 * dvar[c] / d.R : 0.0);
      kc[c] = -gm[c] * rstd * sdy / d.R + (dmean ? dmean[c] / d.R : 0.0);
    }
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c)
        dx[r * C + c] = float(ka[c] * dy[r * C + c] + kb[c] * (x[r * C + c] - mean[c]) + kc[c]);
  }
}

void bn_infer(const Dims& d, const KernelArgs& a) {
  const float *x = in_f(a, 0), *gm = in_f(a, 1), *bt = in_f(a, 2), *mean = in_f(a, 3),
              *var = in_f(a, 4);
  float* y = out_f(a, 0);
  const int64_t C = d.C;
  float* scale = static_cast<float*>(a.workspace);
  float* shift = scale + C;
  for (int64_t c = 0; c < C; ++c) {
    const double s = gm[c] / std::sqrt(double(var[c]) + d.eps);
    scale[c] = float(s);
    shift[c] = float(bt[c] - mean[c] * s);
  }
#pragma omp parallel for schedule(static) num_threads(d.T)
  for (int64_t r = 0; r < d.R; ++r)
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] * scale[c] + shift[c];
}

void ln(const Dims& d, const KernelArgs& a) {
  const float *x = in_f(a, 0), *gm = in_f(a, 1), *bt = in_f(a, 2);
  float *y = out_f(a, 0), *mean = out_f(a, 1), *rs = out_f(a, 2);
  const int64_t C = d.C;
#pragma omp parallel for schedule(static) num_threads(d.T)
  for (int64_t r = 0; r < d.R; ++r) {
    const float* __restrict xr = x + r * C;
    float* __restrict yr = y + r * C;
    float s = 0, ss = 0;
    for (int64_t c = 0; c < C; ++c) s += xr[c];
    const float m = s / float(C);
    for (int64_t c = 0; c < C; ++c) ss += (xr[c] - m) * (xr[c] - m);
    const float rstd = float(1.0 / std::sqrt(double(ss) / C + d.eps));
    for (int64_t c = 0; c < C; ++c) yr[c] = gm[c] * ((xr[c] - m) * rstd) + bt[c];
    mean[r] = m;
    rs[r] = rstd;
  }
}

// Workspace: per-thread dgamma/dbeta partials (2*T*C floats).
void ln_grad(const Dims& d, const KernelArgs& a) {
  const float *dy = in_f(a, 0), *x = in_f(a, 1), *gm = in_f(a, 2), *mean = in_f(a, 3),
              *rs = in_f(a, 4);
  const float* dmean = a.num_inputs > 5 ? in_f(a, 5) : nullptr;
  const float* drstd = a.num_inputs > 5 ? in_f(a, 6) : nullptr;
  float *dx = out_f(a, 0), *dg = out_f(a, 1), *db = out_f(a, 2);
  const int64_t C = d.C;
  float* part = static_cast<float*>(a.workspace);
  int used = 1;
#pragma omp parallel num_threads(d.T)
  {
    int64_t r0, r1;
    rows_of(d, &r0, &r1);
    const int t = omp_get_thread_num();
#pragma omp single
    used = omp_get_num_threads();
    float* __restrict pg = part + 2 * t * C;
    float* __restrict pb = pg + C;
    for (int64_t c = 0; c < C; ++c) pg[c] = pb[c] = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const float *dyr = dy + r * C, *xr = x + r * C;
      const float m = mean[r], rstd = rs[r];
      float sg = 0, sgx = 0;
      for (int64_t c = 0; c < C; ++c) {
        const float xh = (xr[c] - m) * rstd, gi = dyr[c] * gm[c];
        sg += gi;
        sgx += gi * xh;
        pg[c] += dyr[c] * xh;
        pb[c] += dyr[c];
      }
      sg /= float(C);
      sgx /= float(C);
      const float em = dmean ? dmean[r] / float(C) : 0.f;
      const float er = drstd ? -drstd[r] * rstd * rstd * rstd / float(C) : 0.f;
      for (int64_t c = 0; c < C; ++c) {
        const float xc = xr[c] - m;
        dx[r * C + c] = rstd * (dyr[c] * gm[c] - sg - xc * rstd * sgx) + em + er * xc;
      }
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    float g = 0, b = 0;
    for (int k = 0; k < used; ++k) {
      g += part[2 * k * C + c];
      b += part[2 * k * C + C + c];
    }
    dg[c] = g;
    db[c] = b;
  }
}

template <void (*F)(const Dims&, const KernelArgs&)>
KernelFactory factory(int x_input, size_t (*ws)(const Dims&)) {
  return [x_input, ws](const Node& n, const std::vector<TensorType>& in) {
    Dims d = dims_of(n, in[x_input].shape);
    return make_kernel([d](const KernelArgs& a) { F(d, a); }, ws(d));
  };
}

LOCKSTEP_REGISTER(cpu_norm_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel("batch_norm_train", "cpu", factory<bn_train>(0, bn_ws));
  R.add_kernel("batch_norm_train_grad", "cpu", factory<bn_train_grad>(1, bn_ws));
  R.add_kernel("batch_norm_infer", "cpu",
               factory<bn_infer>(0, [](const Dims& d) { return sizeof(float) * 2 * d.C; }));
  R.add_kernel("layer_norm", "cpu", factory<ln>(0, [](const Dims&) { return size_t(0); }));
  R.add_kernel("layer_norm_grad", "cpu",
               factory<ln_grad>(1, [](const Dims& d) { return sizeof(float) * 2 * d.T * d.C; }));
}

}  // namespace
}  // namespace lockstep::cpu
