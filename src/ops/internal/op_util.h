// Helpers shared by op registrations: type checks, broadcasting, axis normalisation, and the
// registration of a declared op under its docs/ops.md section.
#pragma once
#include <vector>

#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::ops {

inline TensorType f32(const Shape& s) { return {DType::f32, s}; }

inline void expect_inputs(const std::vector<TensorType>& in, size_t n) {
  LS_CHECK(in.size() == n, "expected ", n, " inputs, got ", in.size());
}

inline void expect_f32(const TensorType& t, const char* what) {
  LS_CHECK(t.dtype == DType::f32, what, " must be float32, got ", dtype_name(t.dtype),
           t.dtype == DType::bf16 ? " (this op computes in float32 only: cast its input with "
                                    "\"cast\" to float32, as a mixed-precision layer does)"
                                  : "");
}

// numpy broadcasting of two shapes; -1 (unknown) broadcasts like a known dim.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Normalises possibly negative axes against rank; sorts and de-duplicates.
std::vector<int64_t> normalise_axes(std::vector<int64_t> axes, int rank);

// OpDef::keeps_rows rules (RowRule::by_attrs), shared by the ops they fit:
// softmax/log_softmax: the axis is not the batch's.
bool keeps_rows_off_batch_axis(const Node& n, const std::vector<TensorType>& in,
                               const std::vector<bool>& rows);
// reductions: over named axes, none of them the batch's.
bool keeps_rows_reduce(const Node& n, const std::vector<TensorType>& in,
                       const std::vector<bool>& rows);
// concat: along an axis other than the batch's, every operand carrying rows.
bool keeps_rows_concat(const Node& n, const std::vector<TensorType>& in,
                       const std::vector<bool>& rows);
// reshape, broadcast_to: input 0 carries rows (the output keeps dim 0, checked by the caller).
bool keeps_rows_view(const Node& n, const std::vector<TensorType>& in,
                     const std::vector<bool>& rows);
// slice: starting at row 0 (the caller checks the output keeps the batch).
bool keeps_rows_slice(const Node& n, const std::vector<TensorType>& in,
                      const std::vector<bool>& rows);
// pad: input 0 carries rows and the batch axis gets no padding.
bool keeps_rows_pad(const Node& n, const std::vector<TensorType>& in,
                    const std::vector<bool>& rows);
// matmul: rows of a (not transposed) times weights, or a batched product of row-carrying stacks.
bool keeps_rows_matmul(const Node& n, const std::vector<TensorType>& in,
                       const std::vector<bool>& rows);

// Registers a declared op under `group`, its section of docs/ops.md (src/ops/op_docs.cpp).
inline void add_op(const char* group, OpDef def) {
  def.group = group;
  OpRegistry::get().add(std::move(def));
}

// Why an op has no ONNX form (OpDef::onnx.none), by kind of op.
inline const char* const kOnnxGradient =
    "a gradient op: ONNX export writes the inference graph, which has none";
inline const char* const kOnnxTrainState =
    "updates training state (variables, optimizer slots, schedules): not part of an exported model";
inline const char* const kOnnxLossMetric =
    "a loss or metric of the train step: not part of an exported model";
inline const char* const kOnnxCollective =
    "a collective between replicas: not part of an exported model";
inline const char* const kOnnxAugmentation =
    "random augmentation, an identity at inference: the exporter leaves the layer out";
inline const char* const kOnnxImageAdjust =
    "the deterministic half of an augmentation (training only): not part of an exported model";
inline const char* const kOnnxTrainingMode =
    "training-mode batch statistics: the exported model uses batch_norm_infer's "
    "BatchNormalization";
inline const char* const kOnnxBackendFusion =
    "made by the cpu backend's inference fusion after export's graph is fixed; export writes "
    "BatchNormalization";
inline const char* const kOnnxAutodiff = "autodiff's gradient seeds: no inference graph has one";
inline const char* const kOnnxGraphInput = "a placeholder: it becomes an ONNX graph input";
inline const char* const kOnnxInitializer = "a variable read: it becomes an ONNX initializer";

// The attributes of `from` that op `to` declares: what a gradient builder hands from a forward
// node to its gradient op (a random op's ranges and seed stay behind).
Attrs attrs_for(OpId to, const Attrs& from);

// dy through node n's fused activation (its "activation" attribute): the activation op's own
// gradient, which reads only its output (kFuseGradFromOutput), here n's output 0. An error naming
// n for an activation whose gradient needs the value before it, which the fused node does not keep.
Value fused_activation_grad(GradBuilder& b, const Node& n, Value dy);

// Shorthands for declarations: {"axis", i64, -1, "..."}.
using enum AttrType;
using enum NoDefault;
using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

}  // namespace lockstep::ops
