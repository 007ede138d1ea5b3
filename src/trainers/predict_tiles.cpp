// Row independence of inference graphs, and the tile size of predict (predict_tiles.h).
#include "trainers/predict_tiles.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "lockstep/core/config.h"
#include "lockstep/core/env.h"
#include "lockstep/core/parse.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

namespace {

// What a value depends on: nothing computed from the inputs (weights, constants), the inputs
// row by row (dim 0 is the batch; row r only from the inputs' row r), or anything else.
enum class Dep { kConst, kRows, kMixed };

// Whether node n, which reads at least one Rows value and no Mixed one, keeps rows apart: what
// its declaration says (OpDef::rows).
bool keeps_rows(const Graph& g, const Node& n, const std::vector<Dep>& in) {
  const OpDef& def = OpRegistry::get().op(n.op);
  const Shape& out = n.outputs.empty() ? Shape{} : n.outputs[0].shape;
  auto rank = [&](size_t i) { return g.type(n.inputs[i]).shape.rank(); };
  auto dim0 = [&](size_t i) { return g.type(n.inputs[i]).shape[0]; };
  switch (def.rows) {
    case RowRule::pointwise:
    case RowRule::per_row: {
      const bool pointwise = def.rows == RowRule::pointwise;
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] == Dep::kRows && rank(i) != out.rank()) return false;  // rows broadcast across
        // A constant aligned with dim 0 would meet a different row in each tile.
        if (pointwise && in[i] == Dep::kConst && rank(i) == out.rank() && dim0(i) != 1)
          return false;
      }
      return pointwise || in[0] == Dep::kRows;
    }
    case RowRule::by_attrs: {
      std::vector<TensorType> types;
      std::vector<bool> rows;
      for (size_t i = 0; i < in.size(); ++i) {
        types.push_back(g.type(n.inputs[i]));
        rows.push_back(in[i] == Dep::kRows);
      }
      return def.keeps_rows(n, types, rows);
    }
    case RowRule::mixed:
      break;
  }
  return false;  // random (dropout, image_random_*), or mixing rows by design
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
    if (n.op == op::input) {
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
  int64_t min_tiles = 2;
  if (auto e = env::text(env::predict_tile)) {
    rows = parse_int("LOCKSTEP_PREDICT_TILE", *e, 0, int64_t(1) << 30);
  } else {
    // A row wider than kTileBytes / 16 makes tiles of fewer than 16 rows (or the 8-row floor
    // overshoots the target): every tile repeats the step's fixed costs (each kernel's thread
    // synchronisation, weight reorders, the batch-norm folds) over few rows. Those tile only
    // batches of at least kMinTilesWide tiles.
    if (rows < 16) min_tiles = kMinTilesWide;
    rows = std::max<int64_t>(8, rows / 8 * 8);
  }
  return rows > 0 && batch >= min_tiles * rows ? rows : 0;
}

int predict_thread_tiles(int64_t batch) {
  if (!env::flag(env::predict_thread_tiles)) return 1;
  if (env::text(env::predict_tile)) return 1;  // the user's
  const int threads = omp_get_max_threads();
  if (threads < 2 || omp_get_max_active_levels() > 1 || omp_in_parallel()) return 1;
  return batch % threads == 0 && batch / threads >= kMinThreadTileRows ? threads : 1;
}

}  // namespace lockstep
