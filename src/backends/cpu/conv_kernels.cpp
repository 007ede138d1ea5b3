// cpu backend: conv2d forward (fused bias + relu / relu6 / swish post-op), backward-data and
// backward-weights on oneDNN. Primitives and reorders are created once per node; run() only
// rebinds pointers.
//
// Algorithm: float32 3x3 stride-1 convolutions with enough channels and positions run as
// Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3), forward and both backward passes; everything
// else (bfloat16, strided, 1x1, grouped, few channels) runs the direct algorithm. A 4x4 output
// tile takes 6x6 = 36 multiplies instead of 16 x 9 = 144 (plus the tile transforms). On this
// project's 2-core AVX-512 machine the primitive alone runs the reference CNN's 32->64 conv
// (batch 128) 1.8-2.4x faster than direct. It works in blocked layouts (nChw16c activations,
// blocked weights): where the layout pass (plan_layouts) has not kept an activation blocked, the
// Args reorder it in and out of the workspace around the primitive. It rounds differently from
// the direct algorithm (up to ~1.4e-6 of a tensor's largest value on unit-scale data,
// tests/graph/conv_algorithm_test.cpp).
// config::set_conv_algorithm(kDirect) or LOCKSTEP_CONV_ALGORITHM=direct turns it off.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/env.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialised variable),
// which -Wmaybe-uninitialized reports once swish_span's are inlined here (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backends/cpu/conv_chain.h"
#include "backends/cpu/depthwise_kernels.h"
#include "backends/cpu/dnnl_common.h"
#include "backends/cpu/vec_math.h"
#include "lockstep/core/config.h"
#include "ops/internal/kernel_util.h"
#include "ops/internal/nn_geometry.h"

namespace lockstep::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using ops::ConvGeom;

// Activation layout the convs ask for: "nhwc" (user layout, no reorders) or "any" (let oneDNN
// choose, reorder in and out). Overridable for experiments with LOCKSTEP_CONV_ACT.
bool act_any() {
  static const bool any = [] { return env::text_or_empty(env::conv_act) == "any"; }();
  return any;
}

memory::desc with_any(const memory::desc& md) {
  return memory::desc(md.dims(), md.data_type(), tag::any);
}

struct Mds {
  memory::desc x, w, b, y;
  memory::dims strides, dil, pl, pr;
  memory::desc act(const memory::desc& md) const { return act_any() ? with_any(md) : md; }
};

// Element types of a conv's tensors: all f32, or bf16 activations and weights (mixed precision;
// the bias may stay f32). And the layouts of x and y in memory: nhwc, or nChw16c where the
// layout pass (plan_layouts in src/backends/cpu/layouts.cpp) keeps them blocked.
struct ConvTypes {
  dt x = dt::f32, w = dt::f32, y = dt::f32, b = dt::f32;
  bool x_blocked = false, y_blocked = false;
};

bool blocked(const Node& n, const char* attr) { return attr_s(n, attr) == "nChw16c"; }

// x and y blocked where the layout pass says so (float32 only: the pass blocks nothing else).
void set_layouts(const Node& n, ConvTypes& t) {
  t.x_blocked = blocked(n, "src_layout");
  t.y_blocked = blocked(n, "dst_layout");
  LS_CHECK(!(t.x_blocked || t.y_blocked) || (t.x == dt::f32 && t.y == dt::f32), n.op, " '", n.name,
           "': a blocked (nChw16c) tensor must be float32");
}

Mds user_mds(const ConvGeom& g, const ConvTypes& t) {
  Mds m;
  m.x = memory::desc(dims4(g.N, g.C, g.H, g.W), t.x, t.x_blocked ? tag::nChw16c : tag::nhwc);
  m.y = memory::desc(dims4(g.N, g.O, g.OH, g.OW), t.y, t.y_blocked ? tag::nChw16c : tag::nhwc);
  if (g.G == 1)
    m.w = memory::desc(dims4(g.O, g.C, g.KH, g.KW), t.w, tag::hwio);
  else
    m.w = memory::desc({g.G, g.Og(), g.Cg(), g.KH, g.KW}, t.w, tag::hwigo);
  m.b = memory::desc({g.O}, t.b, tag::a);
  m.strides = {g.SH, g.SW};
  m.dil = {g.DH - 1, g.DW - 1};
  m.pl = {g.PT, g.PL};
  m.pr = {g.PB, g.PR};
  return m;
}

// Whether this conv takes the Winograd path (see the top of the file). Positions below 512
// (e.g. one 8x8 image) run faster direct; so do convs with fewer than 16 channels in or out.
bool winograd_eligible(const ConvGeom& g, const ConvTypes& t) {
  using config::ConvAlgorithm;
  const ConvAlgorithm a = config::conv_algorithm();
  if (a == ConvAlgorithm::kDirect) return false;
  const bool f32 = t.x == dt::f32 && t.w == dt::f32 && t.y == dt::f32 && t.b == dt::f32;
  const bool shape = g.G == 1 && g.KH == 3 && g.KW == 3 && g.SH == 1 && g.SW == 1 && g.DH == 1 &&
                     g.DW == 1 && g.PT <= 1 && g.PB <= 1 && g.PL <= 1 && g.PR <= 1;
  if (!f32 || !shape) return false;
  if (a == ConvAlgorithm::kWinograd) return true;
  return g.C >= 16 && g.O >= 16 && g.N * g.OH * g.OW >= 512;
}

// Winograd primitives are tried first where eligible; a shape or post-op oneDNN's Winograd
// does not take (it throws) falls back to direct.
template <class MakePd>
auto with_algorithm(const ConvGeom& g, const ConvTypes& t, const Mds& m, MakePd make) {
  if (winograd_eligible(g, t)) {
    try {
      auto pd = make(algorithm::convolution_winograd, with_any(m.x), with_any(m.y));
      if (std::string(pd.impl_info_str()).find("wino") != std::string::npos) return pd;
    } catch (const dnnl::error&) {
    }
  }
  // Direct: a blocked (nChw16c) x or y lets oneDNN choose its layouts ("any", usually the
  // same blocked one, so no reorder); should that pick a reference implementation (it does for
  // one input channel) the conv asks for NHWC like an unblocked one, and the Args reorder.
  auto nhwc = [](const memory::desc& md) {
    return md.data_type() == dt::undef ? md : memory::desc(md.dims(), md.data_type(), tag::nhwc);
  };
  if (t.x_blocked || t.y_blocked) {
    auto pd = make(algorithm::convolution_direct, with_any(m.x), with_any(m.y));
    const std::string impl = pd.impl_info_str();
    if (impl.find("ref") == std::string::npos && impl.find("gemm") == std::string::npos) return pd;
  }
  return make(algorithm::convolution_direct, m.act(nhwc(m.x)), m.act(nhwc(m.y)));
}

dnnl::convolution_forward::primitive_desc fwd_pd(const ConvGeom& g, const ConvTypes& t,
                                                 const Mds& m, bool bias,
                                                 const dnnl::primitive_attr& attr) {
  return with_algorithm(
      g, t, m, [&](dnnl::algorithm alg, const memory::desc& x, const memory::desc& y) {
        auto w = with_any(m.w);
        auto d = bias ? dnnl::convolution_forward::desc(prop_kind::forward_training, alg, x, w, m.b,
                                                        y, m.strides, m.dil, m.pl, m.pr)
                      : dnnl::convolution_forward::desc(prop_kind::forward_training, alg, x, w, y,
                                                        m.strides, m.dil, m.pl, m.pr);
        return dnnl::convolution_forward::primitive_desc(d, attr, engine());
      });
}

// A conv's fused activation as an eltwise post-op (none for linear).
void append_activation(dnnl::post_ops& po, const ConvGeom& g) {
  switch (g.act) {
    case FusedActivation::linear:
      return;
    case FusedActivation::relu:
      return po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
    case FusedActivation::relu6:
      return po.append_eltwise(1.f, algorithm::eltwise_clip, 0.f, 6.f);
    case FusedActivation::sigmoid:
      return po.append_eltwise(1.f, algorithm::eltwise_logistic, 0.f, 0.f);
    case FusedActivation::swish:
      return po.append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f);
    case FusedActivation::gelu:
      return po.append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f);
  }
}

// conv2d_pointwise_depthwise's primitive: the 1x1 conv with its activation, then oneDNN's
// depthwise post-op (bias and its own activation after it). m: the 1x1 conv's descriptors (the
// primitive's dst_desc() is then the depthwise conv's output). x and y in the layouts oneDNN
// chooses (its fused kernel is jit_1x1, on nChw16c); the Args reorder from the node's.
dnnl::convolution_forward::primitive_desc pointwise_depthwise_pd(const ops::PointwiseDepthwise& g,
                                                                 const Mds& m) {
  dnnl::post_ops po;
  append_activation(po, g.pw);
  po.append_dw(dt::f32, dt::f32, dt::f32, g.dw.KH, g.dw.SH, g.dw.PT, 0, {});
  append_activation(po, g.dw);
  auto attr = user_scratchpad_attr();
  attr.set_post_ops(po);
  dnnl::convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct,
                                    with_any(m.x), with_any(m.w), m.b, with_any(m.y), m.strides,
                                    m.dil, m.pl, m.pr);
  return dnnl::convolution_forward::primitive_desc(d, attr, engine());
}

// Common shape of the conv kernels: three tensor Args, one primitive, one scratchpad.
class ConvKernel : public Kernel {
 public:
  size_t workspace_bytes() const override { return scratch_.aligned() + ws_.bytes; }
  std::string algorithm() const override { return winograd_ ? "winograd" : ""; }
  const std::string& impl() const { return impl_; }  // oneDNN's implementation name
  void run(const KernelArgs& a) override {
    char* ws = static_cast<char*>(a.workspace);
    scratch_.bind(ws);
    char* bufs = ws + scratch_.aligned();
    for (int i = 0; i < n_args_; ++i) {
      if (kept_[i].empty()) {
        args_[i].bind(a.in(i).raw(), bufs);
        args_[i].before();
        continue;
      }
      // A constant input (inference or frozen weights): reordered once per constants version
      // into this kernel's own buffer, not every run.
      args_[i].user.set_data_handle(a.in(i).raw());
      args_[i].prim.set_data_handle(kept_data(i));
      if (*a.constants_version != kept_version_[i]) {
        args_[i].reorder.run();
        kept_version_[i] = *a.constants_version;
      }
    }
    out_.bind(a.out(0).raw(), bufs);
    exec_.run();
    out_.after();
  }
  void set_constant_inputs(uint32_t mask) override {
    for (int i = 0; i < n_args_; ++i)
      if ((mask >> i & 1) && args_[i].reordered && !args_[i].output)
        kept_[i].resize(args_[i].prim.get_desc().get_size() + 64);
  }

 protected:
  // Call after the Args and exec_ are set up: creates the scratchpad and wires it.
  template <class Pd>
  void finish(const Pd& pd) {
    impl_ = pd.impl_info_str();
    winograd_ = impl_.find("wino") != std::string::npos;
    const memory::desc prim_scratch = pd.scratchpad_desc();
    scratch_.bytes = std::max(scratch_.bytes, prim_scratch.get_size());
    scratch_.init();
    for (int i = 0; i < n_args_; ++i) args_[i].add_scratch(scratch_.mem);
    out_.add_scratch(scratch_.mem);
    exec_.arg(DNNL_ARG_SCRATCHPAD, scratch_.mem);
  }
  static constexpr int kMaxArgs = 5;  // conv2d_pointwise_depthwise's
  Arg args_[kMaxArgs], out_;
  int n_args_ = 0;
  // set_constant_inputs: the reordered copies of constant inputs, and the version they hold.
  std::vector<char> kept_[kMaxArgs];
  uint64_t kept_version_[kMaxArgs] = {};  // a program's versions start at 1
  void* kept_data(int i) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(kept_[i].data());
    return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
  }
  Exec exec_;
  WsPlan ws_;
  Scratch scratch_;
  bool winograd_ = false;
  std::string impl_;
};

// A fused swish runs as Lockstep's pass over the conv's output (swish_span), not as oneDNN's
// eltwise post-op: on this project's Zen 4 that post-op (oneDNN 2.6) cost ~41 cycles per 16
// floats, the pass ~14 plus a read and write of the output. EfficientNetB0's 96x96 predict, batch
// 32: 38.5 -> 32.7 ms per batch of kernel time (LOCKSTEP_PROFILE=1), 796-853 -> 921-963 img/s.
bool own_swish(const ConvGeom& g, const ConvTypes& t) {
  return g.act == FusedActivation::swish && !conv_swish_by_onednn() &&
         (t.y == dt::f32 || t.y == dt::bf16);
}

// y = swish(y) in place over the conv's output, in pieces over the threads.
void swish_in_place(void* y, int64_t n, dt type) {
  constexpr int64_t kPiece = int64_t(1) << 14;
  const int64_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t i = p * kPiece, len = std::min(kPiece, n - i);
    if (type == dt::f32) {
      float* f = static_cast<float*>(y) + i;
      swish_span(f, f, len);
    } else {
      bf16* h = static_cast<bf16*>(y) + i;
      swish_span(h, h, len);
    }
  }
}

// A fused relu / relu6 runs as Lockstep's pass over the conv's output too: oneDNN's eltwise_relu
// (alpha 0) and eltwise_clip post-ops turn NaN into 0 (vmaxps returns its second operand when
// one is NaN), which hid a NaN input from fit's NaN stop; TensorFlow's and PyTorch's relu keep
// it. x <= 0 ? 0 : x (and x >= 6 ? 6 : x) keeps NaN, as the elementwise relu does.
bool own_relu(const ConvGeom& g, const ConvTypes& t) {
  return (g.act == FusedActivation::relu || g.act == FusedActivation::relu6) &&
         (t.y == dt::f32 || t.y == dt::bf16);
}

template <class T>
void relu_span(T* p, int64_t n, bool cap) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = ld(p[i]);
    if (v <= 0.f)
      p[i] = st<T>(0.f);
    else if (cap && v >= 6.f)
      p[i] = st<T>(6.f);
  }
}

// y = relu(y) (cap: relu6) in place over the conv's output, in pieces over the threads.
void relu_in_place(void* y, int64_t n, dt type, bool cap) {
  constexpr int64_t kPiece = int64_t(1) << 14;
  const int64_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t i = p * kPiece, len = std::min(kPiece, n - i);
    if (type == dt::f32)
      relu_span(static_cast<float*>(y) + i, len, cap);
    else
      relu_span(static_cast<bf16*>(y) + i, len, cap);
  }
}

class ConvFwd final : public ConvKernel {
 public:
  ConvFwd(const ConvGeom& geom, const ConvTypes& t)
      : swish_(own_swish(geom, t)),
        relu_(own_relu(geom, t)),
        cap_(geom.act == FusedActivation::relu6),
        y_type_(t.y) {
    ConvGeom g = geom;
    if (swish_ || relu_) g.act = FusedActivation::linear;
    y_numel_ = g.N * g.OH * g.OW * g.O;
    Mds m = user_mds(g, t);
    auto attr = user_scratchpad_attr();
    dnnl::post_ops po;
    append_activation(po, g);
    if (po.len() > 0) attr.set_post_ops(po);
    auto pd = fwd_pd(g, t, m, g.fused_bias, attr);
    n_args_ = g.fused_bias ? 3 : 2;
    args_[0].init(m.x, pd.src_desc(), false, ws_, &scratch_.bytes);
    args_[1].init(m.w, pd.weights_desc(), false, ws_, &scratch_.bytes);
    if (g.fused_bias) args_[2].init(m.b, pd.bias_desc(), false, ws_, &scratch_.bytes);
    out_.init(m.y, pd.dst_desc(), true, ws_, &scratch_.bytes);
    exec_.prim = dnnl::convolution_forward(pd);
    exec_.arg(DNNL_ARG_SRC, args_[0].prim);
    exec_.arg(DNNL_ARG_WEIGHTS, args_[1].prim);
    if (g.fused_bias) exec_.arg(DNNL_ARG_BIAS, args_[2].prim);
    exec_.arg(DNNL_ARG_DST, out_.prim);
    finish(pd);
  }
  void run(const KernelArgs& a) override {
    ConvKernel::run(a);
    if (swish_) swish_in_place(a.out(0).raw(), y_numel_, y_type_);
    if (relu_) relu_in_place(a.out(0).raw(), y_numel_, y_type_, cap_);
  }

 private:
  bool swish_, relu_, cap_;
  dt y_type_;
  int64_t y_numel_ = 0;
};

// NaN through the fused pair. oneDNN 2.6's eltwise post-ops for relu and relu6 (relu, clip and
// clip_v2 alike) turn NaN into 0, and the pair has no point between its two convs where a pass
// of Lockstep's could run (as ConvFwd's does). So after the pair, the outputs TensorFlow and
// PyTorch make NaN are made NaN here: a NaN anywhere in pixel p of x makes every channel of the
// 1x1 conv's output at p NaN, and so every output whose 3x3 window covers p; a NaN in channel o
// of w, b, wd or bd makes channel o NaN everywhere. One pass over x and the weights finds
// nothing in a run without NaN. (An infinity that the 1x1 conv turns into NaN, inf * 0, is not
// followed: it still reads as 0.)
class PairNaN {
 public:
  PairNaN(const ops::PointwiseDepthwise& g, const ConvTypes& t)
      : g_(g), x_blocked_(t.x_blocked), y_blocked_(t.y_blocked) {
    nan_channel_.resize(size_t(g.pw.O));
    nan_pixel_.resize(size_t(g.pw.H * g.pw.W));
  }
  static bool needed(const ops::PointwiseDepthwise& g) {
    auto eats = [](FusedActivation a) {
      return a == FusedActivation::relu || a == FusedActivation::relu6;
    };
    return eats(g.pw.act) || eats(g.dw.act);
  }
  void apply(const KernelArgs& a) {
    const int64_t M = g_.pw.O;
    bool any_channel = false;
    std::fill(nan_channel_.begin(), nan_channel_.end(), uint8_t(0));
    const float* w = a.in(1).data<float>();  // [1, 1, C, M]
    for (int64_t c = 0; c < g_.pw.C; ++c)
      for (int64_t o = 0; o < M; ++o)
        if (std::isnan(w[c * M + o])) nan_channel_[size_t(o)] = 1, any_channel = true;
    const float* b = a.in(2).data<float>();
    const float* wd = a.in(3).data<float>();  // [KH, KW, 1, M]
    const float* bd = a.in(4).data<float>();
    for (int64_t o = 0; o < M; ++o) {
      bool nan = std::isnan(b[o]) || std::isnan(bd[o]);
      for (int64_t k = 0; k < g_.dw.KH * g_.dw.KW; ++k) nan |= std::isnan(wd[k * M + o]);
      if (nan) nan_channel_[size_t(o)] = 1, any_channel = true;
    }
    const float* x = a.in(0).data<float>();
    const int64_t x_numel = a.in(0).numel();
    bool any_x = false;
    for (int64_t i = 0; i < x_numel; ++i) any_x |= x[i] != x[i];
    if (!any_x && !any_channel) return;
    float* y = a.out(0).data<float>();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const ops::ConvGeom& d = g_.dw;
    const int64_t HW = d.H * d.W, CB = (g_.pw.C + 15) / 16, MB = (M + 15) / 16;
    auto y_at = [&](int64_t n, int64_t oh, int64_t ow, int64_t o) -> float& {
      return y_blocked_ ? y[(((n * MB + o / 16) * d.OH + oh) * d.OW + ow) * 16 + o % 16]
                        : y[((n * d.OH + oh) * d.OW + ow) * M + o];
    };
    for (int64_t n = 0; n < d.N; ++n) {
      for (int64_t p = 0; p < HW; ++p) {
        bool found = false;
        if (x_blocked_)
          for (int64_t cb = 0; cb < CB && !found; ++cb)
            for (int64_t c = 0; c < 16; ++c)
              found |= std::isnan(x[((n * CB + cb) * HW + p) * 16 + c]);
        else
          for (int64_t c = 0; c < g_.pw.C; ++c) found |= std::isnan(x[(n * HW + p) * g_.pw.C + c]);
        nan_pixel_[size_t(p)] = found;
      }
      for (int64_t oh = 0; oh < d.OH; ++oh)
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          bool covered = false;
          for (int64_t kh = 0; kh < d.KH && !covered; ++kh)
            for (int64_t kw = 0; kw < d.KW && !covered; ++kw) {
              const int64_t h = oh * d.SH - d.PT + kh, w_ = ow * d.SW - d.PL + kw;
              covered =
                  h >= 0 && h < d.H && w_ >= 0 && w_ < d.W && nan_pixel_[size_t(h * d.W + w_)];
            }
          for (int64_t o = 0; o < M; ++o)
            if (covered || nan_channel_[size_t(o)]) y_at(n, oh, ow, o) = nan;
        }
    }
  }

 private:
  ops::PointwiseDepthwise g_;
  bool x_blocked_, y_blocked_;
  std::vector<uint8_t> nan_channel_, nan_pixel_;  // sized once: run() does not allocate
};

// x -> dw_conv(conv1x1(x)) in one primitive (the depthwise post-op): inputs x, w, b, wd, bd.
class PointwiseDepthwiseFwd final : public ConvKernel {
 public:
  void run(const KernelArgs& a) override {
    ConvKernel::run(a);
    if (nan_) nan_->apply(a);
  }
  PointwiseDepthwiseFwd(const ops::PointwiseDepthwise& g, const ConvTypes& t) {
    if (PairNaN::needed(g)) nan_.emplace(g, t);
    const Mds m = user_mds(g.pw, t), d = user_mds(g.dw, t);  // the pair's output is d.y
    auto pd = pointwise_depthwise_pd(g, m);
    n_args_ = 5;
    args_[0].init(m.x, pd.src_desc(), false, ws_, &scratch_.bytes);
    args_[1].init(m.w, pd.weights_desc(), false, ws_, &scratch_.bytes);
    args_[2].init(m.b, pd.bias_desc(), false, ws_, &scratch_.bytes);
    constexpr int kDwWeights = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS;
    constexpr int kDwBias = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS;
    args_[3].init(d.w, pd.query_md(dnnl::query::exec_arg_md, kDwWeights), false, ws_,
                  &scratch_.bytes);
    args_[4].init(d.b, pd.query_md(dnnl::query::exec_arg_md, kDwBias), false, ws_, &scratch_.bytes);
    out_.init(d.y, pd.dst_desc(), true, ws_, &scratch_.bytes);
    exec_.prim = dnnl::convolution_forward(pd);
    exec_.arg(DNNL_ARG_SRC, args_[0].prim);
    exec_.arg(DNNL_ARG_WEIGHTS, args_[1].prim);
    exec_.arg(DNNL_ARG_BIAS, args_[2].prim);
    exec_.arg(kDwWeights, args_[3].prim);
    exec_.arg(kDwBias, args_[4].prim);
    exec_.arg(DNNL_ARG_DST, out_.prim);
    finish(pd);
  }

 private:
  std::optional<PairNaN> nan_;
};

// (dy, w) -> dx
class ConvBwdData final : public ConvKernel {
 public:
  ConvBwdData(const ConvGeom& g, const ConvTypes& t) {
    Mds m = user_mds(g, t);
    auto pd = with_algorithm(
        g, t, m, [&](dnnl::algorithm alg, const memory::desc& x, const memory::desc& y) {
          dnnl::convolution_forward::desc fd(prop_kind::forward_training, alg, x, with_any(m.w), y,
                                             m.strides, m.dil, m.pl, m.pr);
          dnnl::convolution_forward::primitive_desc hint(fd, engine());
          dnnl::convolution_backward_data::desc d(alg, x, with_any(m.w), y, m.strides, m.dil, m.pl,
                                                  m.pr);
          return dnnl::convolution_backward_data::primitive_desc(d, user_scratchpad_attr(),
                                                                 engine(), hint);
        });
    n_args_ = 2;
    args_[0].init(m.y, pd.diff_dst_desc(), false, ws_, &scratch_.bytes);
    args_[1].init(m.w, pd.weights_desc(), false, ws_, &scratch_.bytes);
    out_.init(m.x, pd.diff_src_desc(), true, ws_, &scratch_.bytes);
    exec_.prim = dnnl::convolution_backward_data(pd);
    exec_.arg(DNNL_ARG_DIFF_DST, args_[0].prim);
    exec_.arg(DNNL_ARG_WEIGHTS, args_[1].prim);
    exec_.arg(DNNL_ARG_DIFF_SRC, out_.prim);
    finish(pd);
  }
};

// (dy, x) -> dw
class ConvBwdWeights final : public ConvKernel {
 public:
  ConvBwdWeights(const ConvGeom& g, const ConvTypes& t) {
    Mds m = user_mds(g, t);
    auto pd = with_algorithm(
        g, t, m, [&](dnnl::algorithm alg, const memory::desc& x, const memory::desc& y) {
          dnnl::convolution_forward::desc fd(prop_kind::forward_training, alg, x, with_any(m.w), y,
                                             m.strides, m.dil, m.pl, m.pr);
          dnnl::convolution_forward::primitive_desc hint(fd, engine());
          dnnl::convolution_backward_weights::desc d(alg, x, with_any(m.w), y, m.strides, m.dil,
                                                     m.pl, m.pr);
          return dnnl::convolution_backward_weights::primitive_desc(d, user_scratchpad_attr(),
                                                                    engine(), hint);
        });
    n_args_ = 2;
    args_[0].init(m.y, pd.diff_dst_desc(), false, ws_, &scratch_.bytes);
    args_[1].init(m.x, pd.src_desc(), false, ws_, &scratch_.bytes);
    out_.init(m.w, pd.diff_weights_desc(), true, ws_, &scratch_.bytes);
    exec_.prim = dnnl::convolution_backward_weights(pd);
    exec_.arg(DNNL_ARG_DIFF_DST, args_[0].prim);
    exec_.arg(DNNL_ARG_SRC, args_[1].prim);
    exec_.arg(DNNL_ARG_DIFF_WEIGHTS, out_.prim);
    finish(pd);
  }
};

// The three conv kernels take all-f32 or all-bf16 tensors (a forward bias may be either); any
// other mix runs the f32 kernel between conversions.
KernelFactory conv_fwd_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    if (!same_float_type({in[0], in[1], n.outputs[0]}))
      return bf16_via_f32(n, in, conv_fwd_factory());
    ConvTypes t{to_dt(in[0].dtype), to_dt(in[1].dtype), to_dt(n.outputs[0].dtype)};
    if (in.size() > 2) t.b = to_dt(in[2].dtype);
    set_layouts(n, t);
    return std::make_unique<ConvFwd>(ops::conv2d_geometry(in[0].shape, in[1].shape, n), t);
  };
}

KernelFactory pointwise_depthwise_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    ConvTypes t;
    set_layouts(n, t);
    const auto g = ops::pointwise_depthwise_geometry(in[0].shape, in[1].shape, in[3].shape, n);
    // The pass fuses only what oneDNN takes; a node built by hand may not be.
    if (!dw_post_op_geometry(g.dw) || pointwise_depthwise_impl(g).empty())
      return reference_fallback(n, in,
                                "oneDNN takes no 1x1 + depthwise pair of this geometry (its "
                                "depthwise post-op takes square filters, one stride, equal top "
                                "and left pads and the output ceil(input / stride))");
    return std::make_unique<PointwiseDepthwiseFwd>(g, t);
  };
}

KernelFactory conv_bwd_data_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    if (!same_float_type({in[0], in[1], n.outputs[0]}))
      return bf16_via_f32(n, in, conv_bwd_data_factory());
    ConvTypes t{to_dt(n.outputs[0].dtype), to_dt(in[1].dtype), to_dt(in[0].dtype)};
    set_layouts(n, t);
    Shape xs = ops::input_shape_attr(n, in[0].shape[0]);
    return std::make_unique<ConvBwdData>(ops::conv_geometry(xs, in[1].shape, n), t);
  };
}

KernelFactory conv_bwd_weights_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    if (!same_float_type({in[0], in[1], n.outputs[0]}))
      return bf16_via_f32(n, in, conv_bwd_weights_factory());
    ConvTypes t{to_dt(in[1].dtype), to_dt(n.outputs[0].dtype), to_dt(in[0].dtype)};
    set_layouts(n, t);
    Shape ws(attr_ints(n, "filter_shape"));
    const ConvGeom g = ops::conv_geometry(in[1].shape, ws, n);
    auto onednn = std::make_unique<ConvBwdWeights>(g, t);
    // oneDNN's depthwise kernel (jit_dw) takes 3x3 filters only; other depthwise filters run
    // Lockstep's (depthwise_kernels.cpp), 3-10x faster than oneDNN's grouped or gemm fallback.
    if (onednn->impl().find("jit_dw") == std::string::npos && !env::flag(env::depthwise_onednn))
      if (auto k = depthwise_backward_filter(g, in[1].dtype, in[0].dtype, n.outputs[0].dtype,
                                             t.x_blocked, t.y_blocked))
        return k;
    return onednn;
  };
}

LOCKSTEP_REGISTER(cpu_conv_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::conv2d, "cpu", conv_fwd_factory(), /*takes_bf16=*/true);
  R.add_kernel(op::conv2d_pointwise_depthwise, "cpu", pointwise_depthwise_factory());
  R.add_kernel(op::conv2d_backward_input, "cpu", conv_bwd_data_factory(), true);
  R.add_kernel(op::conv2d_backward_filter, "cpu", conv_bwd_weights_factory(), true);
}

}  // namespace

bool conv_swish_by_onednn() { return env::text_or_empty(env::conv_swish) == "onednn"; }

std::string pointwise_depthwise_impl(const ops::PointwiseDepthwise& g) {
  try {
    return pointwise_depthwise_pd(g, user_mds(g.pw, ConvTypes{})).impl_info_str();
  } catch (const dnnl::error&) {
    return {};
  }
}

}  // namespace lockstep::cpu
