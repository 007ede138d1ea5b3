// Lowerings of batch and layer normalisation (the last axis is the channel axis), as
// src/backends/reference/nn_kernels_norm.cpp computes them. batch_norm_train/_infer/_grad map
// to StableHLO's batch_norm ops; the fused forms (relu, relu6, residual) and the statistics'
// gradients (dmean, dvar) add their elementwise parts around them.
#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

using Values = std::vector<HloValue>;

int64_t last(const HloValue& x) { return x.type.rank() - 1; }

// All axes but the last: the batch-norm reduction.
std::vector<int64_t> rows(const HloValue& x) { return all_axes(x.type.rank() - 1); }

HloValue per_channel(LoweringContext& cx, const HloValue& c, const HloValue& x) {
  return cx.b.broadcast_in_dim(c, x.type.dims, {last(x)});
}

HloValue relu(LoweringContext& cx, const HloValue& y) {
  HloValue zero = cx.full_like(y, 0.0);  // y <= 0 ? 0 : y: NaN passes through
  return cx.b.select(cx.b.compare(y, zero, Compare::LE), zero, y);
}

// 1 / sqrt(var + eps) per channel.
HloValue rstd_of(LoweringContext& cx, const HloValue& var, double eps) {
  return cx.b.rsqrt(cx.b.add(var, cx.full_like(var, eps)));
}

// Statistics synchronized across host replica threads (attribute group) are the cpu backend's;
// XLA's device replicas synchronize with cross_replica_sum inside the program.
void no_replica_group(const Node& n) {
  LS_CHECK(attr_i(n, "group") == 0, n.op, " '", n.name,
           "': statistics synchronized across host replica threads (attribute group) run on the "
           "cpu backend only");
}

Values batch_norm_train(LoweringContext& cx, const Node& n) {
  no_replica_group(n);
  HloValue x = cx.in(n, 0);
  Values r = cx.b.batch_norm_training(x, cx.in(n, 1), cx.in(n, 2), attr_f(n, "epsilon"), last(x));
  if (attr_b(n, "residual")) r[0] = cx.b.add(r[0], cx.in(n, 3));
  if (attr_s(n, "activation") == "relu") r[0] = relu(cx, r[0]);
  if (attr_s(n, "activation") == "relu6")
    r[0] = cx.b.minimum(relu(cx, r[0]), cx.full_like(r[0], 6.0));
  if (attr_s(n, "activation") == "swish") r[0] = cx.b.multiply(r[0], cx.b.logistic(r[0]));
  return r;
}

// (dy, x, gamma, mean, var[, y][, dmean, dvar]) -> (dx, dgamma, dbeta[, dz])
Values batch_norm_train_grad(LoweringContext& cx, const Node& n) {
  no_replica_group(n);
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1), mean = cx.in(n, 3);
  const bool swish = attr_s(n, "activation") == "swish";
  const bool fused_relu = attr_s(n, "activation") != "linear";  // relu, relu6 or swish
  if (swish) {  // dy at swish(s), s = bn(x) recomputed with beta (input 5)
    HloValue g_rstd = cx.b.multiply(cx.in(n, 2), rstd_of(cx, cx.in(n, 4), attr_f(n, "epsilon")));
    HloValue s = cx.b.add(
        cx.b.multiply(cx.b.subtract(x, per_channel(cx, mean, x)), per_channel(cx, g_rstd, x)),
        per_channel(cx, cx.in(n, 5), x));
    HloValue sg = cx.b.logistic(s);
    HloValue one = cx.full_like(s, 1.0);
    dy = cx.b.multiply(dy,
                       cx.b.add(sg, cx.b.multiply(cx.b.multiply(s, sg), cx.b.subtract(one, sg))));
  } else if (fused_relu) {
    HloValue y = cx.in(n, 5);
    if (attr_b(n, "mask_from_x")) {  // s = bn(x) recomputed with beta (input 5): its sign masks
      HloValue g_rstd = cx.b.multiply(cx.in(n, 2), rstd_of(cx, cx.in(n, 4), attr_f(n, "epsilon")));
      y = cx.b.add(
          cx.b.multiply(cx.b.subtract(x, per_channel(cx, mean, x)), per_channel(cx, g_rstd, x)),
          per_channel(cx, cx.in(n, 5), x));
    }
    dy = cx.b.select(cx.b.compare(y, cx.full_like(y, 0.0), Compare::GT), dy, cx.full_like(dy, 0.0));
    if (attr_s(n, "activation") == "relu6")
      dy = cx.b.select(cx.b.compare(y, cx.full_like(y, 6.0), Compare::LT), dy,
                       cx.full_like(dy, 0.0));
  }
  Values r =
      cx.b.batch_norm_grad(x, cx.in(n, 2), mean, cx.in(n, 4), dy, attr_f(n, "epsilon"), last(x));
  const int s = fused_relu ? 6 : 5;
  if (cx.num_inputs(n) > s) {  // + dmean / R + dvar * 2 (x - mean) / R
    const double R = double(x.type.numel() / x.type.dims.back());
    HloValue dm = per_channel(cx, cx.in(n, s), x), dv = per_channel(cx, cx.in(n, s + 1), x);
    HloValue xc = cx.b.subtract(x, per_channel(cx, mean, x));
    HloValue extra = cx.b.add(cx.b.multiply(dm, cx.full_like(x, 1.0 / R)),
                              cx.b.multiply(cx.b.multiply(dv, cx.full_like(x, 2.0 / R)), xc));
    r[0] = cx.b.add(r[0], extra);
  }
  if (attr_b(n, "emit_dy")) r.push_back(dy);
  return r;
}

Values batch_norm_infer(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  HloValue y = cx.b.batch_norm_inference(x, cx.in(n, 1), cx.in(n, 2), cx.in(n, 3), cx.in(n, 4),
                                         attr_f(n, "epsilon"), last(x));
  if (attr_b(n, "residual")) y = cx.b.add(y, cx.in(n, 5));
  if (attr_s(n, "activation") == "relu") y = relu(cx, y);
  return {y};
}

// (dy, x, gamma, mean, var) -> (dx, dgamma, dbeta, dmean, dvar)
Values batch_norm_infer_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1), gamma = cx.in(n, 2), mean = cx.in(n, 3);
  HloValue rstd = rstd_of(cx, cx.in(n, 4), attr_f(n, "epsilon"));
  HloValue xc = cx.b.subtract(x, per_channel(cx, mean, x));
  HloValue sdy = cx.reduce_sum(dy, rows(x)), sdyxc = cx.reduce_sum(cx.b.multiply(dy, xc), rows(x));
  HloValue g_rstd = cx.b.multiply(gamma, rstd);
  HloValue dx = cx.b.multiply(dy, per_channel(cx, g_rstd, x));
  HloValue dmean = cx.b.negate(cx.b.multiply(sdy, g_rstd));
  HloValue rstd3 = cx.b.multiply(cx.b.multiply(rstd, rstd), rstd);
  HloValue dvar =
      cx.b.multiply(cx.b.multiply(sdyxc, gamma), cx.b.multiply(cx.full_like(rstd, -0.5), rstd3));
  return {dx, cx.b.multiply(sdyxc, rstd), sdy, dmean, dvar};
}

// (w[..., C], gamma, beta, mean, var[, b]) -> (w s, beta - mean s (+ b s)), s = gamma rstd.
Values batch_norm_fold(LoweringContext& cx, const Node& n) {
  HloValue w = cx.in(n, 0);
  HloValue s = cx.b.multiply(cx.in(n, 1), rstd_of(cx, cx.in(n, 4), attr_f(n, "epsilon")));
  HloValue bias = cx.b.subtract(cx.in(n, 2), cx.b.multiply(cx.in(n, 3), s));
  if (cx.num_inputs(n) > 5) bias = cx.b.add(bias, cx.b.multiply(cx.in(n, 5), s));
  return {cx.b.multiply(w, per_channel(cx, s, w)), bias};
}

// Row statistics over the last axis, broadcast back.
HloValue per_row(LoweringContext& cx, const HloValue& r, const HloValue& x) {
  return cx.b.broadcast_in_dim(r, x.type.dims, all_axes(x.type.rank() - 1));
}

Values layer_norm(LoweringContext& cx, const Node& n) {
  HloValue x = cx.in(n, 0);
  const double C = double(x.type.dims.back());
  const std::vector<int64_t> ax = {last(x)};
  HloValue sum = cx.reduce_sum(x, ax);
  HloValue mean = cx.b.divide(sum, cx.full_like(sum, C));
  HloValue xc = cx.b.subtract(x, per_row(cx, mean, x));
  HloValue var = cx.reduce_sum(cx.b.multiply(xc, xc), ax);
  var = cx.b.divide(var, cx.full_like(var, C));
  HloValue rstd = rstd_of(cx, var, attr_f(n, "epsilon"));
  HloValue y =
      cx.b.multiply(cx.b.multiply(per_channel(cx, cx.in(n, 1), x), xc), per_row(cx, rstd, x));
  return {cx.b.add(y, per_channel(cx, cx.in(n, 2), x)), mean, rstd};
}

// (dy, x, gamma, mean, rstd[, dmean, drstd]) -> (dx, dgamma, dbeta)
Values layer_norm_grad(LoweringContext& cx, const Node& n) {
  HloValue dy = cx.in(n, 0), x = cx.in(n, 1), mean = cx.in(n, 3), rstd = cx.in(n, 4);
  const double C = double(x.type.dims.back());
  const std::vector<int64_t> ax = {last(x)};
  HloValue xc = cx.b.subtract(x, per_row(cx, mean, x));
  HloValue rs = per_row(cx, rstd, x);
  HloValue xh = cx.b.multiply(xc, rs);
  HloValue gi = cx.b.multiply(dy, per_channel(cx, cx.in(n, 2), x));
  HloValue sg = per_row(cx, cx.reduce_sum(gi, ax), x);
  HloValue sgx = per_row(cx, cx.reduce_sum(cx.b.multiply(gi, xh), ax), x);
  HloValue inner = cx.b.subtract(cx.b.subtract(gi, cx.b.divide(sg, cx.full_like(sg, C))),
                                 cx.b.divide(cx.b.multiply(xh, sgx), cx.full_like(sgx, C)));
  HloValue dx = cx.b.multiply(rs, inner);
  if (cx.num_inputs(n) > 5) {  // + dmean / C - drstd rstd^3 (x - mean) / C
    HloValue dm = per_row(cx, cx.in(n, 5), x), dr = per_row(cx, cx.in(n, 6), x);
    HloValue rs3 = cx.b.multiply(cx.b.multiply(rs, rs), rs);
    HloValue t = cx.b.multiply(cx.b.multiply(dr, rs3), xc);
    dx = cx.b.add(dx, cx.b.divide(cx.b.subtract(dm, t), cx.full_like(dm, C)));
  }
  const std::vector<int64_t> r = all_axes(x.type.rank() - 1);
  return {dx, cx.reduce_sum(cx.b.multiply(dy, xh), r), cx.reduce_sum(dy, r)};
}

}  // namespace

LOCKSTEP_REGISTER(xla_norm_lowerings) {
  register_lowering(op::batch_norm_train, batch_norm_train);
  register_lowering(op::batch_norm_train_grad, batch_norm_train_grad);
  register_lowering(op::batch_norm_infer, batch_norm_infer);
  register_lowering(op::batch_norm_infer_grad, batch_norm_infer_grad);
  register_lowering(op::batch_norm_fold, batch_norm_fold);
  register_lowering(op::layer_norm, layer_norm);
  register_lowering(op::layer_norm_grad, layer_norm_grad);
}

}  // namespace lockstep::xla
