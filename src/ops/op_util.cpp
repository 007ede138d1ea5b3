// Shape helpers for op registrations.
#include "ops/internal/op_util.h"

#include <algorithm>
#include <set>

namespace lockstep::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int r = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < r; ++i) {
    int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    int64_t d;
    if (da == db)
      d = da;
    else if (da == 1)
      d = db;
    else if (db == 1)
      d = da;
    else if (da < 0 || db < 0)
      d = da < 0 ? db : da;
    else
      LS_FAIL("shapes ", a.str(), " and ", b.str(), " cannot be broadcast together");
    out.push_back(d);
  }
  return out;
}

std::vector<int64_t> normalise_axes(std::vector<int64_t> axes, int rank) {
  for (auto& a : axes) {
    if (a < 0) a += rank;
    LS_CHECK(a >= 0 && a < rank, "axis ", a, " out of range for rank ", rank);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

Attrs attrs_for(const std::string& to, const Attrs& from) {
  const OpDef& def = OpRegistry::get().op(to);
  Attrs out;
  for (const auto& [key, value] : from.map())
    if (def.attr(key)) out.set(key, value);
  return out;
}

// The ops of a mixed_bfloat16 step: convolution, matmul, pooling, elementwise, reductions,
// copies and dropout compute in bf16; normalisation takes bf16 x and gives bf16 y (or dx) with
// its statistics and parameter gradients in f32. Not here, so f32 only: softmax and
// log_softmax, the losses and metrics, optimizer updates, image augmentation, collectives.
void declare_bf16(OpDef& def) {
  static const std::set<std::string> all_outputs = {"identity",
                                                    "stop_gradient",
                                                    "reshape",
                                                    "zeros_like",
                                                    "ones_like",
                                                    "abs",
                                                    "abs_grad",
                                                    "add",
                                                    "sub",
                                                    "mul",
                                                    "div",
                                                    "neg",
                                                    "exp",
                                                    "log",
                                                    "sqrt",
                                                    "square",
                                                    "maximum",
                                                    "maximum_grad",
                                                    "minimum",
                                                    "minimum_grad",
                                                    "scale_shift",
                                                    "relu",
                                                    "relu_grad",
                                                    "relu6",
                                                    "relu6_grad",
                                                    "leaky_relu",
                                                    "leaky_relu_grad",
                                                    "sigmoid",
                                                    "sigmoid_grad",
                                                    "tanh",
                                                    "tanh_grad",
                                                    "gelu",
                                                    "gelu_grad",
                                                    "swish",
                                                    "swish_grad",
                                                    "softplus",
                                                    "softplus_grad",
                                                    "bias_add",
                                                    "broadcast_to",
                                                    "reduce_sum",
                                                    "reduce_sum_grad",
                                                    "reduce_mean",
                                                    "reduce_mean_grad",
                                                    "reduce_max",
                                                    "reduce_max_grad",
                                                    "concat",
                                                    "slice",
                                                    "slice_grad",
                                                    "dropout",
                                                    "conv2d",
                                                    "conv2d_backward_input",
                                                    "conv2d_backward_filter",
                                                    "matmul",
                                                    "max_pool2d",
                                                    "max_pool2d_grad",
                                                    "avg_pool2d",
                                                    "avg_pool2d_grad"};
  static const std::set<std::string> first_output = {"batch_norm_train", "batch_norm_train_grad",
                                                     "batch_norm_infer", "batch_norm_infer_grad",
                                                     "layer_norm",       "layer_norm_grad"};
  if (all_outputs.count(def.name)) def.bf16 = true;
  if (first_output.count(def.name)) def.bf16 = true, def.bf16_outputs = {0};
  if (def.name == "batch_norm_train_grad") def.bf16_outputs = {0, 3};  // dx, and dz when fused
}

}  // namespace lockstep::ops
