// The lowering table: for each Lockstep op, a function that emits its StableHLO given the
// lowered inputs. The functions are registered per op family (lowering_*.cpp, in
// LOCKSTEP_REGISTER blocks) and looked up by lower_graph (lower_graph.h).
//
// A lowering computes what the op's reference kernel computes (src/backends/reference), in the
// same order of floating-point operations where that is cheap. Inputs arrive in float32 even
// when the graph holds bfloat16 (mixed precision): as the executable's bf16 adapter does for a
// kernel without bf16 support, lower_graph widens bf16 inputs and rounds the float outputs back
// to the node's declared dtype. Integer inputs (labels) arrive as they are.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/xla/stablehlo_emitter.h"
#include "lockstep/graph/fused_activation.h"
#include "lockstep/graph/graph.h"

namespace lockstep::xla {

class LoweringContext {
 public:
  LoweringContext(StablehloBuilder& builder, const Graph& graph) : b(builder), graph(graph) {}
  StablehloBuilder& b;
  const Graph& graph;

  // Input i of node n as lowered (bf16 widened to f32; cast sees it as it is: raw()).
  HloValue in(const Node& n, int i) const;
  HloValue raw(const Node& n, int i) const;
  // Inputs i and j of a contraction (matmul, convolution): both as they are when both are
  // bf16 (mixed_bfloat16: the matrix units take bf16 operands and the product accumulates in
  // float32, the contraction's `accumulate` type), else both as in(). `.first`/`.second`.
  std::pair<HloValue, HloValue> contraction_operands(const Node& n, int i, int j) const;
  int num_inputs(const Node& n) const { return int(n.inputs.size()); }
  const TensorType& in_type(const Node& n, int i) const { return graph.type(n.inputs[i]); }

  // Input i of an update op, the gradient: with replicas (num_replicas > 1 and
  // mean_gradients), its mean over every replica, an all_reduce inside the program, so every
  // replica applies the same update (data parallelism the TPUStrategy way).
  HloValue gradient(const Node& n, int i);

  // The variable read by input i of an update op, as updated so far in this program (updates
  // of one variable chain in node order; pure nodes always see the value before the step).
  HloValue variable_value(const Node& n, int i) const;
  // Records the new value of the variable read by input i of update op n.
  void update_variable(const Node& n, int i, const HloValue& value);

  // ---- helpers for the lowering functions ----
  // A tensor of `type` with every element `value`.
  HloValue full(const HloType& type, double value);
  HloValue full_like(const HloValue& like, double value) { return full(like.type, value); }
  // numpy broadcasting of x to `dims` (x's dims right-aligned; size-1 dims repeat).
  HloValue broadcast_numpy(const HloValue& x, const std::vector<int64_t>& dims);
  // Both operands broadcast to their common (numpy) shape.
  std::pair<HloValue, HloValue> broadcast_pair(const HloValue& a, const HloValue& b);
  // Sum / max of x over `axes` (sorted, no duplicates); the reduced dims dropped.
  HloValue reduce_sum(const HloValue& x, const std::vector<int64_t>& axes);
  HloValue reduce_max(const HloValue& x, const std::vector<int64_t>& axes);
  // x (reduced over `axes`, dims dropped) broadcast back to `dims` (the unreduced shape).
  HloValue expand_back(const HloValue& x, const std::vector<int64_t>& dims,
                       const std::vector<int64_t>& axes);

  int num_replicas = 1;        // LoweringOptions::num_replicas
  bool mean_gradients = true;  // LoweringOptions::mean_gradients
  uint64_t seed = 0;           // LoweringOptions::seed
  uint32_t replica = 0;        // LoweringOptions::replica
  HloValue step;               // the step argument (int64 scalar); name empty when none

  // Filled by lower_graph.
  std::map<std::pair<int, int>, HloValue> values;       // (node, output) -> value
  std::map<const Variable*, HloValue> variable_values;  // the current value of a variable
  std::vector<const Variable*> updated;                 // in first-update order
 private:
  const Variable* variable_of(const Node& n, int i) const;
};

// Emits node n; returns one value per output of n (none for an update op, which calls
// LoweringContext::update_variable instead).
using LowerFn = std::function<std::vector<HloValue>(LoweringContext&, const Node&)>;

void register_lowering(OpId op, LowerFn fn);
const LowerFn* find_lowering(OpId op);

// y through fused activation `a` (a producer's "activation" attribute), lowered as the
// activation's own op is lowered.
HloValue lower_fused_activation(LoweringContext& cx, FusedActivation a, const HloValue& y);

// Shorthands for the lowering files.
inline HloType hlo_type(const TensorType& t) { return {elem_of(t.dtype), t.shape.vec()}; }
std::vector<int64_t> all_axes(int rank);
// A reduce node's axes (attr "axes", [] = all; negative from the end), sorted.
std::vector<int64_t> node_axes(const Node& n, int rank);

}  // namespace lockstep::xla
