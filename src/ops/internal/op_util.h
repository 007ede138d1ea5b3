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

// Mixed precision: the ops that compute in bfloat16 (OpDef::bf16) and, for those with f32
// side outputs, which outputs follow into bf16 (src/ops/op_util.cpp holds the one table).
void declare_bf16(OpDef& def);

// Registers a declared op under `group`, its section of docs/ops.md (src/ops/op_docs.cpp).
inline void add_op(const char* group, OpDef def) {
  def.group = group;
  declare_bf16(def);
  OpRegistry::get().add(std::move(def));
}

// The attributes of `from` that op `to` declares: what a gradient builder hands from a forward
// node to its gradient op (a random op's ranges and seed stay behind).
Attrs attrs_for(const std::string& to, const Attrs& from);

// Shorthands for declarations: {"axis", i64, -1, "..."}.
using enum AttrType;
using enum NoDefault;
using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;

}  // namespace lockstep::ops
