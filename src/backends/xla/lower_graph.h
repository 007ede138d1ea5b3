// Lowering a Lockstep graph to one StableHLO module (`func.func @main`), which PjrtClient
// compiles into one executable for the whole step.
//
// The function's arguments are the graph inputs (in the order given), the step counter when a
// random op needs it, then every variable the program reads or writes (weights, optimizer slots,
// metric state), once each. Its results are the requested outputs, then the new value of every
// variable the program updates (sgd_update, assign, ...), each aliased to that variable's argument:
// run it with that argument donated (LoweredGraph::donate()) and the update happens in place on the
// device, with no copy of the weights per step.
//
// steps_per_execution (LoweringOptions::steps = N > 1): the N steps in one module, each on its
// own inputs, the variables threaded from one step into the next (on the device, in one call:
// the weights never leave it between the N steps). The arguments are step 0's inputs, step 1's,
// ..., the step counter (step k uses counter + k), the variables; the results every step's
// outputs in step order, then the updated variables. Two forms, the same arguments and results:
// - unrolled (the default): the step N times; the compile grows with N;
// - LoweringOptions::loop (LOCKSTEP_XLA_STEP_LOOP=1): one stablehlo.while, the N inputs stacked
//   along a new leading dim (step k takes slice k), its outputs written into stacked buffers and
//   sliced apart after the loop, the variables the loop's carry. The module holds the step once,
//   so the compile is flat in N; but the XLA CPU plugin runs the body 25-40x slower than the
//   same step at the top level (CNN and ResNet steps, 2026-12-07), so it is not the default
//   until that is understood (a GPU plugin may not share it).
//
// Only nodes that the outputs or an update need are emitted. Pure nodes see each variable's
// value from before the step and updates of one variable chain in node order, as in the
// Executable (side effects run after every pure node). An op without a lowering is an error
// naming the op and the node; so is a graph input or variable with an unknown dim.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/xla/stablehlo_emitter.h"
#include "lockstep/graph/graph.h"
#include "lockstep/graph/sharding.h"

namespace lockstep::xla {

struct LoweredArgument {
  // step: the step counter (int64 scalar) that keys the random ops (dropout), as
  // Executable::step(); present only when the program has one.
  enum class Kind { input, variable, step };
  Kind kind = Kind::input;
  // kind input: the index into lower_graph's `inputs`; + step * inputs.size() for step > 0
  int input = -1;
  VariablePtr variable;  // kind variable
  HloType type;
};

struct LoweredResult {
  enum class Kind { output, variable };
  Kind kind = Kind::output;
  // kind output: the index into lower_graph's `outputs`; + step * outputs.size() for step > 0
  int output = -1;
  VariablePtr variable;  // kind variable: the variable's new value
  int argument = -1;     // kind variable: the argument it aliases (donate that one)
  HloType type;
};

struct LoweredGraph {
  std::string mlir;  // the module text, for PjrtClient::compile
  std::vector<LoweredArgument> arguments;
  std::vector<LoweredResult> results;
  int num_replicas = 1;
  // SPMD over a mesh (LoweringOptions::sharding): the mesh, and each argument's and result's
  // layout (its dims' mesh axes; the module keeps whole shapes, each device gets its block).
  // No mesh: one program per replica, unpartitioned.
  std::optional<MeshShape> mesh;
  std::vector<DimAxes> argument_layouts, result_layouts;
  bool shardy = false;  // the annotations are Shardy's (else GSPMD's)
  // Per argument: true for a variable the program updates (its buffer becomes the result's).
  std::vector<bool> donate() const;
};

struct LoweringOptions {
  // Replicas the module is compiled for (PjrtClient::compile's CompileSpec must match): one
  // copy of the step per device, each on its share of the batch.
  int num_replicas = 1;
  // With replicas: every update op's gradient is averaged over the replicas (an all_reduce in
  // the program) before it is applied, so the replicas' variables stay identical.
  bool mean_gradients = true;
  // The random ops' key, as CompileOptions::seed and ::replica (dropout draws the same masks
  // as the reference kernel for the same seed, replica and step).
  uint64_t seed = 0;
  uint32_t replica = 0;
  // Steps per call (steps_per_execution; see above), unrolled or as one while loop.
  int steps = 1;
  bool loop = false;
  // false: only what the outputs need, no variable updates (the first half of a step split
  // around host collectives: xla_backend.cpp).
  bool side_effects = true;
  // A plan to partition the program by (SPMD over its mesh; sharding_lowering.h), or none.
  // Needs num_replicas == 1 and steps == 1.
  std::shared_ptr<const ShardingPlan> sharding;
  // Annotate for Shardy (sdy.mesh, sdy.sharding: the default, as in JAX) or GSPMD
  // (mhlo.sharding, which the CPU plugin still takes but warns is deprecated).
  bool shardy = true;
};

// Lowers the part of `graph` that computes `outputs` and its variable updates. `inputs` are
// the placeholders fed per run (input nodes; the graph's own input list is not consulted).
LoweredGraph lower_graph(const Graph& graph, const std::vector<Value>& inputs,
                         const std::vector<Value>& outputs, const LoweringOptions& options = {});

}  // namespace lockstep::xla
