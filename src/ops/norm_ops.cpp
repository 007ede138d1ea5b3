// Declarations of batch_norm_{train,infer}(+grads) and layer_norm(+grad): shapes and gradients.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

static void check_param(const TensorType& t, int64_t C, const char* what) {
  expect_f32(t, what);
  LS_CHECK(t.shape == Shape{C}, what, " has shape ", t.shape.str(), ", expected (", C,
           ") to match the last axis of x");
}

static int64_t channels(const TensorType& x) {
  expect_f32(x, "x");
  LS_CHECK(x.shape.rank() >= 1, "x must have at least one axis");
  int64_t C = x.shape[-1];
  LS_CHECK(C > 0, "the normalised (last) axis must be known, got ", x.shape.str());
  return C;
}

static Shape rows_shape(const Shape& x) {
  Shape r;
  for (int i = 0; i + 1 < x.rank(); ++i) r.push_back(x[i]);
  return r;
}

static bool is_zero(GradBuilder& b, Value v) { return b.graph().node(v.node).op == op::zeros_like; }

// Gradient op inputs: (dy, x, gamma, stat0, stat1) plus (dstat0, dstat1) when either is used.
static std::vector<Value> norm_grad(GradBuilder& b, const Node& n, const std::vector<Value>& dy,
                                    OpId op) {
  std::vector<Value> in{dy[0], n.inputs[0], n.inputs[1], Value{n.id, 1}, Value{n.id, 2}};
  if (!is_zero(b, dy[1]) || !is_zero(b, dy[2])) {
    in.push_back(dy[1]);
    in.push_back(dy[2]);
  }
  return b.add_multi(op, in, attrs_for(op, n.attrs));
}

namespace {

using Types = std::vector<TensorType>;
constexpr const char* kGroup = "norm";
// Synchronized batch statistics between the in-process replicas of one step
// (lockstep/graph/replica_exchange.h): the group's id and this replica's index.
const std::vector<AttrDecl> kReplicaGroup = {
    {"group", i64, int64_t(0),
     "0: the statistics are this batch's; else the id of an in-process replica group "
     "(ReplicaExchange) whose replicas pool their sums: each normalises with the statistics of "
     "all their rows (cpu backend only)"},
    {"replica", i64, int64_t(0), "this replica's index in the group"}};
const std::vector<AttrDecl> kEpsilon = {
    {"epsilon", f64, 1e-3, "added to the variance before the square root (Keras default)"}};

// Whether batch_norm_train(_grad) or batch_norm_infer has a fused activation (one its
// declaration takes); with a residual, only relu.
static bool fused_activation(const Node& n) {
  const FusedActivation act = attr_activation(n);
  const bool residual = OpRegistry::get().op(n.op).attr("residual") && attr_b(n, "residual");
  LS_CHECK(!residual || act == FusedActivation::linear || act == FusedActivation::relu,
           "activation \"", fused_activation_name(act), "\" takes no residual (only relu does)");
  return act != FusedActivation::linear;
}

// The activations the batch-norm kernels of every backend apply.
constexpr FusedActivationSet kBatchNormTrainActivations =
    bit(FusedActivation::relu) | bit(FusedActivation::relu6) | bit(FusedActivation::swish);

Types batch_norm_train_infer(const Node& n, const Types& in) {
  const bool residual = attr_b(n, "residual");
  fused_activation(n);
  expect_inputs(in, residual ? 4 : 3);
  int64_t C = channels(in[0]);
  check_param(in[1], C, "gamma");
  check_param(in[2], C, "beta");
  if (residual) LS_CHECK(in[3] == in[0], "residual ", in[3].str(), " differs from x ", in[0].str());
  return {in[0], f32(Shape{C}), f32(Shape{C})};
}

// (dy, x, gamma, mean, var[, y][, dmean, dvar]): y (the fused forward's output, whose sign
// masks dy) with activation "relu" or "relu6"; beta with "swish", or with relu / relu6 and
// mask_from_x (the mask recomputed from s = bn(x)).
Types batch_norm_train_grad_infer(const Node& n, const Types& in) {
  const size_t base = fused_activation(n) ? 6 : 5;
  LS_CHECK(in.size() == base || in.size() == base + 2, "expects ", base, " or ", base + 2,
           " inputs, got ", in.size());
  int64_t C = channels(in[1]);
  LS_CHECK(in[0].shape == in[1].shape, "dy ", in[0].shape.str(), " and x ", in[1].shape.str(),
           " differ");
  for (size_t i = 2; i < in.size(); ++i)
    if (i != 5 || base == 5) check_param(in[i], C, "gamma/mean/var");
  const bool swish = attr_activation(n) == FusedActivation::swish;
  const bool from_x = attr_b(n, "mask_from_x");
  LS_CHECK(!from_x || (base == 6 && !swish), "mask_from_x needs activation \"relu\" or \"relu6\"");
  if (swish || from_x) check_param(in[5], C, "beta");
  if (base == 6 && !swish && !from_x)
    LS_CHECK(in[5] == in[0], "y ", in[5].str(), " differs from dy ", in[0].str());
  LS_CHECK(!attr_b(n, "emit_dy") || (base == 6 && !swish),
           "emit_dy needs activation \"relu\" or \"relu6\"");
  Types out{in[1], f32(Shape{C}), f32(Shape{C})};
  if (attr_b(n, "emit_dy")) out.push_back(in[0]);
  return out;
}

// Gradient of a fused batch_norm_train: relu_grad at its output, then the plain gradient op;
// the residual input gets the masked gradient itself.
static std::vector<Value> batch_norm_train_grad(GradBuilder& b, const Node& n,
                                                const std::vector<Value>& dy) {
  std::vector<Value> d = dy;
  fused_activation(n);
  d[0] = fused_activation_grad(b, n, d[0]);
  std::vector<Value> in{d[0], n.inputs[0], n.inputs[1], Value{n.id, 1}, Value{n.id, 2}};
  if (!is_zero(b, d[1]) || !is_zero(b, d[2])) {
    in.push_back(d[1]);
    in.push_back(d[2]);
  }
  Attrs a{{"epsilon", attr_f(n, "epsilon")}};
  if (attr_i(n, "group") != 0) {  // synchronized: the gradient's sums cross the same replicas
    LS_CHECK(in.size() == 5, "batch_norm_train '", n.name,
             "': synchronized statistics (group) cannot take gradients of their own (mean, var)");
    a.set("group", AttrValue(attr_i(n, "group")));
    a.set("replica", AttrValue(attr_i(n, "replica")));
  }
  auto g = b.add_multi(op::batch_norm_train_grad, in, a);
  if (attr_b(n, "residual")) g.push_back(d[0]);
  return g;
}

Types batch_norm_infer_infer(const Node& n, const Types& in) {
  fused_activation(n);
  const bool residual = attr_b(n, "residual");
  expect_inputs(in, residual ? 6 : 5);
  int64_t C = channels(in[0]);
  const char* names[] = {"", "gamma", "beta", "moving_mean", "moving_variance"};
  for (int i = 1; i < 5; ++i) check_param(in[i], C, names[i]);
  if (residual)
    LS_CHECK(in[5] == in[0], "the residual input z ", in[5].shape.str(), " must match x ",
             in[0].shape.str());
  return {in[0]};
}

// (w[..., C], gamma, beta, mean, var[, b]) -> (w', b'[C]).
Types batch_norm_fold_infer(const Node&, const Types& in) {
  LS_CHECK(in.size() == 5 || in.size() == 6, "expects 5 or 6 inputs, got ", in.size());
  expect_f32(in[0], "w");
  int64_t C = channels(in[0]);
  for (size_t i = 1; i < in.size(); ++i) check_param(in[i], C, "gamma/beta/mean/var/bias");
  return {in[0], f32(Shape{C})};
}

// (dy, x, gamma, mean, var) -> (dx, dgamma, dbeta, dmean, dvar).
Types batch_norm_infer_grad_infer(const Node&, const Types& in) {
  expect_inputs(in, 5);
  int64_t C = channels(in[1]);
  for (int i = 2; i < 5; ++i) check_param(in[i], C, "gamma/mean/var");
  auto c = f32(Shape{C});
  return {in[1], c, c, c, c};
}

Types layer_norm_infer(const Node&, const Types& in) {
  expect_inputs(in, 3);
  int64_t C = channels(in[0]);
  check_param(in[1], C, "gamma");
  check_param(in[2], C, "beta");
  Shape r = rows_shape(in[0].shape);
  return {in[0], f32(r), f32(r)};
}

Types layer_norm_grad_infer(const Node&, const Types& in) {
  LS_CHECK(in.size() == 5 || in.size() == 7, "expects 5 or 7 inputs, got ", in.size());
  int64_t C = channels(in[1]);
  LS_CHECK(in[0].shape == in[1].shape, "dy ", in[0].shape.str(), " and x ", in[1].shape.str(),
           " differ");
  check_param(in[2], C, "gamma");
  Shape r = rows_shape(in[1].shape);
  for (size_t i = 3; i < in.size(); ++i)
    LS_CHECK(in[i].shape == r, "row statistics have shape ", in[i].shape.str(), ", expected ",
             r.str());
  return {in[1], f32(Shape{C}), f32(Shape{C})};
}

std::vector<Value> batch_norm_infer_grad(GradBuilder& b, const Node& n,
                                         const std::vector<Value>& dy) {
  // The fusion pass runs after differentiation: a fused node never gets here.
  LS_CHECK(attr_activation(n) == FusedActivation::linear && !attr_b(n, "residual"),
           "batch_norm_infer: no gradient for the fused form (activation/residual)");
  const auto& in = n.inputs;
  return b.add_multi(op::batch_norm_infer_grad, {dy[0], in[0], in[1], in[3], in[4]},
                     attrs_for(op::batch_norm_infer_grad, n.attrs));
}

// Training with the batch's statistics, and its gradient.
void register_batch_norm_train() {
  add_op(kGroup, {.name = op::batch_norm_train,
                  .signature = "(x[..., C], gamma[C], beta[C]) -> (y, mean[C], var[C])",
                  .doc = "Batch normalisation with the batch's statistics over all but the last "
                         "axis (biased variance).",
                  .attrs = {kEpsilon[0],
                            {"activation", str, "linear",
                             "a fused activation (takes_activations; with a residual only "
                             "relu), applied last (the compiler's fusion pass folds a "
                             "following residual add and relu, a relu6 or a swish into it)"},
                            {"residual", boolean, false,
                             "a 4th input z shaped like x, added before the activation"},
                            {"layout", str, "nhwc",
                             "x's (and the tensors shaped like it) memory layout: \"nhwc\", or "
                             "\"nChw16c\" where the cpu backend's layout pass sets it"},
                            kReplicaGroup[0],
                            kReplicaGroup[1]},
                  .infer = batch_norm_train_infer,
                  .grad = batch_norm_train_grad,
                  .bf16 = true,
                  .bf16_outputs = {0},
                  .fusion = kFuseTakesActivation | kFuseTakesResidual,
                  .takes_activations = kBatchNormTrainActivations,
                  .onnx = {.none = kOnnxTrainingMode}});
  add_op(kGroup,
         {.name = op::batch_norm_train_grad,
          .signature = "(dy, x, gamma, mean, var[, y][, dmean, dvar]) -> "
                       "(dx, dgamma, dbeta[, dz])",
          .doc = "Gradient of batch_norm_train; takes dmean/dvar when the statistics "
                 "themselves get gradients.",
          .attrs = {kEpsilon[0],
                    {"activation", str, "linear",
                     "\"relu\" (\"relu6\"): dy is the gradient at the output y of a "
                     "batch_norm_train fused with relu (relu6) (input 5), masked here by y > 0 "
                     "(and y < 6); \"swish\": dy is at y = swish(s), s = bn(x) recomputed "
                     "with input 5 = beta"},
                    {"emit_dy", boolean, false,
                     "with relu: output 3 is the masked dy (the residual input's gradient)"},
                    {"mask_from_x", boolean, false,
                     "with relu (relu6) and no residual: input 5 is beta and the mask is "
                     "recomputed from s = bn(x) (0 < s < 6) instead of read from y"},
                    {"layout", str, "nhwc",
                     "x's (and the tensors shaped like it) memory layout: \"nhwc\", or "
                     "\"nChw16c\" where the cpu backend's layout pass sets it"},
                    kReplicaGroup[0],
                    kReplicaGroup[1]},
          .infer = batch_norm_train_grad_infer,
          .bf16 = true,
          .bf16_outputs = {0, 3},
          .fusion = kFuseTakesActivationGrad,
          .takes_activations = kBatchNormTrainActivations,
          .onnx = {.none = kOnnxGradient}});
}

// Inference with given statistics, its fold into a conv, and its gradient (a frozen layer).
void register_batch_norm_infer() {
  add_op(kGroup, {.name = op::batch_norm_infer,
                  .signature = "(x, gamma, beta, moving_mean, moving_variance[, z]) -> y",
                  .doc = "Batch normalisation with given statistics.",
                  .attrs = {kEpsilon[0],
                            {"activation", str, "linear",
                             "\"linear\" or \"relu\", applied last (set by the compiler's "
                             "fusion pass, as for batch_norm_train)"},
                            {"residual", boolean, false,
                             "a 6th input z shaped like x, added before the activation"},
                            {"layout", str, "nhwc",
                             "x's (and the tensors shaped like it) memory layout: \"nhwc\", or "
                             "\"nChw16c\" where the cpu backend's layout pass sets it"}},
                  .infer = batch_norm_infer_infer,
                  .grad = batch_norm_infer_grad,
                  .bf16 = true,
                  .bf16_outputs = {0},
                  .rows = RowRule::per_row,
                  .fusion = kFuseTakesActivation | kFuseTakesResidual,
                  .takes_activations = bit(FusedActivation::relu),
                  .onnx = {.op = "BatchNormalization"}});
  add_op(kGroup,
         {.name = op::batch_norm_fold,
          .signature = "(w[..., C], gamma, beta, moving_mean, moving_variance[, b]) -> "
                       "(w_folded, b_folded[C])",
          .doc = "A batch_norm_infer folded into the conv before it: s = gamma / "
                 "sqrt(var + eps), w_folded = w * s (per output channel, the last axis), "
                 "b_folded = beta - mean * s (+ b * s). Made by the fusion pass in inference "
                 "programs.",
          .attrs = kEpsilon,
          .infer = batch_norm_fold_infer,
          .reference_only = "per-channel work on the weights (a few thousand floats), made only "
                            "by the fusion pass",
          .onnx = {.none = kOnnxBackendFusion}});
  add_op(kGroup, {.name = op::batch_norm_infer_grad,
                  .signature = "(dy, x, gamma, mean, var) -> (dx, dgamma, dbeta, dmean, dvar)",
                  .doc = "Gradient of batch_norm_infer with respect to every input.",
                  .attrs = kEpsilon,
                  .infer = batch_norm_infer_grad_infer,
                  .reference_only = "only a backward pass through a frozen BatchNormalization "
                                    "(training=False) uses it",
                  .bf16 = true,
                  .bf16_outputs = {0},
                  .onnx = {.none = kOnnxGradient}});
}

void register_layer_norm() {
  add_op(kGroup, {.name = op::layer_norm,
                  .signature = "(x[..., C], gamma[C], beta[C]) -> (y, mean[...], rstd[...])",
                  .doc = "Layer normalisation over the last axis; mean and rstd have x's shape "
                         "without it.",
                  .attrs = kEpsilon,
                  .infer = layer_norm_infer,
                  .grad =
                      [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
                        return norm_grad(b, n, dy, op::layer_norm_grad);
                      },
                  .bf16 = true,
                  .bf16_outputs = {0},
                  .rows = RowRule::per_row,
                  .onnx = {.op = "LayerNormalization"}});
  add_op(kGroup, {.name = op::layer_norm_grad,
                  .signature = "(dy, x, gamma, mean, rstd[, dmean, drstd]) -> (dx, dgamma, dbeta)",
                  .doc = "Gradient of layer_norm.",
                  .attrs = kEpsilon,
                  .infer = layer_norm_grad_infer,
                  .bf16 = true,
                  .bf16_outputs = {0},
                  .onnx = {.none = kOnnxGradient}});
}

}  // namespace

LOCKSTEP_REGISTER(norm_ops) {
  register_batch_norm_train();
  register_batch_norm_infer();
  register_layer_norm();
}

}  // namespace lockstep::ops
