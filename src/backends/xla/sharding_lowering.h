// Sharding annotations for XLA's SPMD partitioner (a program under a ShardingPlan:
// lockstep/graph/sharding.h). The module keeps the whole (global) shapes; each argument and
// result of @main says how it is split over the mesh, XLA's partitioner writes each partition's
// program with the collectives it needs, and each device is fed its block (XlaProgram).
//
// Two spellings, chosen by the plugin (docs/accelerator.md says which the CPU plugin takes):
// - GSPMD: `mhlo.sharding = "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"` per argument
//   and result (the tile assignment lists partitions, which the compile options' device
//   assignment puts on devices);
// - Shardy: a module-level `sdy.mesh @mesh = <["batch"=2, "model"=2]>` and
//   `sdy.sharding = #sdy.sharding<@mesh, [{"batch"}, {}]>`.
#pragma once
#include <string>
#include <vector>

#include "backends/xla/lower_graph.h"
#include "lockstep/graph/sharding.h"

namespace lockstep::xla {

// The GSPMD sharding text of a tensor split as `axes` over `mesh` ("{replicated}" when no dim
// is split).
std::string gspmd_sharding(const MeshShape& mesh, const DimAxes& axes);
// Shardy's: the mesh op and one tensor's sharding attribute value.
std::string shardy_mesh(const MeshShape& mesh);
std::string shardy_sharding(const DimAxes& axes);

// Layer outputs under a plan with output rules (Keras's "<layer>/output"): which nodes of `g`
// are a layer's output (named after the layer, and no consumer is named so; gradient nodes,
// named "<layer>/grad", never are), and the constraint lower_graph puts on each.
struct OutputConstraints {
  const ShardingPlan* plan = nullptr;
  bool shardy = true;
  std::vector<char> is_output;  // per node id
};
OutputConstraints output_constraints(const Graph& g, const ShardingPlan& plan, bool shardy);
// x constrained to the layout the plan gives node n's output 0, or x as it is when none.
HloValue constrain_output(const OutputConstraints& oc, const Node& n, const HloValue& x,
                          StablehloBuilder& b);

// Works out every argument's and result's layout in `out` under `plan` (inputs: dim 0 over the
// batch axis where it divides; variables: the plan's layouts, checked; outputs: dim 0 over the
// batch axis where it has the batch's rows, else replicated; a variable's new value: its
// argument's) and writes them onto @main through `b` (after ret()). `whole_model`: the program
// updates variables (a train step), so the plan may warn about rules that match nothing.
void annotate_shardings(const ShardingPlan& plan, bool whole_model, bool shardy,
                        StablehloBuilder& b, LoweredGraph& out);

}  // namespace lockstep::xla
