// Reference kernels of lstm, gru, simple_rnn and their gradients: plain loops in double, one
// sample at a time, the ground truth the cpu and xla kernels are held to. The gradients
// recompute the forward pass, keeping each step's gates, then run back through time.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/internal/kernel_util.h"
#include "ops/internal/rnn_cell.h"

namespace lockstep {
namespace {

using ops::RnnCell;

double sigm(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// One sample's view of a recurrent node's operands, and its per-step records (workspace).
struct Rnn {
  RnnCell cell;
  int64_t N = 0, T = 0, F = 0, H = 0;
  const float *x = nullptr, *W = nullptr, *U = nullptr, *b = nullptr, *mask = nullptr,
              *rdrop = nullptr;
  const float* init[2] = {nullptr, nullptr};
  int64_t G() const { return cell.gates; }
  // A step's record: h_prev, c_prev, hd (h_prev * rdrop), gates (G*H), extra (H), skipped.
  int64_t rec_size() const { return 4 * H + G() * H + 1; }
  int64_t time_of(int64_t s) const { return cell.go_backwards ? T - 1 - s : s; }
  int64_t y_index(int64_t s) const { return cell.output_in_input_order ? time_of(s) : s; }
  const float* xt(int64_t n, int64_t s) const { return x + (n * T + time_of(s)) * F; }
  bool kept(int64_t n, int64_t s) const { return !mask || mask[n * T + time_of(s)] != 0.f; }
  double rd(int64_t n, int64_t k) const { return rdrop ? double(rdrop[n * H + k]) : 1.0; }
  // x_t @ kernel + input bias, (G*H).
  void input_part(const float* xt, double* xw) const {
    for (int64_t j = 0; j < G() * H; ++j) {
      double v = b[j];
      for (int64_t f = 0; f < F; ++f) v += double(xt[f]) * W[f * G() * H + j];
      xw[j] = v;
    }
  }
  // v[j] = sum_k a[k] U[k, j0 + j] for j < len.
  void rec_matmul(const double* a, int64_t j0, int64_t len, double* v) const {
    for (int64_t j = 0; j < len; ++j) {
      double s = 0;
      for (int64_t k = 0; k < H; ++k) s += a[k] * U[k * G() * H + j0 + j];
      v[j] = s;
    }
  }
};

Rnn rnn_of(const Node& n, const std::vector<TensorType>& in, int first) {
  Rnn r;
  r.cell = ops::rnn_cell(n);
  const Shape& x = in[first].shape;
  r.N = x[0], r.T = x[1], r.F = x[2];
  r.H = in[first + 1].shape[1] / r.cell.gates;
  return r;
}

void bind(Rnn& r, const KernelArgs& a, int first) {
  r.x = in_f(a, first);
  r.W = in_f(a, first + 1);
  r.U = in_f(a, first + 2);
  r.b = in_f(a, first + 3);
  for (int s = 0; s < r.cell.states; ++s) r.init[s] = in_f(a, first + 4 + s);
  r.mask = r.cell.masked ? in_f(a, first + r.cell.mask_input()) : nullptr;
  r.rdrop = r.cell.recurrent_dropout ? in_f(a, first + r.cell.rdrop_input()) : nullptr;
}

// One step of sample n from (h, c) to (h, c) in place, writing its record `rec`.
void step_forward(const Rnn& r, int64_t n, int64_t s, double* h, double* c, double* rec,
                  double* tmp) {
  const int64_t H = r.H, G = r.G();
  double *hp = rec, *cp = rec + H, *hd = rec + 2 * H, *gate = rec + 3 * H, *extra = gate + G * H;
  std::memcpy(hp, h, sizeof(double) * H);
  std::memcpy(cp, c, sizeof(double) * H);
  for (int64_t k = 0; k < H; ++k) hd[k] = h[k] * r.rd(n, k);
  rec[r.rec_size() - 1] = r.kept(n, s) ? 0.0 : 1.0;
  if (!r.kept(n, s)) return;
  double *xw = tmp, *rv = tmp + G * H;
  r.input_part(r.xt(n, s), xw);
  if (r.cell.kind == RnnCell::lstm) {
    r.rec_matmul(hd, 0, G * H, rv);
    for (int64_t k = 0; k < H; ++k) {
      const double i = sigm(xw[k] + rv[k]), f = sigm(xw[H + k] + rv[H + k]),
                   g = std::tanh(xw[2 * H + k] + rv[2 * H + k]),
                   o = sigm(xw[3 * H + k] + rv[3 * H + k]);
      gate[k] = i, gate[H + k] = f, gate[2 * H + k] = g, gate[3 * H + k] = o;
      c[k] = f * c[k] + i * g;
      extra[k] = c[k];
      h[k] = o * std::tanh(c[k]);
    }
  } else if (r.cell.kind == RnnCell::gru) {
    const int64_t len = r.cell.reset_after ? 3 * H : 2 * H;
    r.rec_matmul(hd, 0, len, rv);
    if (r.cell.reset_after)
      for (int64_t j = 0; j < 3 * H; ++j) rv[j] += r.b[3 * H + j];
    for (int64_t k = 0; k < H; ++k) {
      gate[k] = sigm(xw[k] + rv[k]);
      gate[H + k] = sigm(xw[H + k] + rv[H + k]);
    }
    if (!r.cell.reset_after) {
      double* rh = tmp + 4 * G * H;
      for (int64_t k = 0; k < H; ++k) rh[k] = gate[H + k] * hd[k];
      r.rec_matmul(rh, 2 * H, H, rv + 2 * H);
    }
    for (int64_t k = 0; k < H; ++k) {
      extra[k] = rv[2 * H + k];
      const double cand = r.cell.reset_after ? gate[H + k] * rv[2 * H + k] : rv[2 * H + k];
      const double hh = std::tanh(xw[2 * H + k] + cand);
      gate[2 * H + k] = hh;
      h[k] = gate[k] * h[k] + (1 - gate[k]) * hh;
    }
  } else {
    r.rec_matmul(hd, 0, H, rv);
    for (int64_t k = 0; k < H; ++k) {
      const double a = xw[k] + rv[k];
      extra[k] = a;
      h[k] = r.cell.relu ? std::max(a, 0.0) : std::tanh(a);
      gate[k] = h[k];
    }
  }
}

// Writes step s's output of sample n: h, or (a skipped step) zeros when zero_output_for_mask.
void write_y(const Rnn& r, float* y, int64_t n, int64_t s, const double* h, bool skipped) {
  float* o = y + (n * r.T + r.y_index(s)) * r.H;
  for (int64_t k = 0; k < r.H; ++k)
    o[k] = skipped && r.cell.zero_output_for_mask ? 0.f : float(h[k]);
}

// The forward pass of sample n, records in `recs` (T records); h, c end as the final states.
void forward_sample(const Rnn& r, int64_t n, double* h, double* c, double* recs, double* tmp,
                    float* y) {
  for (int64_t k = 0; k < r.H; ++k) {
    h[k] = r.init[0][n * r.H + k];
    c[k] = r.cell.states == 2 ? r.init[1][n * r.H + k] : 0.0;
  }
  for (int64_t s = 0; s < r.T; ++s) {
    double* rec = recs + s * r.rec_size();
    step_forward(r, n, s, h, c, rec, tmp);
    if (y) write_y(r, y, n, s, h, rec[r.rec_size() - 1] != 0);
  }
}

size_t scratch_doubles(const Rnn& r) {
  return size_t(r.T * r.rec_size() + 2 * r.H + 6 * r.G() * r.H + 4 * r.H);
}

void run_forward(Rnn r, const KernelArgs& a) {
  bind(r, a, 0);
  double* ws = static_cast<double*>(a.workspace);
  double *recs = ws, *h = recs + r.T * r.rec_size(), *c = h + r.H, *tmp = c + r.H;
  for (int64_t n = 0; n < r.N; ++n) {
    forward_sample(r, n, h, c, recs, tmp, out_f(a, 0));
    for (int64_t k = 0; k < r.H; ++k) {
      out_f(a, 1)[n * r.H + k] = float(h[k]);
      if (r.cell.states == 2) out_f(a, 2)[n * r.H + k] = float(c[k]);
    }
  }
}

// The gradients being accumulated (double) and the ones written per sample.
struct Grads {
  double *dW, *dU, *db;
  float* dx;
};

// da: the gradient of the gate pre-activations from the input side (G*H), drec: of the
// recurrent matmul's output (G*H; GRU without reset_after: of its z, r part, the h part's
// matmul is done here). dh, dc: in, the gradient of the step's new states; out, of the previous.
void cell_backward(const Rnn& r, const double* rec, double* dh, double* dc, double* da,
                   double* drec, double* dhd) {
  const int64_t H = r.H, G = r.G();
  const double *hp = rec, *hd = rec + 2 * H, *gate = rec + 3 * H, *extra = gate + G * H;
  for (int64_t k = 0; k < H; ++k) dhd[k] = 0;
  if (r.cell.kind == RnnCell::lstm) {
    for (int64_t k = 0; k < H; ++k) {
      const double i = gate[k], f = gate[H + k], g = gate[2 * H + k], o = gate[3 * H + k];
      const double tc = std::tanh(extra[k]);
      const double dcn = dc[k] + dh[k] * o * (1 - tc * tc);
      da[k] = dcn * g * i * (1 - i);
      da[H + k] = dcn * rec[H + k] * f * (1 - f);
      da[2 * H + k] = dcn * i * (1 - g * g);
      da[3 * H + k] = dh[k] * tc * o * (1 - o);
      dc[k] = dcn * f;
      dh[k] = 0;
    }
    for (int64_t j = 0; j < G * H; ++j) drec[j] = da[j];
    return;
  }
  if (r.cell.kind == RnnCell::simple) {
    for (int64_t k = 0; k < H; ++k) {
      const double d = r.cell.relu ? (extra[k] > 0 ? 1.0 : 0.0) : 1 - gate[k] * gate[k];
      da[k] = drec[k] = dh[k] * d;
      dh[k] = 0;
    }
    return;
  }
  for (int64_t k = 0; k < H; ++k) {  // GRU
    const double z = gate[k], rr = gate[H + k], hh = gate[2 * H + k];
    da[k] = dh[k] * (hp[k] - hh) * z * (1 - z);
    da[2 * H + k] = dh[k] * (1 - z) * (1 - hh * hh);
    if (r.cell.reset_after) {
      da[H + k] = da[2 * H + k] * extra[k] * rr * (1 - rr);
      drec[2 * H + k] = da[2 * H + k] * rr;
    }
    dh[k] *= z;
  }
  if (!r.cell.reset_after) {  // d(r * hd) = da_h @ U_h^T
    for (int64_t k = 0; k < H; ++k) {
      double s = 0;
      for (int64_t j = 0; j < H; ++j) s += da[2 * H + j] * r.U[k * G * H + 2 * H + j];
      const double rr = gate[H + k];
      da[H + k] = s * hd[k] * rr * (1 - rr);
      dhd[k] = s * rr;
    }
  }
  for (int64_t j = 0; j < 2 * H; ++j) drec[j] = da[j];
}

// Accumulates the weight gradients of step s and passes dh back through the recurrent matmul.
void accumulate_step(const Rnn& r, int64_t n, int64_t s, const double* rec, const double* da,
                     const double* drec, double* dhd, double* dh, Grads& g) {
  const int64_t H = r.H, G = r.G(), GH = G * H;
  const double* hd = rec + 2 * H;
  const float* xt = r.xt(n, s);
  float* dx = g.dx + (n * r.T + r.time_of(s)) * r.F;
  for (int64_t f = 0; f < r.F; ++f) {
    double v = 0;
    for (int64_t j = 0; j < GH; ++j) {
      g.dW[f * GH + j] += double(xt[f]) * da[j];
      v += da[j] * r.W[f * GH + j];
    }
    dx[f] = float(v);
  }
  for (int64_t j = 0; j < GH; ++j) g.db[j] += da[j];
  const bool gru_rb = r.cell.kind == RnnCell::gru && !r.cell.reset_after;
  const int64_t len = gru_rb ? 2 * H : GH;  // the columns drec covers
  if (r.cell.kind == RnnCell::gru && r.cell.reset_after)
    for (int64_t j = 0; j < GH; ++j) g.db[GH + j] += drec[j];
  const double* gate = rec + 3 * H;
  for (int64_t k = 0; k < H; ++k) {
    double v = 0;
    for (int64_t j = 0; j < len; ++j) {
      g.dU[k * GH + j] += hd[k] * drec[j];
      v += drec[j] * r.U[k * GH + j];
    }
    if (gru_rb)
      for (int64_t j = 0; j < H; ++j)
        g.dU[k * GH + 2 * H + j] += gate[H + k] * hd[k] * da[2 * H + j];
    dh[k] += (dhd[k] + v) * r.rd(n, k);
  }
}

// Back through time for sample n, after forward_sample filled `recs`.
void backward_sample(const Rnn& r, int64_t n, const KernelArgs& a, const double* recs, double* tmp,
                     Grads& g) {
  const int64_t H = r.H, G = r.G();
  double *dh = tmp, *dc = dh + H, *da = dc + H, *drec = da + G * H, *dhd = drec + G * H;
  const float* dy = in_f(a, 0);
  for (int64_t k = 0; k < H; ++k) {
    dh[k] = in_f(a, 1)[n * H + k];
    dc[k] = r.cell.states == 2 ? in_f(a, 2)[n * H + k] : 0.0;
  }
  for (int64_t s = r.T - 1; s >= 0; --s) {
    const double* rec = recs + s * r.rec_size();
    const bool skipped = rec[r.rec_size() - 1] != 0;
    if (!skipped || !r.cell.zero_output_for_mask)
      for (int64_t k = 0; k < H; ++k) dh[k] += dy[(n * r.T + r.y_index(s)) * H + k];
    if (skipped) {
      float* dx = g.dx + (n * r.T + r.time_of(s)) * r.F;
      for (int64_t f = 0; f < r.F; ++f) dx[f] = 0.f;
      continue;
    }
    cell_backward(r, rec, dh, dc, da, drec, dhd);
    accumulate_step(r, n, s, rec, da, drec, dhd, dh, g);
  }
  for (int64_t k = 0; k < H; ++k) {
    out_f(a, 4)[n * H + k] = float(dh[k]);
    if (r.cell.states == 2) out_f(a, 5)[n * H + k] = float(dc[k]);
  }
}

void run_backward(Rnn r, const KernelArgs& a) {
  const int first = 1 + r.cell.states;
  bind(r, a, first);
  const int64_t GH = r.G() * r.H;
  const int64_t nb = r.cell.bias_shape(r.H).numel();
  double* ws = static_cast<double*>(a.workspace);
  Grads g{ws, ws + r.F * GH, ws + r.F * GH + r.H * GH, out_f(a, 0)};
  double* rest = g.db + nb;
  for (double* p = ws; p < rest; ++p) *p = 0;
  double *recs = rest, *h = recs + r.T * r.rec_size(), *c = h + r.H, *tmp = c + r.H;
  for (int64_t n = 0; n < r.N; ++n) {
    forward_sample(r, n, h, c, recs, tmp, nullptr);
    backward_sample(r, n, a, recs, tmp, g);
  }
  for (int64_t i = 0; i < r.F * GH; ++i) out_f(a, 1)[i] = float(g.dW[i]);
  for (int64_t i = 0; i < r.H * GH; ++i) out_f(a, 2)[i] = float(g.dU[i]);
  for (int64_t i = 0; i < nb; ++i) out_f(a, 3)[i] = float(g.db[i]);
}

KernelFactory forward_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) {
    Rnn r = rnn_of(n, in, 0);
    return make_kernel([r](const KernelArgs& a) { run_forward(r, a); },
                       sizeof(double) * scratch_doubles(r));
  };
}

KernelFactory backward_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) {
    const int first = 1 + ops::rnn_cell(n).states;
    Rnn r = rnn_of(n, in, first);
    const int64_t GH = r.G() * r.H;
    const size_t acc = size_t(r.F * GH + r.H * GH + 2 * GH);
    return make_kernel([r](const KernelArgs& a) { run_backward(r, a); },
                       sizeof(double) * (acc + scratch_doubles(r)));
  };
}

LOCKSTEP_REGISTER(reference_rnn_kernels) {
  auto& R = OpRegistry::get();
  for (OpId id : {op::lstm, op::gru, op::simple_rnn})
    R.add_kernel(id, "reference", forward_factory());
  for (OpId id : {op::lstm_grad, op::gru_grad, op::simple_rnn_grad})
    R.add_kernel(id, "reference", backward_factory());
}

}  // namespace
}  // namespace lockstep
