// cpu backend: lstm, gru and simple_rnn (+ gradients) on oneDNN's RNN primitives (lstm, gru,
// lbr_gru for Keras's reset_after=True, vanilla_rnn), forward and backward, built once per node.
// Keras's layouts are oneDNN's: the kernel (F, G*H) is ldigo, the recurrent kernel (H, G*H)
// ldigo, the gates in the same order (LSTM i, f, c, o; GRU z/u, r, h/o); the weights are
// reordered to the layout the primitive picks on every run. GRU reset_after's two biases become
// lbr_gru's four (z and r summed). go_backwards runs right to left; oneDNN keeps its outputs in
// input order, Keras in processing order, so the sequence is flipped on the way out (and its
// gradient on the way in). A Keras mask (a step skipped per sample) and recurrent dropout have no
// oneDNN form: those nodes run the reference loop kernel, which the executable reports. A bf16
// node (mixed precision) runs oneDNN's bf16 primitive where oneDNN offers one for the cell on
// this CPU (decided when the kernel is built, by asking oneDNN for it; the bias stays f32), and
// otherwise the f32 primitive between conversions.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/cpu/dnnl_common.h"
#include "ops/internal/kernel_util.h"
#include "ops/internal/rnn_cell.h"

namespace lockstep::cpu {
namespace {

using dnnl::prop_kind;
using dnnl::rnn_direction;
using ops::RnnCell;

struct Geo {
  RnnCell c;
  int64_t N = 0, T = 0, F = 0, H = 0;
  dt type = dt::f32;  // the sequences', states' and weights' type (the bias is always f32)
  size_t elem() const { return type == dt::bf16 ? 2 : 4; }
  int64_t G() const { return c.gates; }
  // lbr_gru's bias has a fourth gate (the recurrent candidate's bias).
  int64_t Gb() const { return c.kind == RnnCell::gru && c.reset_after ? 4 : c.gates; }
  bool lstm() const { return c.kind == RnnCell::lstm; }
  // oneDNN's outputs are in input order; Keras's go_backwards wants processing order.
  bool flip() const { return c.go_backwards && !c.output_in_input_order; }
  rnn_direction dir() const {
    return c.go_backwards ? rnn_direction::unidirectional_right2left
                          : rnn_direction::unidirectional_left2right;
  }
};

memory::desc f32(memory::dims d, tag t) { return memory::desc(d, dt::f32, t); }

// The plain (user) layouts, and "any" for the weights the primitive lays out itself.
struct Descs {
  memory::desc sl, st, wl, wi, wl_any, wi_any, b;
};

memory::desc typed(const Geo& g, memory::dims d, tag t) { return memory::desc(d, g.type, t); }

Descs descs_of(const Geo& g) {
  Descs d;
  d.sl = typed(g, {g.T, g.N, g.F}, tag::ntc);
  d.st = typed(g, {1, 1, g.N, g.H}, tag::ldnc);
  d.wl = typed(g, {1, 1, g.F, g.G(), g.H}, tag::ldigo);
  d.wi = typed(g, {1, 1, g.H, g.G(), g.H}, tag::ldigo);
  d.wl_any = typed(g, {1, 1, g.F, g.G(), g.H}, tag::any);
  d.wi_any = typed(g, {1, 1, g.H, g.G(), g.H}, tag::any);
  d.b = f32({1, 1, g.Gb(), g.H}, tag::ldgo);
  return d;
}

memory::desc layer_out(const Geo& g) { return typed(g, {g.T, g.N, g.H}, tag::ntc); }

// The forward and (training) backward primitive descriptors of the node's cell.
struct Pds {
  dnnl::rnn_primitive_desc_base fwd, bwd;
};

template <class Fwd, class Bwd, class... Extra>
Pds make_pds(const Geo& g, const Descs& d, bool train, Extra... extra) {
  const memory::desc y = layer_out(g), none;
  const auto attr = user_scratchpad_attr();
  const prop_kind pk = train ? prop_kind::forward_training : prop_kind::forward_inference;
  const memory::desc& c = g.lstm() ? d.st : none;
  using FD = typename Fwd::desc;
  using BD = typename Bwd::desc;
  Pds p;
  auto fdesc = [&] {
    if constexpr (std::is_same_v<Fwd, dnnl::lstm_forward>)
      return FD(pk, g.dir(), d.sl, d.st, c, d.wl_any, d.wi_any, d.b, y, d.st, c);
    else
      return FD(pk, extra..., g.dir(), d.sl, d.st, d.wl_any, d.wi_any, d.b, y, d.st);
  };
  typename Fwd::primitive_desc f(fdesc(), attr, engine());
  p.fwd = f;
  if (!train) return p;
  auto bdesc = [&] {
    if constexpr (std::is_same_v<Fwd, dnnl::lstm_forward>)
      return BD(prop_kind::backward, g.dir(), d.sl, d.st, c, d.wl_any, d.wi_any, d.b, y, d.st, c,
                d.sl, d.st, c, d.wl_any, d.wi_any, d.b, y, d.st, c);
    else
      return BD(prop_kind::backward, extra..., g.dir(), d.sl, d.st, d.wl_any, d.wi_any, d.b, y,
                d.st, d.sl, d.st, d.wl_any, d.wi_any, d.b, y, d.st);
  };
  typename Bwd::primitive_desc b(bdesc(), attr, engine(), f);
  p.bwd = b;
  return p;
}

Pds pds_of(const Geo& g, const Descs& d, bool train) {
  if (g.lstm()) return make_pds<dnnl::lstm_forward, dnnl::lstm_backward>(g, d, train);
  if (g.c.kind == RnnCell::gru && g.c.reset_after)
    return make_pds<dnnl::lbr_gru_forward, dnnl::lbr_gru_backward>(g, d, train);
  if (g.c.kind == RnnCell::gru) return make_pds<dnnl::gru_forward, dnnl::gru_backward>(g, d, train);
  const auto act = g.c.relu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_tanh;
  return make_pds<dnnl::vanilla_rnn_forward, dnnl::vanilla_rnn_backward>(g, d, train, act);
}

// y[n, T - 1 - t] = x[n, t] for (N, T, C) tensors of `elem`-byte elements.
void flip_time(const void* xv, void* yv, int64_t N, int64_t T, int64_t C, size_t elem) {
  const char* x = static_cast<const char*>(xv);
  char* y = static_cast<char*>(yv);
  const size_t row = elem * size_t(C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(y + size_t(n * T + T - 1 - t) * row, x + size_t(n * T + t) * row, row);
}

// Element i of a float tensor (f32 or bf16) / written as one.
float get(const Tensor& t, int64_t i) {
  return t.dtype() == DType::bf16 ? bf16_to_f32(t.data<bf16>()[i]) : t.data<float>()[i];
}
void put(Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::bf16)
    t.data<bf16>()[i] = f32_to_bf16(v);
  else
    t.data<float>()[i] = v;
}

memory bare(const memory::desc& d) { return memory(d, engine(), DNNL_MEMORY_NONE); }

class DnnlRnn final : public Kernel {
 public:
  DnnlRnn(const Geo& g, bool train);
  size_t workspace_bytes() const override { return plan_.bytes; }
  void run(const KernelArgs& a) override;
  std::string algorithm() const override {
    return std::string("oneDNN RNN primitive, ") + (g_.type == dt::bf16 ? "bf16" : "f32");
  }

 private:
  void init_forward(const Descs& d);
  void init_backward(const Descs& d);
  void fill_bias(const Tensor& b, char* ws) const;
  void write_bias_grad(const char* ws, Tensor& db) const;
  void run_forward(const KernelArgs& a, int first, char* ws);
  void run_backward(const KernelArgs& a, int first, char* ws);
  Geo g_;
  bool train_;
  Pds pds_;
  WsPlan plan_;
  Scratch scratch_;
  Exec fwd_, bwd_;
  Arg wl_, wi_, bwl_, bwi_, dwl_, dwi_;
  memory sl_, si_, sic_, b_, dl_, di_, dic_, work_;
  memory dsl_, dsi_, dsic_, db_, ddl_, ddi_, ddic_;
  size_t b_off_ = 0, y_off_ = 0, h_off_ = 0, c_off_ = 0, work_off_ = 0, db_off_ = 0, dy_off_ = 0;
};

DnnlRnn::DnnlRnn(const Geo& g, bool train) : g_(g), train_(train) {
  const Descs d = descs_of(g_);
  pds_ = pds_of(g_, d, train_);
  init_forward(d);
  if (train_) init_backward(d);
  scratch_.bytes = std::max(scratch_.bytes, pds_.fwd.scratchpad_desc().get_size());
  if (train_) scratch_.bytes = std::max(scratch_.bytes, pds_.bwd.scratchpad_desc().get_size());
  scratch_.init();
  plan_.bytes += scratch_.aligned();  // the scratchpad sits after the planned buffers
  for (Arg* w : {&wl_, &wi_, &bwl_, &bwi_, &dwl_, &dwi_}) w->add_scratch(scratch_.mem);
  fwd_.arg(DNNL_ARG_SCRATCHPAD, scratch_.mem);  // the scratchpad exists only now
  if (train_) bwd_.arg(DNNL_ARG_SCRATCHPAD, scratch_.mem);
}

void DnnlRnn::init_forward(const Descs& d) {
  const auto& f = pds_.fwd;
  wl_.init(d.wl, f.weights_layer_desc(), false, plan_, &scratch_.bytes);
  wi_.init(d.wi, f.weights_iter_desc(), false, plan_, &scratch_.bytes);
  sl_ = bare(d.sl), si_ = bare(d.st), b_ = bare(d.b), dl_ = bare(layer_out(g_));
  di_ = bare(d.st);
  b_off_ = plan_.take(d.b.get_size());
  if (g_.flip() || train_) y_off_ = plan_.take(layer_out(g_).get_size());
  if (train_) h_off_ = plan_.take(d.st.get_size());
  fwd_.prim = dnnl::primitive(pds_.fwd);
  fwd_.arg(DNNL_ARG_SRC_LAYER, sl_);
  fwd_.arg(DNNL_ARG_SRC_ITER, si_);
  fwd_.arg(DNNL_ARG_WEIGHTS_LAYER, wl_.prim);
  fwd_.arg(DNNL_ARG_WEIGHTS_ITER, wi_.prim);
  fwd_.arg(DNNL_ARG_BIAS, b_);
  fwd_.arg(DNNL_ARG_DST_LAYER, dl_);
  fwd_.arg(DNNL_ARG_DST_ITER, di_);
  if (g_.lstm()) {
    sic_ = bare(d.st), dic_ = bare(d.st);
    if (train_) c_off_ = plan_.take(d.st.get_size());
    fwd_.arg(DNNL_ARG_SRC_ITER_C, sic_);
    fwd_.arg(DNNL_ARG_DST_ITER_C, dic_);
  }
  if (train_) {
    work_ = bare(pds_.fwd.workspace_desc());
    work_off_ = plan_.take(pds_.fwd.workspace_desc().get_size());
    fwd_.arg(DNNL_ARG_WORKSPACE, work_);
  }
}

void DnnlRnn::init_backward(const Descs& d) {
  const auto& b = pds_.bwd;
  bwl_.init(d.wl, b.weights_layer_desc(), false, plan_, &scratch_.bytes);
  bwi_.init(d.wi, b.weights_iter_desc(), false, plan_, &scratch_.bytes);
  dwl_.init(d.wl, b.diff_weights_layer_desc(), true, plan_, &scratch_.bytes);
  dwi_.init(d.wi, b.diff_weights_iter_desc(), true, plan_, &scratch_.bytes);
  dsl_ = bare(d.sl), dsi_ = bare(d.st), db_ = bare(d.b), ddl_ = bare(layer_out(g_));
  ddi_ = bare(d.st);
  db_off_ = plan_.take(d.b.get_size());
  if (g_.flip()) dy_off_ = plan_.take(layer_out(g_).get_size());
  bwd_.prim = dnnl::primitive(b);
  bwd_.arg(DNNL_ARG_SRC_LAYER, sl_);
  bwd_.arg(DNNL_ARG_SRC_ITER, si_);
  bwd_.arg(DNNL_ARG_WEIGHTS_LAYER, bwl_.prim);
  bwd_.arg(DNNL_ARG_WEIGHTS_ITER, bwi_.prim);
  bwd_.arg(DNNL_ARG_BIAS, b_);
  bwd_.arg(DNNL_ARG_DST_LAYER, dl_);
  bwd_.arg(DNNL_ARG_DST_ITER, di_);
  bwd_.arg(DNNL_ARG_WORKSPACE, work_);
  bwd_.arg(DNNL_ARG_DIFF_SRC_LAYER, dsl_);
  bwd_.arg(DNNL_ARG_DIFF_SRC_ITER, dsi_);
  bwd_.arg(DNNL_ARG_DIFF_WEIGHTS_LAYER, dwl_.prim);
  bwd_.arg(DNNL_ARG_DIFF_WEIGHTS_ITER, dwi_.prim);
  bwd_.arg(DNNL_ARG_DIFF_BIAS, db_);
  bwd_.arg(DNNL_ARG_DIFF_DST_LAYER, ddl_);
  bwd_.arg(DNNL_ARG_DIFF_DST_ITER, ddi_);
  if (g_.lstm()) {
    dsic_ = bare(d.st), ddic_ = bare(d.st);
    bwd_.arg(DNNL_ARG_SRC_ITER_C, sic_);
    bwd_.arg(DNNL_ARG_DST_ITER_C, dic_);
    bwd_.arg(DNNL_ARG_DIFF_SRC_ITER_C, dsic_);
    bwd_.arg(DNNL_ARG_DIFF_DST_ITER_C, ddic_);
  }
}

// Keras's bias -> oneDNN's: the same (G, H), or for reset_after (2, 3H) -> lbr_gru's
// (z0 + z1, r0 + r1, h0, h1).
void DnnlRnn::fill_bias(const Tensor& b, char* ws) const {
  float* o = reinterpret_cast<float*>(ws + b_off_);
  const int64_t H = g_.H, GH = g_.G() * H;
  if (g_.Gb() == g_.G()) {
    for (int64_t k = 0; k < GH; ++k) o[k] = get(b, k);
    return;
  }
  for (int64_t k = 0; k < 2 * H; ++k) o[k] = get(b, k) + get(b, GH + k);
  for (int64_t k = 0; k < H; ++k)
    o[2 * H + k] = get(b, 2 * H + k), o[3 * H + k] = get(b, GH + 2 * H + k);
}

void DnnlRnn::write_bias_grad(const char* ws, Tensor& db) const {
  const float* d = reinterpret_cast<const float*>(ws + db_off_);
  const int64_t H = g_.H, GH = g_.G() * H;
  if (g_.Gb() == g_.G()) {
    for (int64_t k = 0; k < GH; ++k) put(db, k, d[k]);
    return;
  }
  for (int64_t k = 0; k < 2 * H; ++k) put(db, k, d[k]), put(db, GH + k, d[k]);
  for (int64_t k = 0; k < H; ++k)
    put(db, 2 * H + k, d[2 * H + k]), put(db, GH + 2 * H + k, d[3 * H + k]);
}

// Forward inputs from input `first` (x, kernel, recurrent_kernel, bias, h0[, c0]).
void DnnlRnn::run_forward(const KernelArgs& a, int first, char* ws) {
  fill_bias(a.in(first + 3), ws);
  b_.set_data_handle(ws + b_off_);
  wl_.bind(a.in(first + 1).raw(), ws);
  wi_.bind(a.in(first + 2).raw(), ws);
  wl_.before();
  wi_.before();
  sl_.set_data_handle(a.in(first).raw());
  si_.set_data_handle(a.in(first + 4).raw());
  if (g_.lstm()) sic_.set_data_handle(a.in(first + 5).raw());
  const bool own_y = train_ || g_.flip();
  dl_.set_data_handle(own_y ? ws + y_off_ : a.out(0).raw());
  di_.set_data_handle(train_ ? ws + h_off_ : a.out(1).raw());
  if (g_.lstm()) dic_.set_data_handle(train_ ? ws + c_off_ : a.out(2).raw());
  if (train_) work_.set_data_handle(ws + work_off_);
  fwd_.run();
  if (!train_ && g_.flip()) flip_time(ws + y_off_, a.out(0).raw(), g_.N, g_.T, g_.H, g_.elem());
}

// The gradient op: (dy, dh[, dc], forward inputs) -> (dx, dW, dU, db, dh0[, dc0]).
void DnnlRnn::run_backward(const KernelArgs& a, int first, char* ws) {
  bwl_.bind(a.in(first + 1).raw(), ws);
  bwi_.bind(a.in(first + 2).raw(), ws);
  bwl_.before();
  bwi_.before();
  dwl_.bind(a.out(1).raw(), ws);
  dwi_.bind(a.out(2).raw(), ws);
  // oneDNN accumulates into the weight and bias gradients: start them at zero.
  for (const Arg* w : {&dwl_, &dwi_})
    std::memset(w->prim.get_data_handle(), 0, w->prim.get_desc().get_size());
  std::memset(ws + db_off_, 0, pds_.bwd.diff_bias_desc().get_size());
  db_.set_data_handle(ws + db_off_);
  if (g_.flip()) {
    flip_time(a.in(0).raw(), ws + dy_off_, g_.N, g_.T, g_.H, g_.elem());
    ddl_.set_data_handle(ws + dy_off_);
  } else {
    ddl_.set_data_handle(a.in(0).raw());
  }
  ddi_.set_data_handle(a.in(1).raw());
  dsl_.set_data_handle(a.out(0).raw());
  dsi_.set_data_handle(a.out(4).raw());
  if (g_.lstm()) {
    ddic_.set_data_handle(a.in(2).raw());
    dsic_.set_data_handle(a.out(5).raw());
  }
  bwd_.run();
  dwl_.after();
  dwi_.after();
  write_bias_grad(ws, a.out(3));
}

void DnnlRnn::run(const KernelArgs& a) {
  char* ws = static_cast<char*>(a.workspace);
  scratch_.bind(ws + plan_.bytes - scratch_.aligned());
  const int first = train_ ? 1 + g_.c.states : 0;
  run_forward(a, first, ws);
  if (train_) run_backward(a, first, ws);
}

// Why a node cannot run on oneDNN's primitives ("" when it can).
std::string not_dnnl(const RnnCell& c) {
  if (c.masked)
    return "a Keras mask skips steps per sample, which oneDNN's RNN primitives cannot: the "
           "reference loop runs it";
  if (c.recurrent_dropout)
    return "recurrent dropout multiplies the state fed back, which oneDNN's RNN primitives "
           "cannot: the reference loop runs it";
  return "";
}

// Every float input and output of the node is `t` (the mask is absent on this path).
bool all_of_type(const Node& n, const std::vector<TensorType>& in, DType t) {
  for (const auto& x : in)
    if (x.dtype != t) return false;
  for (const auto& o : n.outputs)
    if (o.dtype != t) return false;
  return true;
}

KernelFactory rnn_factory(bool train, bool allow_bf16) {
  return [=](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    const RnnCell c = ops::rnn_cell(n);
    if (const std::string why = not_dnnl(c); !why.empty()) return reference_fallback(n, in, why);
    const int first = train ? 1 + c.states : 0;
    Geo g{c, in[first].shape[0], in[first].shape[1], in[first].shape[2],
          in[first + 1].shape[1] / c.gates};
    const KernelFactory as_f32 = rnn_factory(train, false);
    if (!all_of_type(n, in, DType::f32)) {
      // bf16 where oneDNN has a bf16 RNN primitive for this cell on this CPU (asked, not
      // assumed); else the f32 primitive between conversions.
      if (!allow_bf16 || !all_of_type(n, in, DType::bf16)) return bf16_via_f32(n, in, as_f32);
      g.type = dt::bf16;
      try {
        return std::make_unique<DnnlRnn>(g, train);
      } catch (const dnnl::error&) {
        return bf16_via_f32(n, in, as_f32);
      }
    }
    try {
      return std::make_unique<DnnlRnn>(g, train);
    } catch (const dnnl::error& e) {
      return reference_fallback(n, in,
                                std::string("oneDNN has no RNN primitive for it: ") + e.what());
    }
  };
}

LOCKSTEP_REGISTER(cpu_rnn_kernels) {
  auto& R = OpRegistry::get();
  for (OpId id : {op::lstm, op::gru, op::simple_rnn})
    R.add_kernel(id, "cpu", rnn_factory(false, true), /*takes_bf16=*/true);
  for (OpId id : {op::lstm_grad, op::gru_grad, op::simple_rnn_grad})
    R.add_kernel(id, "cpu", rnn_factory(true, true), /*takes_bf16=*/true);
}

}  // namespace
}  // namespace lockstep::cpu
