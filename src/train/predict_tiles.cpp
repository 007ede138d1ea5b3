// Row independence of inference graphs, and the tile size of predict (predict_tiles.h).
#include "train/predict_tiles.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "lockstep/core/parse.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

namespace {

// What a value depends on: nothing computed from the inputs (weights, constants), the inputs
// row by row (dim 0 is the batch; row r only from the inputs' row r), or anything else.
enum class Dep { kConst, kRows, kMixed };

// Ops that compute each element from the same element of their operands (with broadcasting).
const std::set<std::string>& elementwise_ops() {
  static const std::set<std::string> ops = {
      "abs",       "add",           "bias_add", "cast",        "div",     "exp",       "gelu",
      "identity",  "leaky_relu",    "log",      "maximum",     "minimum", "mul",       "neg",
      "ones_like", "relu",          "relu6",    "scale_shift", "sigmoid", "softplus",  "sqrt",
      "square",    "stop_gradient", "sub",      "swish",       "tanh",    "zeros_like"};
  return ops;
}

// Ops that map each image (row) of input 0 to the same row of the output, their other inputs
// being weights or statistics (or, batch_norm_infer's residual, rows too).
const std::set<std::string>& per_row_ops() {
  static const std::set<std::string> ops = {"conv2d",           "max_pool2d", "avg_pool2d",
                                            "batch_norm_infer", "layer_norm", "image_resize"};
  return ops;
}

int64_t axis0(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// Whether node n, which reads at least one Rows value and no Mixed one, keeps rows apart.
bool keeps_rows(const Graph& g, const Node& n, const std::vector<Dep>& in) {
  const Shape& out = n.outputs.empty() ? Shape{} : n.outputs[0].shape;
  auto rank = [&](size_t i) { return g.type(n.inputs[i]).shape.rank(); };
  auto dim0 = [&](size_t i) { return g.type(n.inputs[i]).shape[0]; };
  const std::string& op = n.op;
  if (elementwise_ops().count(op) || per_row_ops().count(op)) {
    const bool elementwise = elementwise_ops().count(op) > 0;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == Dep::kRows && rank(i) != out.rank()) return false;  // rows broadcast across
      // A constant aligned with dim 0 would meet a different row in each tile.
      if (elementwise && in[i] == Dep::kConst && rank(i) == out.rank() && dim0(i) != 1)
        return false;
    }
    return !per_row_ops().count(op) || in[0] == Dep::kRows;
  }
  if (op == "softmax" || op == "log_softmax") return axis0(attr_i(n, "axis"), out.rank()) != 0;
  if (op == "reduce_sum" || op == "reduce_mean" || op == "reduce_max") {
    const auto& axes = attr_ints(n, "axes");
    if (axes.empty()) return false;  // all axes
    for (int64_t a : axes)
      if (axis0(a, rank(0)) == 0) return false;
    return true;
  }
  if (op == "concat") {
    if (axis0(attr_i(n, "axis"), out.rank()) == 0) return false;
    return std::all_of(in.begin(), in.end(), [](Dep d) { return d == Dep::kRows; });
  }
  if (op == "reshape" || op == "broadcast_to") return in[0] == Dep::kRows && rank(0) >= 1;
  if (op == "slice") {
    const auto& begin = attr_ints(n, "begin");
    return !begin.empty() && begin[0] == 0;
  }
  if (op == "matmul") {
    if (attr_b(n, "transpose_a") || in[0] != Dep::kRows || rank(0) < 2) return false;
    return in[1] == Dep::kConst ? rank(1) == 2 || dim0(1) == 1 : rank(0) >= 3 && rank(1) >= 3;
  }
  return false;  // unknown, random (dropout, image_random_*), or mixing rows by design
}

// Runs the analysis; returns false (with *why) at the first node that mixes rows.
bool analyse(const Graph& g, const std::vector<Value>& inputs, const std::vector<Value>& outputs,
             int64_t batch, std::string* why, int64_t* widest) {
  std::vector<std::vector<Dep>> dep(size_t(g.size()));
  auto fail = [&](const Node& n, const std::string& what) {
    if (why) *why = n.op + (n.name.empty() ? "" : " '" + n.name + "'") + ": " + what;
    return false;
  };
  std::set<int> input_nodes;
  for (Value v : inputs) input_nodes.insert(v.node);
  int64_t wide = 0;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    Dep d = Dep::kConst;
    if (n.op == "input") {
      if (!input_nodes.count(i)) return fail(n, "a placeholder that is not a model input");
      d = Dep::kRows;
    } else {
      std::vector<Dep> in;
      for (Value v : n.inputs) in.push_back(dep[size_t(v.node)][size_t(v.index)]);
      const bool rows = std::count(in.begin(), in.end(), Dep::kRows) > 0;
      if (std::count(in.begin(), in.end(), Dep::kMixed) > 0) {
        d = Dep::kMixed;
      } else if (rows) {
        d = keeps_rows(g, n, in) ? Dep::kRows : Dep::kMixed;
        if (d == Dep::kMixed) return fail(n, "combines rows of the batch");
      }
    }
    if (d == Dep::kRows)
      for (const TensorType& t : n.outputs) {
        if (t.shape.rank() < 1 || t.shape[0] != batch)
          return fail(n, "an output without the batch as dim 0 (" + t.str() + ")");
        wide = std::max<int64_t>(wide, int64_t(t.shape.numel() / batch * dtype_size(t.dtype)));
      }
    dep[size_t(i)].assign(n.outputs.size(), d);
  }
  for (Value v : outputs)
    if (dep[size_t(v.node)][size_t(v.index)] != Dep::kRows)
      return fail(g.node(v.node), "an output that does not come row by row from the inputs");
  if (widest) *widest = wide;
  return true;
}

}  // namespace

bool rows_independent(const Graph& g, const std::vector<Value>& inputs,
                      const std::vector<Value>& outputs, int64_t batch, std::string* why,
                      int64_t* widest_row_bytes) {
  return analyse(g, inputs, outputs, batch, why, widest_row_bytes);
}

int64_t predict_tile_rows(int64_t batch, int64_t row_bytes) {
  int64_t rows = row_bytes > 0 ? kTileBytes / row_bytes : batch;
  if (const char* e = std::getenv("LOCKSTEP_PREDICT_TILE"); e && *e)
    rows = parse_int("LOCKSTEP_PREDICT_TILE", e, 0, int64_t(1) << 30);
  else
    rows = std::max<int64_t>(8, rows / 8 * 8);
  return rows > 0 && batch >= 2 * rows ? rows : 0;
}

}  // namespace lockstep
