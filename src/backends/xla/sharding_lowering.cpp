// Sharding annotations on @main (see sharding_lowering.h).
#include "backends/xla/sharding_lowering.h"

#include "lockstep/core/error.h"
#include "lockstep/graph/op_ids.h"

namespace lockstep::xla {

std::string gspmd_sharding(const MeshShape& mesh, const DimAxes& axes) {
  std::vector<int> axis_of(axes.size(), -1);
  std::vector<char> used(mesh.shape.size(), 0);
  bool any = false;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].empty()) continue;
    axis_of[i] = mesh.axis(axes[i]);
    LS_CHECK(axis_of[i] >= 0, "xla sharding: axis '", axes[i], "' is not in mesh ", mesh.str());
    used[size_t(axis_of[i])] = 1;
    any = true;
  }
  if (!any) return "{replicated}";
  std::vector<int64_t> tiles;  // per dim, then the replication count when some axis is unused
  for (int a : axis_of) tiles.push_back(a >= 0 ? mesh.shape[size_t(a)] : 1);
  int64_t replicas = 1;
  for (size_t a = 0; a < used.size(); ++a)
    if (!used[a]) replicas *= mesh.shape[a];
  if (replicas > 1) tiles.push_back(replicas);
  std::vector<int64_t> assignment(size_t(mesh.size()), -1);
  for (int64_t p = 0; p < mesh.size(); ++p) {
    const std::vector<int64_t> c = mesh.coordinates(p);
    int64_t tile = 0;
    for (size_t i = 0; i < axis_of.size(); ++i)
      tile = tile * tiles[i] + (axis_of[i] >= 0 ? c[size_t(axis_of[i])] : 0);
    if (replicas > 1) {
      int64_t r = 0;  // row-major over the unused axes
      for (size_t a = 0; a < used.size(); ++a)
        if (!used[a]) r = r * mesh.shape[a] + c[a];
      tile = tile * replicas + r;
    }
    assignment[size_t(tile)] = p;
  }
  std::string s = "{devices=[";
  for (size_t i = 0; i < tiles.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(tiles[i]);
  }
  s += ']';
  for (size_t i = 0; i < assignment.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(assignment[i]);
  }
  return s + (replicas > 1 ? " last_tile_dim_replicate}" : "}");
}

std::string shardy_mesh(const MeshShape& mesh) {
  std::string s = "sdy.mesh @mesh = <[";
  for (size_t i = 0; i < mesh.shape.size(); ++i)
    s += (i ? ", \"" : "\"") + mesh.axis_names[i] + "\"=" + std::to_string(mesh.shape[i]);
  return s + "]>\n";
}

std::string shardy_sharding(const DimAxes& axes) {
  std::string s = "#sdy.sharding<@mesh, [";
  for (size_t i = 0; i < axes.size(); ++i)
    s += std::string(i ? ", " : "") + (axes[i].empty() ? "{}" : "{\"" + axes[i] + "\"}");
  return s + "]>";
}

OutputConstraints output_constraints(const Graph& g, const ShardingPlan& plan, bool shardy) {
  OutputConstraints oc{&plan, shardy, std::vector<char>(size_t(g.size()), 0)};
  for (const Node& n : g.nodes())
    oc.is_output[size_t(n.id)] = !n.name.empty() && n.outputs.size() == 1 &&
                                 n.name.find('/') == std::string::npos && n.op != op::variable &&
                                 n.op != op::input;
  for (const Node& m : g.nodes())
    for (Value v : m.inputs)
      if (g.node(v.node).name == m.name) oc.is_output[size_t(v.node)] = 0;
  return oc;
}

HloValue constrain_output(const OutputConstraints& oc, const Node& n, const HloValue& x,
                          StablehloBuilder& b) {
  if (!oc.plan || !oc.is_output[size_t(n.id)]) return x;
  const std::optional<DimAxes> axes = oc.plan->output_layout(n.name, Shape(x.type.dims));
  if (!axes) return x;
  if (oc.shardy)
    return b.op("sdy.sharding_constraint", {x}, {x.type},
                "sharding = " + shardy_sharding(*axes))[0];
  return b.op("stablehlo.custom_call", {x}, {x.type},
              "call_target_name = \"Sharding\", mhlo.sharding = \"" +
                  gspmd_sharding(oc.plan->mesh(), *axes) + "\"")[0];
}

void annotate_shardings(const ShardingPlan& plan, bool whole_model, bool shardy,
                        StablehloBuilder& b, LoweredGraph& out) {
  const MeshShape& mesh = plan.mesh();
  const std::string batch = plan.batch_axis();
  const int batch_axis = batch.empty() ? -1 : mesh.axis(batch);
  const int64_t batch_parts = batch_axis >= 0 ? mesh.shape[size_t(batch_axis)] : 1;
  // The batch's rows: dim 0 of the first input of rank >= 1.
  int64_t rows = -1;
  for (const LoweredArgument& a : out.arguments)
    if (a.kind == LoweredArgument::Kind::input && a.type.rank() >= 1) {
      rows = a.type.dims[0];
      break;
    }
  auto batch_layout = [&](const HloType& t, bool is_input) {
    DimAxes axes(size_t(t.rank()));
    if (batch_axis >= 0 && t.rank() >= 1 && t.dims[0] % batch_parts == 0 &&
        (is_input || t.dims[0] == rows))
      axes[0] = batch;
    return axes;
  };
  std::vector<const Variable*> variables;
  for (const LoweredArgument& a : out.arguments)
    if (a.kind == LoweredArgument::Kind::variable) variables.push_back(a.variable.get());
  const std::vector<DimAxes> layouts = plan.variable_layouts(variables, whole_model);
  out.mesh = mesh;
  out.shardy = shardy;
  out.argument_layouts.clear();
  size_t v = 0;
  for (const LoweredArgument& a : out.arguments) {
    if (a.kind == LoweredArgument::Kind::variable)
      out.argument_layouts.push_back(layouts.at(v++));
    else if (a.kind == LoweredArgument::Kind::input)
      out.argument_layouts.push_back(batch_layout(a.type, true));
    else
      out.argument_layouts.push_back(DimAxes{});  // the step counter: a scalar on every device
  }
  out.result_layouts.clear();
  for (const LoweredResult& r : out.results)
    out.result_layouts.push_back(r.kind == LoweredResult::Kind::variable
                                     ? out.argument_layouts.at(size_t(r.argument))
                                     : batch_layout(r.type, false));
  auto attribute = [&](const DimAxes& axes) {
    return shardy ? "sdy.sharding = " + shardy_sharding(axes)
                  : "mhlo.sharding = \"" + gspmd_sharding(mesh, axes) + "\"";
  };
  b.set_num_partitions(int(mesh.size()));
  if (shardy) b.set_module_preamble(shardy_mesh(mesh));
  for (size_t i = 0; i < out.argument_layouts.size(); ++i)
    b.set_argument_attributes(int(i), attribute(out.argument_layouts[i]));
  for (size_t i = 0; i < out.result_layouts.size(); ++i)
    b.set_result_attributes(int(i), attribute(out.result_layouts[i]));
}

}  // namespace lockstep::xla
