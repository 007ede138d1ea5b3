// StableHLO lowerings of lstm, gru and simple_rnn (+ gradients): the time loop unrolled (the
// sequence length is static), each step the reference kernel's arithmetic over the whole batch
// (dot_general for the two matmuls, a select per sample for a Keras mask). The gradient
// recomputes the forward steps, keeping each step's gates, then runs back through time, as the
// reference kernel does.
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/rnn_cell.h"

namespace lockstep::xla {
namespace {

using Values = std::vector<HloValue>;
using ops::RnnCell;

// One step's values, kept for the backward pass.
struct Step {
  HloValue hp, cp, hd;  // the previous states, hd = hp * rdrop
  Values gate;          // G values (N, H): LSTM i f g o, GRU z r hh, SimpleRNN h
  HloValue extra;       // LSTM c, GRU the recurrent candidate, SimpleRNN the pre-activation
  HloValue keep;        // i1 (N, H): the step is not masked (empty name: no mask)
};

struct Rnn {
  LoweringContext& cx;
  RnnCell c;
  int64_t N, T, F, H, G;
  HloValue x, W, U, b, mask, rdrop;
  StablehloBuilder& B() const { return cx.b; }
  int64_t time_of(int64_t s) const { return c.go_backwards ? T - 1 - s : s; }
  int64_t y_index(int64_t s) const { return c.output_in_input_order ? time_of(s) : s; }
  HloValue add(const HloValue& a, const HloValue& b) const { return B().add(a, b); }
  HloValue mul(const HloValue& a, const HloValue& b) const { return B().multiply(a, b); }
  HloValue sub(const HloValue& a, const HloValue& b) const { return B().subtract(a, b); }
  HloValue one_minus(const HloValue& a) const { return sub(cx.full_like(a, 1.0), a); }
  HloValue sig(const HloValue& a) const { return B().logistic(a); }
  // a (n, k) @ w (k, m); a @ w^T for w (m, k); a^T @ d for a (n, k), d (n, m).
  HloValue mm(const HloValue& a, const HloValue& w) const {
    return B().dot_general(a, w, {}, {}, {1}, {0});
  }
  HloValue mm_t(const HloValue& a, const HloValue& w) const {
    return B().dot_general(a, w, {}, {}, {1}, {1});
  }
  HloValue t_mm(const HloValue& a, const HloValue& d) const {
    return B().dot_general(a, d, {}, {}, {0}, {0});
  }
  // Columns [j0, j0 + len) of a rank-2 value.
  HloValue cols(const HloValue& v, int64_t j0, int64_t len) const {
    return B().slice(v, {0, j0}, {v.type.dims[0], j0 + len});
  }
  // Row `r` of the bias ((G H) or (2, G H)) broadcast over the batch.
  HloValue bias_row(int r) const {
    HloValue v =
        b.type.rank() == 2 ? B().reshape(B().slice(b, {r, 0}, {r + 1, G * H}), {G * H}) : b;
    return B().broadcast_in_dim(v, {N, G * H}, {1});
  }
  // (N, T, C) at time t -> (N, C).
  HloValue at(const HloValue& v, int64_t t) const {
    const int64_t C = v.type.dims[2];
    return B().reshape(B().slice(v, {0, t, 0}, {N, t + 1, C}), {N, C});
  }
  HloValue keep_at(int64_t t, int64_t width) const {
    HloValue m = B().reshape(B().slice(mask, {0, t}, {N, t + 1}), {N});
    HloValue k = B().compare(m, cx.full_like(m, 0.0), Compare::NE);
    return B().broadcast_in_dim(k, {N, width}, {0});
  }
};

// One forward step from (h, c); fills `st` and returns the new (h, c) before masking.
std::pair<HloValue, HloValue> cell_forward(const Rnn& r, const HloValue& xt, Step& st) {
  const int64_t H = r.H;
  HloValue xw = r.add(r.mm(xt, r.W), r.bias_row(0));
  HloValue h, c = st.cp;
  if (r.c.kind == RnnCell::lstm) {
    HloValue a = r.add(xw, r.mm(st.hd, r.U));
    st.gate = {r.sig(r.cols(a, 0, H)), r.sig(r.cols(a, H, H)), r.B().tanh(r.cols(a, 2 * H, H)),
               r.sig(r.cols(a, 3 * H, H))};
    c = r.add(r.mul(st.gate[1], st.cp), r.mul(st.gate[0], st.gate[2]));
    st.extra = c;
    h = r.mul(st.gate[3], r.B().tanh(c));
  } else if (r.c.kind == RnnCell::gru) {
    HloValue rv = r.c.reset_after ? r.add(r.mm(st.hd, r.U), r.bias_row(1))
                                  : r.mm(st.hd, r.cols(r.U, 0, 2 * H));
    HloValue z = r.sig(r.add(r.cols(xw, 0, H), r.cols(rv, 0, H)));
    HloValue rr = r.sig(r.add(r.cols(xw, H, H), r.cols(rv, H, H)));
    st.extra =
        r.c.reset_after ? r.cols(rv, 2 * H, H) : r.mm(r.mul(rr, st.hd), r.cols(r.U, 2 * H, H));
    HloValue cand = r.c.reset_after ? r.mul(rr, st.extra) : st.extra;
    HloValue hh = r.B().tanh(r.add(r.cols(xw, 2 * H, H), cand));
    st.gate = {z, rr, hh};
    h = r.add(r.mul(z, st.hp), r.mul(r.one_minus(z), hh));
  } else {
    st.extra = r.add(xw, r.mm(st.hd, r.U));
    h = r.c.relu ? r.B().maximum(st.extra, r.cx.full_like(st.extra, 0.0)) : r.B().tanh(st.extra);
    st.gate = {h};
  }
  return {h, c};
}

// The whole forward pass: the steps (in processing order), y's steps (at their y index) and
// the final states.
struct Forward {
  std::vector<Step> steps;
  Values y;
  HloValue h, c;
};

Forward run_forward(const Rnn& r, HloValue h, HloValue c) {
  Forward f;
  f.y.resize(size_t(r.T));
  for (int64_t s = 0; s < r.T; ++s) {
    const int64_t t = r.time_of(s);
    Step st;
    st.hp = h, st.cp = c;
    st.hd = r.rdrop.name.empty() ? h : r.mul(h, r.rdrop);
    auto [hn, cn] = cell_forward(r, r.at(r.x, t), st);
    HloValue y = hn;
    if (!r.mask.name.empty()) {
      st.keep = r.keep_at(t, r.H);
      y = r.B().select(st.keep, hn, r.c.zero_output_for_mask ? r.cx.full_like(hn, 0.0) : h);
      hn = r.B().select(st.keep, hn, h);
      cn = r.B().select(st.keep, cn, c);
    }
    h = hn, c = cn;
    f.y[size_t(r.y_index(s))] = r.B().reshape(y, {r.N, 1, r.H});
    f.steps.push_back(std::move(st));
  }
  f.h = h, f.c = c;
  return f;
}

Rnn rnn_of(LoweringContext& cx, const Node& n, int first) {
  const RnnCell c = ops::rnn_cell(n);
  HloValue x = cx.in(n, first), W = cx.in(n, first + 1);
  Rnn r{cx,
        c,
        x.type.dims[0],
        x.type.dims[1],
        x.type.dims[2],
        W.type.dims[1] / c.gates,
        c.gates,
        x,
        W,
        cx.in(n, first + 2),
        cx.in(n, first + 3),
        {},
        {}};
  if (c.masked) r.mask = cx.in(n, first + c.mask_input());
  if (c.recurrent_dropout) r.rdrop = cx.in(n, first + c.rdrop_input());
  return r;
}

Values rnn_forward(LoweringContext& cx, const Node& n) {
  Rnn r = rnn_of(cx, n, 0);
  HloValue h0 = cx.in(n, 4), c0 = r.c.states == 2 ? cx.in(n, 5) : cx.full_like(h0, 0.0);
  Forward f = run_forward(r, h0, c0);
  Values out{cx.b.concatenate(f.y, 1), f.h};
  if (r.c.states == 2) out.push_back(f.c);
  return out;
}

// The gradients of a step's gate pre-activations (da: input side, G H; drec: the recurrent
// matmul's output) from dh, dc; dh becomes the direct part of dh_prev, dc dc_prev, and dhd the
// part through a reset gate (GRU without reset_after).
struct CellGrad {
  HloValue da, drec, dhd;
};

CellGrad cell_backward(const Rnn& r, const Step& st, HloValue& dh, HloValue& dc) {
  const auto& g = st.gate;
  auto dsig = [&](const HloValue& v) { return r.mul(v, r.one_minus(v)); };
  auto dtanh = [&](const HloValue& v) { return r.one_minus(r.mul(v, v)); };
  const HloValue zero = r.cx.full_like(dh, 0.0);
  if (r.c.kind == RnnCell::lstm) {
    HloValue tc = r.B().tanh(st.extra);
    HloValue dcn = r.add(dc, r.mul(r.mul(dh, g[3]), dtanh(tc)));
    HloValue da = r.B().concatenate(
        {r.mul(r.mul(dcn, g[2]), dsig(g[0])), r.mul(r.mul(dcn, st.cp), dsig(g[1])),
         r.mul(r.mul(dcn, g[0]), dtanh(g[2])), r.mul(r.mul(dh, tc), dsig(g[3]))},
        1);
    dc = r.mul(dcn, g[1]);
    dh = zero;
    return {da, da, zero};
  }
  if (r.c.kind == RnnCell::simple) {
    HloValue d = r.c.relu ? r.B().select(r.B().compare(st.extra, zero, Compare::GT),
                                         r.cx.full_like(dh, 1.0), zero)
                          : dtanh(g[0]);
    HloValue da = r.mul(dh, d);
    dh = zero;
    return {da, da, zero};
  }
  const HloValue &z = g[0], &rr = g[1], &hh = g[2];
  HloValue da_z = r.mul(r.mul(dh, r.sub(st.hp, hh)), dsig(z));
  HloValue da_h = r.mul(r.mul(dh, r.one_minus(z)), dtanh(hh));
  dh = r.mul(dh, z);
  if (r.c.reset_after) {
    HloValue da_r = r.mul(r.mul(da_h, st.extra), dsig(rr));
    return {r.B().concatenate({da_z, da_r, da_h}, 1),
            r.B().concatenate({da_z, da_r, r.mul(da_h, rr)}, 1), zero};
  }
  HloValue ds = r.mm_t(da_h, r.cols(r.U, 2 * r.H, r.H));  // d(r * hd)
  HloValue da_r = r.mul(r.mul(ds, st.hd), dsig(rr));
  return {r.B().concatenate({da_z, da_r, da_h}, 1), r.B().concatenate({da_z, da_r}, 1),
          r.mul(ds, rr)};
}

struct Acc {
  HloValue dW, dU, db0, db1;  // dU: (H, G H); db1: the recurrent bias (GRU reset_after)
  bool any = false;
};

void add_to(const Rnn& r, HloValue& acc, const HloValue& v, bool first) {
  acc = first ? v : r.add(acc, v);
}

// Accumulates step st's weight gradients; returns dx_t and adds the recurrent part to dh.
HloValue accumulate(const Rnn& r, const Step& st, const HloValue& xt, const CellGrad& g,
                    HloValue& dh, Acc& acc) {
  const bool first = !acc.any;
  acc.any = true;
  add_to(r, acc.dW, r.t_mm(xt, g.da), first);
  add_to(r, acc.db0, r.cx.reduce_sum(g.da, {0}), first);
  const bool gru_rb = r.c.kind == RnnCell::gru && !r.c.reset_after;
  HloValue dU = r.t_mm(st.hd, g.drec);  // (H, len)
  HloValue through = r.mm_t(g.drec, gru_rb ? r.cols(r.U, 0, 2 * r.H) : r.U);
  if (gru_rb)
    dU = r.B().concatenate({dU, r.t_mm(r.mul(st.gate[1], st.hd), r.cols(g.da, 2 * r.H, r.H))}, 1);
  if (r.c.kind == RnnCell::gru && r.c.reset_after)
    add_to(r, acc.db1, r.cx.reduce_sum(g.drec, {0}), first);
  add_to(r, acc.dU, dU, first);
  HloValue dhd = r.add(g.dhd, through);
  dh = r.add(dh, r.rdrop.name.empty() ? dhd : r.mul(dhd, r.rdrop));
  return r.mm_t(g.da, r.W);
}

Values rnn_backward(LoweringContext& cx, const Node& n) {
  const int first = 1 + ops::rnn_cell(n).states;
  Rnn r = rnn_of(cx, n, first);
  const bool lstm = r.c.states == 2;
  HloValue h0 = cx.in(n, first + 4), c0 = lstm ? cx.in(n, first + 5) : cx.full_like(h0, 0.0);
  Forward f = run_forward(r, h0, c0);
  HloValue dy = cx.in(n, 0), dh = cx.in(n, 1), dc = lstm ? cx.in(n, 2) : cx.full_like(h0, 0.0);
  Values dx(size_t(r.T));
  Acc acc;
  for (int64_t s = r.T - 1; s >= 0; --s) {
    const Step& st = f.steps[size_t(s)];
    const int64_t t = r.time_of(s);
    HloValue dyt = r.at(dy, r.y_index(s));
    if (!st.keep.name.empty() && r.c.zero_output_for_mask)
      dyt = cx.b.select(st.keep, dyt, cx.full_like(dyt, 0.0));
    HloValue dht = r.add(dh, dyt), dct = dc, dhc = dht, dcc = dc;
    CellGrad g = cell_backward(r, st, dhc, dcc);
    HloValue xt = r.at(r.x, t);
    if (!st.keep.name.empty()) {  // a masked sample's step: no gradient, the states pass
      HloValue kg = r.keep_at(t, r.G * r.H);
      g.da = cx.b.select(kg, g.da, cx.full_like(g.da, 0.0));
      HloValue kd = r.keep_at(t, g.drec.type.dims[1]);
      g.drec = cx.b.select(kd, g.drec, cx.full_like(g.drec, 0.0));
      g.dhd = cx.b.select(st.keep, g.dhd, cx.full_like(g.dhd, 0.0));
      dhc = cx.b.select(st.keep, dhc, cx.full_like(dhc, 0.0));
    }
    HloValue dxt = accumulate(r, st, xt, g, dhc, acc);
    if (!st.keep.name.empty()) {
      dhc = cx.b.select(st.keep, dhc, dht);
      dcc = cx.b.select(st.keep, dcc, dct);
    }
    dh = dhc, dc = dcc;
    dx[size_t(t)] = cx.b.reshape(dxt, {r.N, 1, r.F});
  }
  HloValue db = acc.db0;
  if (r.c.kind == RnnCell::gru && r.c.reset_after)
    db = cx.b.concatenate(
        {cx.b.reshape(acc.db0, {1, r.G * r.H}), cx.b.reshape(acc.db1, {1, r.G * r.H})}, 0);
  Values out{cx.b.concatenate(dx, 1), acc.dW, acc.dU, db, dh};
  if (lstm) out.push_back(dc);
  return out;
}

}  // namespace

LOCKSTEP_REGISTER(xla_rnn_lowerings) {
  for (OpId id : {op::lstm, op::gru, op::simple_rnn}) register_lowering(id, rnn_forward);
  for (OpId id : {op::lstm_grad, op::gru_grad, op::simple_rnn_grad})
    register_lowering(id, rnn_backward);
}

}  // namespace lockstep::xla
