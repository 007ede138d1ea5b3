// The StableHLO emitter's shape ops: broadcast_in_dim, reshape, transpose, slice, concatenate,
// reverse and pad (see stablehlo_emitter.h).
#include <algorithm>

#include "backends/xla/stablehlo_emitter.h"
#include "lockstep/core/error.h"

namespace lockstep::xla {

// ---- shapes ----

HloValue StablehloBuilder::broadcast_in_dim(const HloValue& x, const std::vector<int64_t>& dims,
                                            const std::vector<int64_t>& broadcast_dims) {
  LS_CHECK(int(broadcast_dims.size()) == x.type.rank(), "broadcast_in_dim: ", broadcast_dims.size(),
           " broadcast dims for ", x.type.str(), loc());
  for (int i = 0; i < x.type.rank(); ++i) {
    int64_t d = broadcast_dims[i];
    LS_CHECK(
        d >= 0 && d < int64_t(dims.size()) && (x.type.dims[i] == 1 || x.type.dims[i] == dims[d]),
        "broadcast_in_dim: dim ", i, " of ", x.type.str(), " cannot go to dim ", d,
        " of the result", loc());
  }
  if (x.type.dims == dims) return x;
  return op("stablehlo.broadcast_in_dim", {x}, {{x.type.elem, dims}},
            "broadcast_dimensions = " + i64_array(broadcast_dims))[0];
}

HloValue StablehloBuilder::reshape(const HloValue& x, const std::vector<int64_t>& dims) {
  HloType t{x.type.elem, dims};
  LS_CHECK(t.numel() == x.type.numel(), "reshape: ", x.type.str(), " has ", x.type.numel(),
           " elements, ", t.str(), " has ", t.numel(), loc());
  if (t == x.type) return x;
  return op("stablehlo.reshape", {x}, {t})[0];
}

HloValue StablehloBuilder::transpose(const HloValue& x, const std::vector<int64_t>& permutation) {
  LS_CHECK(int(permutation.size()) == x.type.rank(), "transpose: permutation of ",
           permutation.size(), " for ", x.type.str(), loc());
  HloType t{x.type.elem, {}};
  bool identity = true;
  for (size_t i = 0; i < permutation.size(); ++i) {
    t.dims.push_back(x.type.dims.at(permutation[i]));
    identity &= permutation[i] == int64_t(i);
  }
  if (identity) return x;
  return op("stablehlo.transpose", {x}, {t}, "permutation = " + i64_array(permutation))[0];
}

HloValue StablehloBuilder::slice(const HloValue& x, const std::vector<int64_t>& start,
                                 const std::vector<int64_t>& limit,
                                 const std::vector<int64_t>& strides_in) {
  std::vector<int64_t> strides = strides_in;
  if (strides.empty()) strides.assign(x.type.rank(), 1);
  LS_CHECK(int(start.size()) == x.type.rank() && int(limit.size()) == x.type.rank() &&
               int(strides.size()) == x.type.rank(),
           "slice: start, limit and strides need ", x.type.rank(), " entries", loc());
  HloType t{x.type.elem, {}};
  for (int i = 0; i < x.type.rank(); ++i) {
    LS_CHECK(0 <= start[i] && start[i] <= limit[i] && limit[i] <= x.type.dims[i] && strides[i] > 0,
             "slice: [", start[i], ", ", limit[i], ") out of range on dim ", i, " of ",
             x.type.str(), loc());
    t.dims.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
  }
  return op("stablehlo.slice", {x}, {t},
            "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                ", strides = " + i64_array(strides))[0];
}

HloValue StablehloBuilder::dynamic_slice(const HloValue& x, const std::vector<HloValue>& start,
                                         const std::vector<int64_t>& sizes) {
  LS_CHECK(int(start.size()) == x.type.rank() && int(sizes.size()) == x.type.rank(),
           "dynamic_slice: ", x.type.str(), " needs ", x.type.rank(), " starts and sizes", loc());
  for (int i = 0; i < x.type.rank(); ++i)
    LS_CHECK(0 <= sizes[i] && sizes[i] <= x.type.dims[i] && start[i].type.dims.empty() &&
                 start[i].type == start[0].type,
             "dynamic_slice: size ", sizes[i], " or start ", start[i].type.str(), " on dim ", i,
             " of ", x.type.str(), loc());
  std::vector<HloValue> operands{x};
  operands.insert(operands.end(), start.begin(), start.end());
  return op("stablehlo.dynamic_slice", operands, {HloType{x.type.elem, sizes}},
            "slice_sizes = " + i64_array(sizes))[0];
}

HloValue StablehloBuilder::dynamic_update_slice(const HloValue& x, const HloValue& update,
                                                const std::vector<HloValue>& start) {
  LS_CHECK(int(start.size()) == x.type.rank() && update.type.rank() == x.type.rank() &&
               update.type.elem == x.type.elem,
           "dynamic_update_slice: ", update.type.str(), " into ", x.type.str(), loc());
  std::vector<HloValue> operands{x, update};
  operands.insert(operands.end(), start.begin(), start.end());
  return op("stablehlo.dynamic_update_slice", operands, {x.type})[0];
}

std::vector<HloValue> StablehloBuilder::while_loop(const std::vector<HloValue>& init,
                                                   const RegionBody& cond, const RegionBody& body) {
  std::vector<HloType> types;
  for (const HloValue& v : init) types.push_back(v.type);
  return op_with_regions("stablehlo.while", init, types, {{types, cond}, {types, body}});
}

HloValue StablehloBuilder::concatenate(const std::vector<HloValue>& xs, int64_t dimension) {
  LS_CHECK(!xs.empty(), "concatenate: no operands", loc());
  HloType t = xs[0].type;
  LS_CHECK(dimension >= 0 && dimension < t.rank(), "concatenate: dimension ", dimension,
           " out of range for ", t.str(), loc());
  for (size_t k = 1; k < xs.size(); ++k) {
    HloType u = xs[k].type;
    u.dims[dimension] = t.dims[dimension];
    LS_CHECK(u == t, "concatenate: operand ", k, " ", xs[k].type.str(), " does not fit ",
             xs[0].type.str(), loc());
    t.dims[dimension] += xs[k].type.dims[dimension];
  }
  if (xs.size() == 1) return xs[0];
  return op("stablehlo.concatenate", xs, {t},
            "dimension = " + std::to_string(dimension) + " : i64")[0];
}

HloValue StablehloBuilder::reverse(const HloValue& x, const std::vector<int64_t>& dims) {
  if (dims.empty()) return x;
  return op("stablehlo.reverse", {x}, {x.type}, "dimensions = " + i64_array(dims))[0];
}

HloValue StablehloBuilder::pad(const HloValue& x, const HloValue& pad_value,
                               const std::vector<int64_t>& low, const std::vector<int64_t>& high,
                               const std::vector<int64_t>& interior_in) {
  std::vector<int64_t> interior = interior_in;
  if (interior.empty()) interior.assign(x.type.rank(), 0);
  LS_CHECK(int(low.size()) == x.type.rank() && int(high.size()) == x.type.rank() &&
               int(interior.size()) == x.type.rank(),
           "pad: low, high and interior need ", x.type.rank(), " entries", loc());
  HloType t{x.type.elem, {}};
  for (int i = 0; i < x.type.rank(); ++i) {
    int64_t d = x.type.dims[i];
    t.dims.push_back(low[i] + high[i] + d + std::max<int64_t>(d - 1, 0) * interior[i]);
  }
  return op("stablehlo.pad", {x, pad_value}, {t},
            "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                ", interior_padding = " + i64_array(interior))[0];
}

}  // namespace lockstep::xla
