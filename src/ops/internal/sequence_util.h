// Shared by the reference and cpu kernels of the sequence ops (src/ops/sequence_ops.cpp): any
// dtype read as a double, the id check of gather, and gather's and cumsum's geometry.
#pragma once
#include <cstdint>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::seq {

inline double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::i32:
      return static_cast<const int32_t*>(p)[i];
    case DType::i64:
      return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::bf16:
      return bf16_to_f32(static_cast<const bf16*>(p)[i]);
    default:
      LS_FAIL("dtype ", dtype_name(t), " not supported");
  }
}

inline void store(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = float(v);
      break;
    case DType::i32:
      static_cast<int32_t*>(p)[i] = int32_t(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(p)[i] = int64_t(v);
      break;
    case DType::bf16:
      static_cast<bf16*>(p)[i] = f32_to_bf16(float(v));
      break;
    case DType::u8:
      static_cast<uint8_t*>(p)[i] = uint8_t(int64_t(v));
      break;
    default:
      LS_FAIL("dtype ", dtype_name(t), " not supported");
  }
}

// Id i of an int32 or int64 ids tensor.
inline int64_t id_at(const Tensor& ids, int64_t i) {
  return ids.dtype() == DType::i32 ? int64_t(ids.data<int32_t>()[i]) : ids.data<int64_t>()[i];
}

// Every id in [0, rows), or an error naming the node (the layer: Embedding names its gather
// after itself), the first id outside and the range. Run before any read of the table.
inline void check_ids(const Tensor& ids, int64_t rows, const std::string& node) {
  for (int64_t i = 0, m = ids.numel(); i < m; ++i) {
    const int64_t id = id_at(ids, i);
    if (id < 0 || id >= rows)
      LS_FAIL("'", node, "': id ", id, " (at flat position ", i, " of the ids ", ids.shape().str(),
              ") is out of range: valid ids are [0, ", rows,
              "); check the vocabulary size (Embedding's input_dim) against the data");
  }
}

// The table as [outer, rows, inner] around the indexed axis; `ids` ids.
struct GatherGeometry {
  int64_t outer = 1, rows = 0, inner = 1, ids = 0;
};

inline GatherGeometry gather_geometry(const Node& n, const Shape& table, int64_t num_ids) {
  int64_t axis = attr_i(n, "axis");
  if (axis < 0) axis += table.rank();
  GatherGeometry g;
  for (int i = 0; i < axis; ++i) g.outer *= table[i];
  g.rows = table[int(axis)];
  for (int i = int(axis) + 1; i < table.rank(); ++i) g.inner *= table[i];
  g.ids = num_ids;
  return g;
}

// gather_grad's (dy, ids) -> dtable [outer, size, inner].
inline GatherGeometry gather_grad_geometry(const Node& n, int64_t num_ids) {
  return gather_geometry(n, n.outputs[0].shape, num_ids);
}

// Three operands broadcast against an output (numpy): the offset of each for element i.
struct Broadcast3 {
  int r = 0;
  int64_t dims[Shape::kMaxRank] = {}, st[3][Shape::kMaxRank] = {};
  Broadcast3(const Shape& out, const Shape& a, const Shape& b, const Shape& c) : r(out.rank()) {
    const Shape* ops[3] = {&a, &b, &c};
    for (int k = 0; k < 3; ++k) {
      const int lead = r - ops[k]->rank();
      int64_t acc = 1;
      for (int d = r - 1; d >= 0; --d) {
        const int64_t n = d >= lead ? (*ops[k])[d - lead] : 1;
        st[k][d] = n == 1 ? 0 : acc;
        acc *= n;
      }
    }
    for (int d = 0; d < r; ++d) dims[d] = out[d];
  }
  void offsets(int64_t i, int64_t* o) const {
    o[0] = o[1] = o[2] = 0;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t idx = i % dims[d];
      i /= dims[d];
      for (int k = 0; k < 3; ++k) o[k] += idx * st[k][d];
    }
  }
};

// cumsum over [outer, len, inner]: lines (o, k) each summed along len.
struct CumsumGeometry {
  int64_t outer = 1, len = 1, inner = 1;
  bool exclusive = false, reverse = false;
};

inline CumsumGeometry cumsum_geometry(const Node& n, const Shape& x) {
  int64_t axis = attr_i(n, "axis");
  if (axis < 0) axis += x.rank();
  CumsumGeometry g;
  for (int i = 0; i < axis; ++i) g.outer *= x[i];
  g.len = x[int(axis)];
  for (int i = int(axis) + 1; i < x.rank(); ++i) g.inner *= x[i];
  g.exclusive = attr_b(n, "exclusive");
  g.reverse = attr_b(n, "reverse");
  return g;
}

// Lines [first, last) of outer * inner, each a running sum in double (then rounded once).
inline void cumsum_rows(const float* x, float* y, const CumsumGeometry& g, int64_t first,
                        int64_t last) {
  for (int64_t line = first; line < last; ++line) {
    const int64_t o = line / g.inner, k = line % g.inner;
    const int64_t base = o * g.len * g.inner + k;
    double acc = 0;
    for (int64_t j = 0; j < g.len; ++j) {
      const int64_t t = g.reverse ? g.len - 1 - j : j;
      const int64_t at = base + t * g.inner;
      if (g.exclusive) {
        y[at] = float(acc);
        acc += x[at];
      } else {
        acc += x[at];
        y[at] = float(acc);
      }
    }
  }
}

}  // namespace lockstep::seq
