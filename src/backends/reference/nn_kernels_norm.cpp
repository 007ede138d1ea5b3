// Reference (naive, double-precision) kernels: batch_norm train/infer (+grads), layer_norm (+grad).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {
namespace {

struct Dims {
  int64_t R, C;
  double eps;
  // batch_norm_train(_grad)/_infer fused with relu, or with relu6 (relu and relu6 both set)
  bool relu = false, relu6 = false, emit_dy = false;
  bool swish = false;   // batch_norm_train(_grad) fused with swish (input 5 of the grad: beta)
  bool from_x = false;  // the grad's relu(6) mask recomputed from bn(x) (input 5: beta)
  float act(float o) const { return relu6 ? std::min(std::max(o, 0.f), 6.f) : std::max(o, 0.f); }
  bool passes(float y) const { return y > 0 && (!relu6 || y < 6); }  // relu(6)_grad's mask
};

Dims dims_of(const Node& n, const Shape& x) {
  int64_t C = x[-1];
  Dims d{x.numel() / C, C, attr_f(n, "epsilon")};
  if (n.op == op::batch_norm_train || n.op == op::batch_norm_train_grad ||
      n.op == op::batch_norm_infer) {
    const FusedActivation act = attr_activation(n);
    d.relu6 = act == FusedActivation::relu6;
    d.relu = d.relu6 || act == FusedActivation::relu;
    d.swish = act == FusedActivation::swish;
    d.emit_dy = n.op == op::batch_norm_train_grad && attr_b(n, "emit_dy");
    d.from_x = n.op == op::batch_norm_train_grad && attr_b(n, "mask_from_x");
    LS_CHECK(n.op == op::batch_norm_infer || attr_i(n, "group") == 0, n.op, " '", n.name,
             "': statistics synchronized across replicas (attribute group) run on the cpu "
             "backend only");
  }
  return d;
}

void bn_train(Dims d, const KernelArgs& a) {
  const float *x = in_f(a, 0), *gm = in_f(a, 1), *bt = in_f(a, 2);
  const float* z = a.num_inputs > 3 ? in_f(a, 3) : nullptr;  // residual
  float *y = out_f(a, 0), *mean = out_f(a, 1), *var = out_f(a, 2);
  for (int64_t c = 0; c < d.C; ++c) {
    double s = 0, ss = 0;
    for (int64_t r = 0; r < d.R; ++r) s += x[r * d.C + c];
    const double m = s / d.R;
    for (int64_t r = 0; r < d.R; ++r) ss += (x[r * d.C + c] - m) * (x[r * d.C + c] - m);
    const double v = ss / d.R, rstd = 1.0 / std::sqrt(v + d.eps);
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t i = r * d.C + c;
      float o = float(gm[c] * (x[i] - m) * rstd + bt[c]);  // the unfused op's rounding
      if (z) o += z[i];
      y[i] = d.relu ? d.act(o) : d.swish ? o * ew::sigmoid(o) : o;
    }
    mean[c] = float(m);
    var[c] = float(v);
  }
}

// (dy, x, gamma, mean, var[, y][, dmean, dvar]) -> (dx, dgamma, dbeta[, dz])
void bn_train_grad(Dims d, const KernelArgs& a) {
  const float *dy = in_f(a, 0), *x = in_f(a, 1), *gm = in_f(a, 2), *mean = in_f(a, 3),
              *var = in_f(a, 4);
  const int s = d.relu || d.swish ? 6 : 5;  // first statistics gradient
  const float* dmean = a.num_inputs > s ? in_f(a, s) : nullptr;
  const float* dvar = a.num_inputs > s ? in_f(a, s + 1) : nullptr;
  float *dx = out_f(a, 0), *dg = out_f(a, 1), *db = out_f(a, 2);
  if (d.swish) {  // dy at swish(s), s = bn(x) as the forward rounds it: swish_grad first
    const float* bt = in_f(a, 5);
    float* m = static_cast<float*>(a.workspace);
    for (int64_t i = 0; i < d.R * d.C; ++i) {
      const int64_t c = i % d.C;
      const double rstd = 1.0 / std::sqrt(double(var[c]) + d.eps);
      const float s = float(gm[c] * (x[i] - mean[c]) * rstd + bt[c]), sg = ew::sigmoid(s);
      m[i] = dy[i] * (sg + s * sg * (1.f - sg));
    }
    dy = m;
  }
  if (d.relu) {  // dy at relu's output y: relu_grad first, into dz or the workspace
    float* m = d.emit_dy ? out_f(a, 3) : static_cast<float*>(a.workspace);
    if (d.from_x) {  // y = relu(6)(bn(x)) recomputed with beta (input 5), as the forward rounds
      const float* bt = in_f(a, 5);
      for (int64_t i = 0; i < d.R * d.C; ++i) {
        const int64_t c = i % d.C;
        const double rstd = 1.0 / std::sqrt(double(var[c]) + d.eps);
        const float y = d.act(float(gm[c] * (x[i] - mean[c]) * rstd + bt[c]));
        m[i] = d.passes(y) ? dy[i] : 0.f;
      }
    } else {
      const float* y = in_f(a, 5);
      for (int64_t i = 0; i < d.R * d.C; ++i) m[i] = d.passes(y[i]) ? dy[i] : 0.f;
    }
    dy = m;
  }
  for (int64_t c = 0; c < d.C; ++c) {
    const double m = mean[c], rstd = 1.0 / std::sqrt(double(var[c]) + d.eps);
    double sdy = 0, sdyx = 0;
    for (int64_t r = 0; r < d.R; ++r) {
      sdy += dy[r * d.C + c];
      sdyx += dy[r * d.C + c] * (x[r * d.C + c] - m) * rstd;
    }
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t i = r * d.C + c;
      const double xh = (x[i] - m) * rstd;
      double v = gm[c] * rstd / d.R * (d.R * dy[i] - sdy - xh * sdyx);
      if (dmean) v += dmean[c] / d.R + dvar[c] * 2.0 * (x[i] - m) / d.R;
      dx[i] = float(v);
    }
    dg[c] = float(sdyx);
    db[c] = float(sdy);
  }
}

void bn_infer(Dims d, const KernelArgs& a) {
  const float *x = in_f(a, 0), *gm = in_f(a, 1), *bt = in_f(a, 2), *mean = in_f(a, 3),
              *var = in_f(a, 4);
  const float* z = a.num_inputs > 5 ? in_f(a, 5) : nullptr;  // residual (fused)
  float* y = out_f(a, 0);
  for (int64_t r = 0; r < d.R; ++r)
    for (int64_t c = 0; c < d.C; ++c) {
      const double rstd = 1.0 / std::sqrt(double(var[c]) + d.eps);
      float o = float(gm[c] * (x[r * d.C + c] - mean[c]) * rstd + bt[c]);
      if (z) o += z[r * d.C + c];
      y[r * d.C + c] = d.relu ? d.act(o) : o;
    }
}

// (w[..., C], gamma, beta, mean, var[, b]) -> (w * s, beta - mean * s [+ b * s]),
// s = gamma / sqrt(var + eps): the statistics folded into the producing conv (fusion pass).
void bn_fold(Dims d, const KernelArgs& a) {
  const float *w = in_f(a, 0), *gm = in_f(a, 1), *bt = in_f(a, 2), *mean = in_f(a, 3),
              *var = in_f(a, 4);
  const float* b = a.num_inputs > 5 ? in_f(a, 5) : nullptr;
  float *wf = out_f(a, 0), *bf = out_f(a, 1);
  std::vector<float> s(size_t(d.C));
  for (int64_t c = 0; c < d.C; ++c) {
    const double sc = gm[c] / std::sqrt(double(var[c]) + d.eps);
    s[size_t(c)] = float(sc);
    bf[c] = float(bt[c] - mean[c] * sc + (b ? b[c] * sc : 0.0));
  }
  for (int64_t r = 0; r < d.R; ++r)
    for (int64_t c = 0; c < d.C; ++c) wf[r * d.C + c] = w[r * d.C + c] * s[size_t(c)];
}

// (dy, x, gamma, mean, var) -> (dx, dgamma, dbeta, dmean, dvar)
void bn_infer_grad(Dims d, const KernelArgs& a) {
  const float *dy = in_f(a, 0), *x = in_f(a, 1), *gm = in_f(a, 2), *mean = in_f(a, 3),
              *var = in_f(a, 4);
  float *dx = out_f(a, 0), *dg = out_f(a, 1), *db = out_f(a, 2), *dm = out_f(a, 3),
        *dv = out_f(a, 4);
  for (int64_t c = 0; c < d.C; ++c) {
    const double rstd = 1.0 / std::sqrt(double(var[c]) + d.eps);
    double sdy = 0, sdyxc = 0;
    for (int64_t r = 0; r < d.R; ++r) {
      const int64_t i = r * d.C + c;
      sdy += dy[i];
      sdyxc += dy[i] * (x[i] - mean[c]);
      dx[i] = float(dy[i] * gm[c] * rstd);
    }
    dg[c] = float(sdyxc * rstd);
    db[c] = float(sdy);
    dm[c] = float(-sdy * gm[c] * rstd);
    dv[c] = float(sdyxc * gm[c] * -0.5 * rstd * rstd * rstd);
  }
}

void ln(Dims d, const KernelArgs& a) {
  const float *x = in_f(a, 0), *gm = in_f(a, 1), *bt = in_f(a, 2);
  float *y = out_f(a, 0), *mean = out_f(a, 1), *rs = out_f(a, 2);
  for (int64_t r = 0; r < d.R; ++r) {
    const float* xr = x + r * d.C;
    double s = 0, ss = 0;
    for (int64_t c = 0; c < d.C; ++c) s += xr[c];
    const double m = s / d.C;
    for (int64_t c = 0; c < d.C; ++c) ss += (xr[c] - m) * (xr[c] - m);
    const double rstd = 1.0 / std::sqrt(ss / d.C + d.eps);
    for (int64_t c = 0; c < d.C; ++c) y[r * d.C + c] = float(gm[c] * (xr[c] - m) * rstd + bt[c]);
    mean[r] = float(m);
    rs[r] = float(rstd);
  }
}

// (dy, x, gamma, mean, rstd[, dmean, drstd]) -> (dx, dgamma, dbeta)
void ln_grad(Dims d, const KernelArgs& a) {
  const float *dy = in_f(a, 0), *x = in_f(a, 1), *gm = in_f(a, 2), *mean = in_f(a, 3),
              *rs = in_f(a, 4);
  const float* dmean = a.num_inputs > 5 ? in_f(a, 5) : nullptr;
  const float* drstd = a.num_inputs > 5 ? in_f(a, 6) : nullptr;
  float *dx = out_f(a, 0), *dg = out_f(a, 1), *db = out_f(a, 2);
  for (int64_t c = 0; c < d.C; ++c) dg[c] = db[c] = 0;
  for (int64_t r = 0; r < d.R; ++r) {
    const int64_t o = r * d.C;
    const double m = mean[r], rstd = rs[r];
    double sg = 0, sgx = 0;
    for (int64_t c = 0; c < d.C; ++c) {
      const double xh = (x[o + c] - m) * rstd, gi = double(dy[o + c]) * gm[c];
      sg += gi;
      sgx += gi * xh;
      dg[c] += float(dy[o + c] * xh);
      db[c] += dy[o + c];
    }
    for (int64_t c = 0; c < d.C; ++c) {
      const double xh = (x[o + c] - m) * rstd, gi = double(dy[o + c]) * gm[c];
      double v = rstd * (gi - sg / d.C - xh * sgx / d.C);
      if (dmean) v += dmean[r] / d.C - drstd[r] * rstd * rstd * rstd * (x[o + c] - m) / d.C;
      dx[o + c] = float(v);
    }
  }
}

template <void (*F)(Dims, const KernelArgs&)>
KernelFactory factory(int x_input) {
  return [x_input](const Node& n, const std::vector<TensorType>& in) {
    Dims d = dims_of(n, in[x_input].shape);
    const bool masked = x_input == 1 && ((d.relu && !d.emit_dy) || d.swish);
    const size_t ws = masked ? sizeof(float) * size_t(d.R * d.C) : 0;
    return make_kernel([d](const KernelArgs& a) { F(d, a); }, ws);
  };
}

LOCKSTEP_REGISTER(reference_norm_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::batch_norm_train, "reference", factory<bn_train>(0));
  R.add_kernel(op::batch_norm_train_grad, "reference", factory<bn_train_grad>(1));
  R.add_kernel(op::batch_norm_infer, "reference", factory<bn_infer>(0));
  R.add_kernel(op::batch_norm_infer_grad, "reference", factory<bn_infer_grad>(1));
  R.add_kernel(op::batch_norm_fold, "reference", factory<bn_fold>(0));
  R.add_kernel(op::layer_norm, "reference", factory<ln>(0));
  R.add_kernel(op::layer_norm_grad, "reference", factory<ln_grad>(1));
}

}  // namespace
}  // namespace lockstep
