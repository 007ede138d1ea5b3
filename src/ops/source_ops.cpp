// Ops without computation of their own: placeholders, variables, constants, views, and the
// variable writes. Their kernels (fills and copies) are the same code on every host backend.
#include <cstring>

#include "ops/internal/kernel_util.h"
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;
constexpr const char* kGroup = "structure";

Types same_as_input(const Node&, const Types& in) { return {in[0]}; }

// reshape: one -1 allowed; with an unknown input dim the -1 stays unknown.
Types reshape_infer(const Node& n, const Types& in) {
  Shape target(attr_ints(n, "shape"));
  int64_t known = 1;
  int unknown = -1;
  for (int i = 0; i < target.rank(); ++i) {
    if (target[i] < 0) {
      LS_CHECK(unknown < 0, "more than one -1 in target shape ", target.str());
      unknown = i;
    } else {
      known *= target[i];
    }
  }
  int64_t numel = in[0].shape.numel();
  if (numel >= 0) {
    if (unknown >= 0) {
      LS_CHECK(known > 0 && numel % known == 0, "cannot reshape ", in[0].shape.str(), " to ",
               target.str());
      target[unknown] = numel / known;
    }
    LS_CHECK(target.numel() == numel, "cannot reshape ", in[0].shape.str(), " (", numel,
             " elements) to ", target.str());
  }
  return {{in[0].dtype, target}};
}

// (variable read, value) with as many elements: the variable writes.
ShapeFn write_infer(const char* op) {
  return [op](const Node&, const Types& in) {
    expect_inputs(in, 2);
    LS_CHECK(in[0].shape.numel() == in[1].shape.numel(), op, ": ", in[1].shape.str(), " into ",
             in[0].shape.str());
    return Types{};
  };
}

void register_placeholders() {
  add_op(kGroup,
         {.name = op::input,
          .signature = "() -> x",
          .doc = "A placeholder the caller writes before each step.",
          .attrs = {{"shape", i64_list, required, "dims; -1 for the batch, set at compile"},
                    {"dtype", str, "float32", "element type"}},
          .infer =
              [](const Node& n, const Types&) {
                return Types{{dtype_from_name(attr_s(n, "dtype")), Shape(attr_ints(n, "shape"))}};
              },
          .backends = {},
          .onnx = {.none = kOnnxGraphInput},
          .source = Source::placeholder});
  add_op(kGroup, {.name = op::variable,
                  .signature = "() -> value",
                  .doc = "Reads a persistent variable (weights, optimizer slots, metric state).",
                  .infer =
                      [](const Node& n, const Types&) {
                        LS_CHECK(n.variable && n.variable->value.defined(),
                                 "variable without a value");
                        return Types{{n.variable->value.dtype(), n.variable->value.shape()}};
                      },
                  .backends = {},
                  .onnx = {.none = kOnnxInitializer},
                  .source = Source::variable});
  add_op(kGroup, {.name = op::constant,
                  .signature = "() -> y",
                  .doc = "A float32 tensor filled with one value.",
                  .attrs = {{"value", f64, required, "the fill value"},
                            {"shape", i64_list, Ints{}, "dims of the result ([] = a scalar)"}},
                  .infer = [](const Node& n,
                              const Types&) { return Types{f32(Shape(attr_ints(n, "shape")))}; },
                  .onnx = {.op = "Constant"}});
  for (OpId op : {op::ones_like, op::zeros_like})
    add_op(kGroup, {.name = op,
                    .signature = "(x) -> y",
                    .doc = std::string("float32 ") + (op == op::ones_like ? "ones" : "zeros") +
                           " of x's shape (autodiff's seed and missing gradients).",
                    .infer = [](const Node&, const Types& in) { return Types{f32(in[0].shape)}; },
                    .bf16 = true,
                    .rows = RowRule::pointwise,
                    .onnx = {.none = kOnnxAutodiff}});
}

// How the replicas of a program compiled for several devices (the xla backend under
// XlaStrategy) combine their writes to one variable, as tf.VariableAggregation: "sum" (metric
// accumulators: the replicas' increments are added), "mean" (BatchNormalization's moving
// statistics: the replicas' values are averaged) or "same" (every replica writes the same value:
// the iteration count). Unset (undeclared): a replicated program refuses the write. Kernel backends
// run one replica per program and ignore it.
const AttrDecl kAggregationAttr{
    "aggregation", str, optional,
    "how the replicas of a program on several devices combine their writes: sum (metric "
    "totals), mean (moving statistics) or same (a step count); unset: "
    "refused there"};

void register_views_and_writes() {
  add_op(kGroup, {.name = op::identity,
                  .signature = "(x) -> x",
                  .doc = "x itself (a view; the fusion pass turns fused nodes into identities).",
                  .infer = same_as_input,
                  .grad = [](GradBuilder&, const Node&, const Values& dy) { return Values{dy[0]}; },
                  .alias_input = 0,
                  .backends = {},
                  .bf16 = true,
                  .layout_agnostic = true,
                  .rows = RowRule::pointwise,
                  .fusion = kFuseView,
                  .onnx = {.op = "Identity"}});
  add_op(kGroup, {.name = op::stop_gradient,
                  .signature = "(x) -> x",
                  .doc = "x itself, with no gradient flowing back (a view).",
                  .infer = same_as_input,
                  .alias_input = 0,
                  .backends = {},
                  .bf16 = true,
                  .rows = RowRule::pointwise,
                  .onnx = {.op = "Identity"}});
  add_op(kGroup, {.name = op::reshape,
                  .signature = "(x) -> y",
                  .doc = "x with another shape of as many elements (a view).",
                  .attrs = {{"shape", i64_list, required, "target dims; one may be -1"}},
                  .infer = reshape_infer,
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        return Values{b.add(op::reshape, {dy[0]},
                                            Attrs{{"shape", b.type(n.inputs[0]).shape.vec()}})};
                      },
                  .alias_input = 0,
                  .backends = {},
                  .bf16 = true,
                  .rows = RowRule::by_attrs,
                  .keeps_rows = keeps_rows_view,
                  .onnx = {.op = "Reshape"}});
  add_op(kGroup, {.name = op::assign,
                  .signature = "(var, value) -> ()",
                  .doc = "Copies value into the variable read by input 0 (side effect).",
                  .attrs = {kAggregationAttr},
                  .infer = write_infer("assign"),
                  .side_effects = true,
                  .onnx = {.none = kOnnxTrainState}});
  add_op(kGroup, {.name = op::assign_add,
                  .signature = "(var, delta) -> ()",
                  .doc = "var += delta, in place (side effect; metric accumulators).",
                  .attrs = {kAggregationAttr},
                  .infer = write_infer("assign_add"),
                  .side_effects = true,
                  .onnx = {.none = kOnnxTrainState}});
}

KernelFactory fill_kernel(float (*value)(const Node&)) {
  return [value](const Node& n, const Types&) {
    const float v = value(n);
    return make_kernel([v](const KernelArgs& a) { a.out(0).fill(v); });
  };
}

void register_kernels() {
  auto& R = OpRegistry::get();
  for (const std::string& backend : host_backends()) {
    R.add_kernel(op::constant, backend,
                 fill_kernel([](const Node& n) { return float(attr_f(n, "value")); }));
    R.add_kernel(op::ones_like, backend, fill_kernel([](const Node&) { return 1.f; }));
    R.add_kernel(op::zeros_like, backend, fill_kernel([](const Node&) { return 0.f; }));
    R.add_kernel(op::assign, backend, simple_kernel([](const Node&, const KernelArgs& a) {
                   std::memcpy(a.in(0).raw(), a.in(1).raw(), a.in(0).nbytes());
                 }));
    R.add_kernel(op::assign_add, backend, simple_kernel([](const Node&, const KernelArgs& a) {
                   float* d = a.in(0).data<float>();
                   const float* s = a.in(1).data<float>();
                   for (int64_t i = 0, n = a.in(0).numel(); i < n; ++i) d[i] += s[i];
                 }));
  }
}

}  // namespace

LOCKSTEP_REGISTER(source_ops) {
  register_placeholders();
  register_views_and_writes();
  register_kernels();
}

}  // namespace lockstep::ops
