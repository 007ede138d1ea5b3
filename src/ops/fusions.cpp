// The fusions whose fused forms the ops declare (conv2d's fused_bias, activation and pads,
// batch_norm_*'s activation and residual, max_pool2d_grad's activation, batch_norm_fold): the
// rewrites of ops/internal/fusions.h, which the kernel backends run (every kernel backend
// implements the fused forms). Activations are found by their declared roles (kFuseActivation
// and kFuseActivationGrad with OpDef::fused_as, taken where a producer declares them in
// takes_activations), never by op: declaring an activation fusable is what makes it fuse. The
// structural rewrites (bias, residual, batch-norm folds, pads) name their ops through the op ids.
#include "ops/internal/fusions.h"

#include <algorithm>

#include "graph/internal/passes.h"
#include "ops/internal/nn_geometry.h"
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

const OpDef& decl(const Node& n) { return OpRegistry::get().op(n.op); }

// Whether node n's attributes are all at their declared defaults (an activation fuses only in its
// plain form: gelu without approximate, say).
bool default_attrs(const Node& n) {
  const OpDef& d = decl(n);
  for (const auto& [key, value] : n.attrs.map()) {
    const AttrDecl* a = d.attr(key);
    if (!a || !a->default_value || !(*a->default_value == value)) return false;
  }
  return true;
}

// The fused activation node n computes (kFuseActivation, plain form), or linear.
FusedActivation activation_of(const Node& n) {
  const OpDef& d = decl(n);
  return (d.fusion & kFuseActivation) && default_attrs(n) ? d.fused_as : FusedActivation::linear;
}

// The fused activation whose gradient from its output node n computes (kFuseActivationGrad), or
// linear.
FusedActivation activation_grad_of(const Node& n) {
  const OpDef& d = decl(n);
  return (d.fusion & kFuseActivationGrad) && default_attrs(n) ? d.fused_as
                                                              : FusedActivation::linear;
}

// Whether producer p applies activation a (declared kFuseTakesActivation, a in its set), and
// applies none yet.
bool takes_activation(const Node& p, FusedActivation a) {
  const OpDef& d = decl(p);
  return a != FusedActivation::linear && (d.fusion & kFuseTakesActivation) &&
         holds(d.takes_activations, a) && attr_activation(p) == FusedActivation::linear;
}

// Whether gradient node p masks by activation a's derivative (kFuseTakesActivationGrad).
bool takes_activation_grad(const Node& p, FusedActivation a) {
  const OpDef& d = decl(p);
  return a != FusedActivation::linear && (d.fusion & kFuseTakesActivationGrad) &&
         holds(d.takes_activations, a) && attr_activation(p) == FusedActivation::linear;
}

void set_activation(Node& n, FusedActivation a) {
  n.attrs.set("activation", fused_activation_name(a));
}

// conv2d -> bias_add -> an activation the conv takes (relu), each the only reader of the one
// before, becomes one conv2d (fused_bias, activation): the bias and the activation ride on the
// conv's output pass.
void fuse_conv_bias(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  const auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  auto only_consumer = [&](int node) {
    const auto& c = cons[{node, 0}];
    return c.size() == 1 ? c[0] : -1;
  };
  for (int i : sched) {
    Node& conv = g.node(i);
    if (!(decl(conv).fusion & kFuseTakesBias) || attr_b(conv, "fused_bias") ||
        attr_activation(conv) != FusedActivation::linear || conv.outputs.size() != 1)
      continue;
    const int b = only_consumer(i);
    if (b < 0 || !(decl(g.node(b)).fusion & kFuseBias) || g.node(b).inputs[0] != Value{i, 0})
      continue;
    Node& bias = g.node(b);
    conv.inputs.push_back(bias.inputs[1]);
    conv.attrs.set("fused_bias", true);
    make_view(bias, Value{i, 0});
    std::string what = conv.op + "+bias";
    // Then an activation the conv takes that reads the bias output, its only reader.
    const int r = only_consumer(b);
    const FusedActivation act = r >= 0 ? activation_of(g.node(r)) : FusedActivation::linear;
    if (takes_activation(conv, act) && g.node(r).outputs[0] == conv.outputs[0]) {
      set_activation(conv, act);
      make_view(g.node(r), Value{b, 0});
      what += std::string("+") + fused_activation_name(act);
    }
    report.push_back("fused " + what + " '" + conv.name + "'");
  }
}

// batch_norm_train -> relu and batch_norm_train -> add(·, z) -> relu become one
// batch_norm_train (activation relu, residual z): one pass writes relu(bn(x) + z); the same for
// batch_norm_infer (inference and evaluation programs, z its 6th input); batch_norm_train ->
// relu6 becomes activation relu6. In the backward (fuse_batch_norm_grad), relu_grad(dy, y)
// (relu6_grad) -> batch_norm_train_grad becomes one batch_norm_train_grad that masks dy by
// y > 0 (0 < y < 6) itself; when the masked gradient has other consumers (the residual
// branch), the first fused gradient node also writes it (emit_dy, output 3).
void fuse_batch_norm(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  auto only_consumer = [&](int node) {
    const auto& c = cons[{node, 0}];
    return c.size() == 1 ? c[0] : -1;
  };
  for (int i : sched) {
    Node& bn = g.node(i);
    if ((bn.op != op::batch_norm_train && bn.op != op::batch_norm_infer) ||
        attr_activation(bn) != FusedActivation::linear || attr_b(bn, "residual"))
      continue;
    const std::string kind = bn.op == op::batch_norm_train ? "batch_norm" : "batch_norm_infer";
    const int j = only_consumer(i);
    if (j < 0) continue;
    Node& next = g.node(j);
    const TensorType& t = bn.outputs[0];
    // An activation the batch norm takes (relu; MobileNetV2's ReLU(max_value=6) in training:
    // in inference the batch norm folds into the conv, which takes the relu6).
    const FusedActivation act = activation_of(next);
    if (takes_activation(bn, act) && next.outputs[0] == t) {
      set_activation(bn, act);
      make_view(next, Value{i, 0});
      report.push_back("fused " + kind + "+" + fused_activation_name(act) + " '" + bn.name + "'");
      continue;
    }
    // A residual add, then relu (the one activation the fused residual form takes).
    if (!(decl(next).fusion & kFuseResidual) || next.inputs.size() != 2 || next.outputs[0] != t)
      continue;
    const Value z = next.inputs[0] == Value{i, 0} ? next.inputs[1] : next.inputs[0];
    if (g.type(z) != t || z == Value{i, 0}) continue;
    const int k = only_consumer(j);
    if (k < 0 || activation_of(g.node(k)) != FusedActivation::relu ||
        !takes_activation(bn, FusedActivation::relu) || g.node(k).outputs[0] != t)
      continue;
    if (reaches(g, {z}, i)) continue;
    bn.inputs.push_back(z);
    set_activation(bn, FusedActivation::relu);
    bn.attrs.set("residual", true);
    make_view(next, Value{i, 0});
    make_view(g.node(k), Value{i, 0});
    report.push_back("fused " + kind + "+add+relu '" + bn.name + "'");
  }
}

// The beta of the batch_norm_train that wrote y (through views) with activation `act` and no
// residual, from the same x, gamma and statistics gradient node bg reads; invalid otherwise.
// float32 only: a bfloat16 y was rounded on the way to memory, which a kernel running between
// conversions (the reference's) cannot see to recompute.
Value forward_beta(const Graph& g, Value y, const Node& bg, FusedActivation act) {
  if (g.type(y).dtype != DType::f32) return {};
  while (is_view(g.node(y.node))) y = g.node(y.node).inputs[0];
  const Node& bn = g.node(y.node);
  if (bn.op != op::batch_norm_train || y.index != 0 || attr_activation(bn) != act ||
      attr_b(bn, "residual") || bn.inputs[0] != bg.inputs[1] || bn.inputs[1] != bg.inputs[2] ||
      bg.inputs[3] != Value{y.node, 1} || bg.inputs[4] != Value{y.node, 2})
    return {};
  return bn.inputs[2];
}

// fuse_batch_norm's backward half: an activation's gradient from its output, relu_grad(dy, y)
// (kFuseActivationGrad: relu6_grad too) -> batch_norm_train_grad, which takes it, becomes one
// batch_norm_train_grad (activation relu / relu6, y its input 5); emit_dy where the masked
// gradient has other readers.
void fuse_batch_norm_grad(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    const FusedActivation act = activation_grad_of(g.node(i));
    if (act == FusedActivation::linear) continue;
    const char* act_name = fused_activation_name(act);
    const Value dy = g.node(i).inputs[0], y = g.node(i).inputs[1];
    const TensorType t = g.node(i).outputs[0];
    if (g.type(dy) != t || g.type(y) != t) continue;
    std::vector<int> fused, others;
    for (int k : cons[{i, 0}]) {
      if (k >= 0 && std::find(fused.begin(), fused.end(), k) != fused.end()) continue;
      Node* bg = k >= 0 ? &g.node(k) : nullptr;
      if (!bg || bg->op != op::batch_norm_train_grad || !takes_activation_grad(*bg, act) ||
          bg->inputs[0] != Value{i, 0} || g.type(bg->inputs[1]) != t ||
          std::count(bg->inputs.begin(), bg->inputs.end(), Value{i, 0}) != 1) {
        others.push_back(k);
        continue;
      }
      fused.push_back(k);
    }
    if (fused.empty()) continue;
    // The node that writes the masked gradient for the others must not read any of them.
    const int emit = fused[0];
    if (!others.empty()) {
      std::vector<Value> rest(g.node(emit).inputs.begin() + 1, g.node(emit).inputs.end());
      if (reaches(g, rest, i)) continue;
    }
    for (int k : fused) {
      Node& bg = g.node(k);
      // y written by this very batch norm (fused relu / relu6, no residual): the mask is
      // recomputed from x and beta, and y is not read (two fewer passes over a tensor of x's size).
      const Value beta = forward_beta(g, y, bg, act);
      std::vector<Value> in(bg.inputs.begin(), bg.inputs.begin() + 5);
      in[0] = dy;
      in.push_back(beta.valid() ? beta : y);
      in.insert(in.end(), bg.inputs.begin() + 5, bg.inputs.end());  // dmean, dvar
      bg.inputs = std::move(in);
      set_activation(bg, act);
      if (beta.valid()) bg.attrs.set("mask_from_x", true);
      report.push_back("fused " + g.node(i).op + "+batch_norm_train_grad '" + bg.name + "'" +
                       (beta.valid() ? " (mask from x)" : ""));
    }
    if (!others.empty()) {
      Node& bg = g.node(emit);
      bg.attrs.set("emit_dy", true);
      bg.outputs.push_back(t);
      make_view(g.node(i), Value{emit, 3});
    }
  }
}

// Training, EfficientNet's BatchNormalization -> Activation("swish"): s = batch_norm_train(x)
// read only by swish(s) and by swish_grad(dy, s), whose only reader is that batch norm's
// batch_norm_train_grad. The batch norm writes swish(s) itself (activation swish; the swish
// becomes a view), and the gradient node takes dy and beta and recomputes s from x (activation
// swish): s is never written, and the swish and swish_grad passes are gone.
void fuse_batch_norm_swish(Graph& g, std::vector<Value>& outputs,
                           std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    const Node& bn = g.node(i);
    if (bn.op != op::batch_norm_train || !takes_activation(bn, FusedActivation::swish) ||
        attr_b(bn, "residual"))
      continue;
    const Value s{i, 0};
    const auto& readers = cons[{i, 0}];
    if (readers.size() != 2 || readers[0] < 0 || readers[1] < 0) continue;
    int sw = -1, sg = -1;
    for (int k : readers) {
      const Node& r = g.node(k);
      if (activation_of(r) == FusedActivation::swish && r.inputs[0] == s) sw = k;
      // swish's gradient from its input, swish_grad(dy, s): the batch norm recomputes s.
      if (r.op == op::swish_grad && r.inputs[1] == s && r.inputs[0] != s) sg = k;
    }
    if (sw < 0 || sg < 0) continue;
    const auto& grad_readers = cons[{sg, 0}];
    if (grad_readers.size() != 1 || grad_readers[0] < 0) continue;
    const int b = grad_readers[0];
    const Node& bg = g.node(b);
    if (bg.op != op::batch_norm_train_grad || !takes_activation_grad(bg, FusedActivation::swish) ||
        attr_b(bg, "emit_dy") || bg.inputs[0] != Value{sg, 0} || bg.inputs[1] != bn.inputs[0] ||
        bg.inputs[2] != bn.inputs[1] || bg.inputs[3] != Value{i, 1} ||
        bg.inputs[4] != Value{i, 2} ||
        std::count(bg.inputs.begin(), bg.inputs.end(), Value{sg, 0}) != 1 ||
        g.type(g.node(sg).inputs[0]) != bn.outputs[0])
      continue;
    const Value dy = g.node(sg).inputs[0], beta = bn.inputs[2];
    set_activation(g.node(i), FusedActivation::swish);
    make_view(g.node(sw), s);
    Node& grad = g.node(b);
    std::vector<Value> in(grad.inputs.begin(), grad.inputs.begin() + 5);
    in[0] = dy;
    in.push_back(beta);
    in.insert(in.end(), grad.inputs.begin() + 5, grad.inputs.end());  // dmean, dvar
    grad.inputs = std::move(in);
    set_activation(grad, FusedActivation::swish);
    report.push_back("fused batch_norm+swish '" + g.node(i).name + "' and its gradient");
  }
}

// The float32 value a mixed-precision conv operand v was cast from: cast(f32) -> v, or
// cast(f32) -> reshape -> v (the reshape is re-applied by the caller, to the float32 value);
// v itself when it is float32 or `mixed` is false; an invalid Value otherwise.
Value f32_source(const Graph& g, Value v, bool mixed) {
  if (!mixed || g.type(v).dtype == DType::f32) return v;
  const Node* n = &g.node(v.node);
  if (n->op == op::reshape) n = &g.node(n->inputs[0].node);
  return n->op == op::cast && g.type(n->inputs[0]).dtype == DType::f32 ? n->inputs[0] : Value{};
}

// Inference: conv2d -> batch_norm_infer (maybe fused with relu, not with a residual) becomes
// conv2d(x, w * s, beta - mean * s [+ b * s]) with the batch norm's activation, s = gamma /
// sqrt(var + eps): one batch_norm_fold node computes the folded weights and bias from the live
// variables each run (a few thousand floats), and the pass over the activations is gone. In
// mixed precision the folded weights are rounded to bfloat16 once (w * s instead of w).
void fold_batch_norm(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    if (g.node(i).op != op::batch_norm_infer || attr_b(g.node(i), "residual")) continue;
    int reader = i;
    bool single = true;
    const Value src = producer_through_views(g, cons, i, reader, single);
    const int c = src.node;
    const Node& conv = g.node(c);
    const FusedActivation activation = attr_activation(g.node(i));
    if (!single || conv.op != op::conv2d || src.index != 0 ||
        attr_activation(conv) != FusedActivation::linear ||
        (activation != FusedActivation::linear && !takes_activation(conv, activation)) ||
        cons[{c, 0}] != std::vector<int>{reader})
      continue;
    // Mixed precision: the conv reads bfloat16 weights (and bias) cast from float32 values
    // (a depthwise kernel through a reshape of the cast: (kh, kw, C, 1) -> (kh, kw, 1, C));
    // the fold takes those float32 sources, and its weights are cast to bfloat16 for the conv
    // (its bias stays float32, which a bf16 conv takes).
    const bool mixed = conv.outputs[0].dtype == DType::bf16;
    const std::vector<Value> conv_in = conv.inputs;
    const TensorType conv_out = conv.outputs[0];
    std::vector<Value> in{f32_source(g, conv_in[1], mixed)};
    for (int k = 1; k < 5; ++k) in.push_back(g.node(i).inputs[size_t(k)]);
    if (conv_in.size() == 3) in.push_back(f32_source(g, conv_in[2], mixed));
    bool f32 = conv_out.dtype == DType::f32 || mixed;
    for (Value v : in) f32 = f32 && v.valid() && g.type(v).dtype == DType::f32;
    const Shape& w = g.type(conv_in[1]).shape;
    if (!f32 || w[-1] != conv_out.shape[-1] || reaches(g, in, c)) continue;
    // The depthwise kernel's reshape, now on the float32 source.
    if (g.type(in[0]).shape != w)
      in[0] =
          g.add(op::reshape, {in[0]}, g.node(conv_in[1].node).attrs, g.node(conv_in[1].node).name);
    const std::string bn_name = g.node(i).name;
    auto fold = g.add_multi(op::batch_norm_fold, in,
                            Attrs{{"epsilon", attr_f(g.node(i), "epsilon")}}, bn_name + "/fold");
    const Value weights =
        mixed ? g.add(op::cast, {fold[0]}, Attrs{{"dtype", std::string("bfloat16")}}) : fold[0];
    Node& cv = g.node(c);  // add_multi may have moved the nodes
    cv.inputs = {cv.inputs[0], weights, fold[1]};
    cv.attrs.set("fused_bias", true);
    set_activation(cv, activation);
    Node& bn = g.node(i);
    make_view(bn, Value{c, 0});
    report.push_back("folded batch_norm_infer '" + bn_name + "' into conv2d '" + cv.name + "'");
  }
}

// An activation (kFuseActivation) whose input comes from a producer that takes it (conv2d's
// takes_activations), each the only reader of the one before through the identities earlier
// fusions left (a folded batch norm): the producer applies it to its own output and the activation
// node becomes an identity, saving a pass over the activation (MobileNetV2's Conv ->
// BatchNormalization -> ReLU(6), EfficientNet's Conv -> BatchNormalization -> swish and its
// squeeze-and-excitation gate Conv2D(activation="sigmoid"), a ViT's Dense -> gelu where a conv
// computes it). In training a gradient that reads the producer's output (swish_grad, gelu_grad)
// keeps the nodes apart; one that reads the activation's output (relu_grad, sigmoid_grad:
// kFuseGradFromOutput) reads the fused output, so those fuse there too.
void fuse_activations(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    const FusedActivation act = activation_of(g.node(i));
    if (act == FusedActivation::linear) continue;
    int reader = i;
    bool single = true;
    const Value src = producer_through_views(g, cons, i, reader, single);
    const Node& p = g.node(src.node);
    if (!single || src.index != 0 || p.outputs.size() != 1 || !takes_activation(p, act) ||
        cons[{src.node, 0}] != std::vector<int>{reader} || g.node(i).outputs[0] != p.outputs[0])
      continue;
    set_activation(g.node(src.node), act);
    make_view(g.node(i), g.node(i).inputs[0]);
    report.push_back("fused " + p.op + "+" + fused_activation_name(act) + " '" + p.name + "'");
  }
}

// Whether conv node n (conv2d, conv2d_backward_input or _filter) pads "valid" without explicit
// pads, with conv2d c's strides, dilations and groups: n computes c's geometry on c's input.
bool same_valid_conv(const Node& n, const Node& c) {
  return attr_s(n, "padding") == "valid" && !n.attrs.has("pads") &&
         attr_ints(n, "strides") == attr_ints(c, "strides") &&
         attr_ints(n, "dilations") == attr_ints(c, "dilations") &&
         attr_i(n, "groups") == attr_i(c, "groups");
}

// fold_pad_into_conv's gradient side: the input gradients B of conv C (C's filter and geometry
// on the padded shape ps) whose only reader is a slice S cutting the pads (before b, after a)
// back off to x's shape xs: P's gradient. (B, S) pairs.
template <class Consumers>
std::vector<std::pair<int, int>> pad_gradients(const Graph& g, Consumers& cons,
                                               const std::vector<int>& input_grads,
                                               const Node& conv, const Shape& xs, const Shape& ps,
                                               const std::vector<int64_t>& b,
                                               const std::vector<int64_t>& a) {
  std::vector<std::pair<int, int>> grads;
  for (int k : input_grads) {
    const Node& bi = g.node(k);
    if (bi.inputs[1] != conv.inputs[1] || !same_valid_conv(bi, conv) ||
        attr_ints(bi, "input_shape") != ps.vec())
      continue;
    const auto& rd = cons[{k, 0}];
    if (rd.size() != 1 || rd[0] < 0) continue;
    const Node& s = g.node(rd[0]);
    if (s.op != op::slice || s.inputs[0] != Value{k, 0} || attr_ints(s, "begin") != b) continue;
    const auto& size = attr_ints(s, "size");
    bool cut = size.size() == 4;
    for (int d = 0; cut && d < 4; ++d)
      cut =
          (xs[d] >= 0 && size[size_t(d)] == xs[d]) || (size[size_t(d)] == -1 && a[size_t(d)] == 0);
    if (cut && s.outputs[0].dtype == bi.outputs[0].dtype) grads.push_back({k, rd[0]});
  }
  return grads;
}

// fold_pad_into_conv's rewrite of pad node p: conv c and its filter gradients take the pads and
// read x; each (B, S) gradient pair computes on x's shape and S becomes a view of B.
void apply_pad_fold(Graph& g, int p, int c, const std::vector<int>& filters,
                    const std::vector<std::pair<int, int>>& grads, const std::vector<int64_t>& pads,
                    std::vector<std::string>& report) {
  const Value x = g.node(p).inputs[0];
  g.node(c).attrs.set("pads", pads);
  g.node(c).inputs[0] = x;
  for (int f : filters) {
    g.node(f).attrs.set("pads", pads);
    g.node(f).inputs[1] = x;
  }
  for (auto [k, sl] : grads) {
    Node& bi = g.node(k);
    bi.attrs.set("pads", pads);
    bi.attrs.set("input_shape", g.type(x).shape.vec());
    bi.outputs[0] = g.node(sl).outputs[0];
    make_view(g.node(sl), Value{k, 0});
  }
  std::string what;
  if (!filters.empty() && !grads.empty())
    what = " and its gradients";
  else if (!filters.empty())
    what = " and its filter gradient";
  else if (!grads.empty())
    what = " and its input gradient";
  report.push_back("folded pad '" + g.node(p).name + "' into conv2d '" + g.node(c).name + "'" +
                   what);
}

// pad P = pad(x) (zeros on the two spatial axes of an NHWC tensor only; the op pads with zeros
// only) ahead of a conv2d C with "valid" padding (Keras's ZeroPadding2D ahead of a strided conv
// in MobileNetV2 and EfficientNet) becomes C's explicit pads [top, bottom, left, right], so no
// padded copy of the activation is written:
//  - inference: C is P's only reader; C reads x.
//  - training: P's other readers are C's filter gradients (conv2d_backward_filter reading P as
//    x, C's geometry and filter shape); they take the pads and read x too. P's gradient, a slice
//    S of C's input gradient B (conv2d_backward_input of C's filter and geometry on P's shape,
//    S its only reader) that cuts the pads back off, becomes B with the pads on x's shape (the
//    rows and columns S dropped are the ones B no longer computes) and S a view of it. Each
//    rewrite is an identity of its own, so a B/S pair that does not match (say x needs no
//    gradient) stays as it is and the forward ones still fold.
// In training every pad must be at most the window's reach ((k - 1) * dilation, what "same"
// padding gives at most), which every backend's backward kernels take. A pad with any other
// reader (or that is an output) stays.
void fold_pad_into_conv(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  std::vector<int> input_grads;  // every conv2d_backward_input, candidates for B
  for (int i : sched)
    if (g.node(i).op == op::conv2d_backward_input) input_grads.push_back(i);
  for (int i : sched) {
    if (g.node(i).op != op::pad) continue;
    const Value p{i, 0}, x = g.node(i).inputs[0];
    const Shape xs = g.type(x).shape, ps = g.type(p).shape;
    if (xs.rank() != 4) continue;
    const std::vector<int64_t> b = attr_ints(g.node(i), "before"),
                               a = attr_ints(g.node(i), "after");
    if (b[0] != 0 || a[0] != 0 || b[3] != 0 || a[3] != 0) continue;
    const std::vector<int64_t> pads{b[1], a[1], b[2], a[2]};
    // P's readers: one conv2d C reading it as x, any number of filter gradients F.
    std::vector<int> readers = cons[{i, 0}];
    std::sort(readers.begin(), readers.end());
    readers.erase(std::unique(readers.begin(), readers.end()), readers.end());
    int c = -1;
    std::vector<int> filters;
    bool ok = true;
    for (int k : readers) {
      if (k < 0) {
        ok = false;
        break;
      }
      const Node& r = g.node(k);
      const auto uses = std::count(r.inputs.begin(), r.inputs.end(), p);
      if (r.op == op::conv2d && c < 0 && r.inputs[0] == p && uses == 1)
        c = k;
      else if (r.op == op::conv2d_backward_filter && r.inputs[1] == p && uses == 1)
        filters.push_back(k);
      else
        ok = false;
    }
    if (!ok || c < 0) continue;
    const Node& conv = g.node(c);
    if (attr_s(conv, "padding") != "valid" || conv.attrs.has("pads")) continue;
    const Shape& ws = g.type(conv.inputs[1]).shape;
    for (int f : filters)
      ok = ok && same_valid_conv(g.node(f), conv) &&
           attr_ints(g.node(f), "filter_shape") == ws.vec();
    const auto grads = pad_gradients(g, cons, input_grads, conv, xs, ps, b, a);
    const bool training = !filters.empty() || !grads.empty();
    if (training) {
      const ConvGeom geo = conv_geometry(ps, ws, conv);
      const int64_t reach_h = (geo.KH - 1) * geo.DH, reach_w = (geo.KW - 1) * geo.DW;
      ok = ok && pads[0] <= reach_h && pads[1] <= reach_h && pads[2] <= reach_w &&
           pads[3] <= reach_w;
    }
    if (ok) apply_pad_fold(g, i, c, filters, grads, pads, report);
  }
}

// relu_grad(max_pool2d_grad(dy, x, y), x) (an activation's gradient from its output,
// kFuseActivationGrad, that the pool's gradient takes), where the pool read a relu's output x
// (conv + relu -> max_pool, the reference CNN's): one max_pool2d_grad that masks dx by x > 0
// itself, saving a pass over the pool's input-sized gradient. x may reach the two through
// identities.
void fuse_pool_activation_grad(Graph& g, std::vector<Value>& outputs,
                               std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    const FusedActivation act = activation_grad_of(g.node(i));
    if (act == FusedActivation::linear) continue;
    const Value d = g.node(i).inputs[0], x = g.node(i).inputs[1];
    const Node& pg = g.node(d.node);
    if (pg.op != op::max_pool2d_grad || d.index != 0 || !takes_activation_grad(pg, act) ||
        cons[{d.node, 0}] != std::vector<int>{i} ||
        through_views(g, pg.inputs[1]) != through_views(g, x) || g.type(x) != g.node(i).outputs[0])
      continue;
    Node& pool_grad = g.node(d.node);
    set_activation(pool_grad, act);
    const OpId grad_op = g.node(i).op;
    make_view(g.node(i), d);
    report.push_back("fused max_pool2d_grad+" + grad_op + " '" + pool_grad.name + "'");
  }
}

// Whether shape s broadcasts one value per channel over x [..., C]: rank at most x's, the last
// dim C, every other 1 (Normalization's reshaped statistics).
bool per_channel(const Shape& s, const Shape& x) {
  if (s.rank() < 1 || s.rank() > x.rank() || s[-1] != x[-1]) return false;
  for (int k = 0; k + 1 < s.rank(); ++k)
    if (s[k] != 1) return false;
  return true;
}

// div(sub(x, m), d) with m and d one value per channel (keras.layers.Normalization's
// (x - mean) / max(sqrt(var), eps)), the sub read only by the div, becomes one
// batch_norm_infer(x, gamma = 1 / d, beta = 0, mean = m, var = 1, epsilon = 0): one pass over x
// instead of two, its per-channel terms computed from the statistics (the weight cache keeps
// them). When x = scale_shift(x0) (Rescaling, read only by the sub), that folds in too:
// bn(s x0 + t) = bn(x0; gamma * s, mean (m - t) / s), so EfficientNet's Rescaling ->
// Normalization is one pass over the image. float32 only.
void fold_channel_affine(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  auto sched = schedule_nodes(g, outputs);
  auto cons = consumers_of(g, sched, outputs);
  for (int i : sched) {
    if (g.node(i).op != op::div) continue;
    const Value a = g.node(i).inputs[0], d = g.node(i).inputs[1];
    const Node& sub = g.node(a.node);
    if (sub.op != op::sub || cons[{a.node, 0}] != std::vector<int>{i}) continue;
    Value x = sub.inputs[0];
    const Value m = sub.inputs[1];
    const Shape xs = g.type(x).shape;
    bool f32 = g.node(i).outputs[0] == g.type(x);
    for (Value v : {x, m, d}) f32 = f32 && g.type(v).dtype == DType::f32;
    if (!f32 || xs.rank() < 2 || xs[-1] <= 0 || !per_channel(g.type(m).shape, xs) ||
        !per_channel(g.type(d).shape, xs))
      continue;
    const std::string name = g.node(i).name, rescale = g.node(x.node).name;
    const Attrs vec{{"shape", std::vector<int64_t>{xs[-1]}}};
    Value mean = g.add(op::reshape, {m}, vec);
    const Value one = g.add(op::ones_like, {mean});
    Value gamma = g.add(op::div, {one, g.add(op::reshape, {d}, vec)});
    const Node& pre = g.node(x.node);
    const bool rescaled = pre.op == op::scale_shift &&
                          cons[{x.node, 0}] == std::vector<int>{a.node} &&
                          attr_f(pre, "scale") != 0;
    if (rescaled) {
      const double sc = attr_f(pre, "scale"), sh = attr_f(pre, "shift");
      gamma = g.add(op::scale_shift, {gamma}, Attrs{{"scale", sc}, {"shift", 0.0}});
      mean = g.add(op::scale_shift, {mean}, Attrs{{"scale", 1 / sc}, {"shift", -sh / sc}});
      x = g.node(x.node).inputs[0];
    }
    const Value zero = g.add(op::zeros_like, {mean});
    const Value y =
        g.add(op::batch_norm_infer, {x, gamma, zero, mean, one}, Attrs{{"epsilon", 0.0}}, name);
    make_view(g.node(i), y);
    report.push_back("folded sub+div" +
                     std::string(rescaled ? " (and scale_shift '" + rescale + "')" : "") + " '" +
                     name + "' into one batch_norm_infer");
  }
}

}  // namespace

void fuse_for_kernels(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  fold_channel_affine(g, outputs, report);
  fuse_conv_bias(g, outputs, report);
  fuse_batch_norm(g, outputs, report);
  fuse_batch_norm_grad(g, outputs, report);
  fuse_batch_norm_swish(g, outputs, report);
  fold_batch_norm(g, outputs, report);
  fuse_activations(g, outputs, report);
  fold_pad_into_conv(g, outputs, report);
  fuse_pool_activation_grad(g, outputs, report);
}

}  // namespace lockstep::ops
