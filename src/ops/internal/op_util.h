// Helpers shared by op registrations: type checks, broadcasting, axis normalisation.
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
  LS_CHECK(t.dtype == DType::f32, what, " must be float32, got ", dtype_name(t.dtype));
}

// numpy broadcasting of two shapes; -1 (unknown) broadcasts like a known dim.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Normalises possibly negative axes against rank; sorts and de-duplicates.
std::vector<int64_t> normalise_axes(std::vector<int64_t> axes, int rank);

// Registers an op with no gradient whose kernels come later.
inline void add_op(OpDef def) { OpRegistry::get().add(std::move(def)); }

}  // namespace lockstep::ops
