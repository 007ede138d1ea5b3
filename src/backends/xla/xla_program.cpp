// XlaProgram: lower, compile, and run with device-resident, donated variables (see
// xla_program.h).
#include "backends/xla/xla_program.h"

#include <chrono>
#include <cstdio>

#include "lockstep/core/error.h"

namespace lockstep::xla {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

XlaProgram::XlaProgram(std::shared_ptr<PjrtClient> client, const Graph& graph,
                       const std::vector<Value>& inputs, const std::vector<Value>& outputs,
                       const LoweringOptions& options)
    : client_(std::move(client)) {
  LS_CHECK(client_, "XlaProgram: no PJRT client");
  auto t0 = std::chrono::steady_clock::now();
  lowered_ = lower_graph(graph, inputs, outputs, options);
  lower_seconds_ = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  CompileSpec spec{.num_replicas = options.num_replicas};
  if (partitioned()) {
    const MeshShape& mesh = *lowered_.mesh;
    spec.num_partitions = int(mesh.size());
    spec.spmd = true;
    spec.shardy = lowered_.shardy;
    spec.device_assignment = mesh.devices;
  }
  for (size_t i = 0; i < lowered_.arguments.size(); ++i) {  // (each device's block)
    const LoweredArgument& a = lowered_.arguments[i];
    const Shape whole(a.type.dims);
    spec.argument_types.push_back(
        {dtype_of_elem(a.type.elem),
         partitioned() ? shard_shape(whole, *lowered_.mesh, lowered_.argument_layouts[i]) : whole});
  }
  exe_ = client_->compile(lowered_.mlir, spec);
  if (partitioned())
    for (int p = 0; p < exe_.num_replicas(); ++p)
      LS_CHECK(exe_.device_of_replica(p) == lowered_.mesh->devices[size_t(p)],
               "XlaProgram: the plugin put partition ", p, " on device ", exe_.device_of_replica(p),
               ", the mesh on device ", lowered_.mesh->devices[size_t(p)]);
  compile_seconds_ = seconds_since(t0);
  memory_ = exe_.memory_stats();
  if (partitioned()) {
    std::string format;
    const std::string program = exe_.optimized_program(&format);
    if (!program.empty()) compiled_ = read_compiled_module(program, format);
  }
  variables_.resize(size_t(exe_.num_replicas()));
  for (auto& v : variables_) v.resize(lowered_.arguments.size());
}

std::string XlaProgram::chosen_layouts_line() const {
  if (!partitioned()) return {};
  if (!compiled_.read)
    return "the plugin does not give back the partitioned program, so the compiler's shardings "
           "are not known (the annotated ones are used)";
  const MeshShape& mesh = *lowered_.mesh;
  std::string changed;
  auto compare = [&](const std::vector<std::string>& chosen, const std::vector<DimAxes>& asked,
                     auto type_of, auto name_of, int& kept, int& known) {
    for (size_t i = 0; i < chosen.size() && i < asked.size(); ++i) {
      ++known;
      const std::optional<DimAxes> got = layout_of_sharding(chosen[i], mesh, type_of(i));
      if (got && *got == asked[i]) {
        ++kept;
      } else if (changed.empty()) {
        changed = name_of(i) + ": asked " + dim_axes_str(asked[i]) + ", compiled " +
                  (got ? dim_axes_str(*got) : chosen[i]);
      }
    }
  };
  int args_kept = 0, args_known = 0, results_kept = 0, results_known = 0;
  compare(
      compiled_.parameter_shardings, lowered_.argument_layouts,
      [&](size_t i) { return lowered_.arguments[i].type.rank(); },
      [&](size_t i) {
        const LoweredArgument& a = lowered_.arguments[i];
        return a.kind == LoweredArgument::Kind::variable ? "variable '" + a.variable->name + "'"
                                                         : "argument " + std::to_string(i);
      },
      args_kept, args_known);
  compare(
      compiled_.result_shardings, lowered_.result_layouts,
      [&](size_t i) { return lowered_.results[i].type.rank(); },
      [&](size_t i) {
        const LoweredResult& r = lowered_.results[i];
        return r.kind == LoweredResult::Kind::variable
                   ? "the new value of '" + r.variable->name + "'"
                   : "output " + std::to_string(r.output);
      },
      results_kept, results_known);
  std::string line;
  if (args_known + results_known == 0)
    line = "the compiled module records no entry shardings";
  else
    line = "the compiler kept " + std::to_string(args_kept) + " of " + std::to_string(args_known) +
           " argument and " + std::to_string(results_kept) + " of " +
           std::to_string(results_known) + " result layouts as annotated" +
           (changed.empty() ? "" : " (first change: " + changed + ")");
  line += "; collectives per step:";
  if (compiled_.collectives.empty()) line += " none";
  bool first = true;
  for (const auto& [op, count] : compiled_.collectives) {
    line += std::string(first ? " " : ", ") + op + " x" + std::to_string(count);
    first = false;
  }
  return line;
}

XlaProgram::Transfers& XlaProgram::transfers() {
  static Transfers counts;
  return counts;
}

void XlaProgram::upload(size_t a) {
  const LoweredArgument& arg = lowered_.arguments[a];
  const Tensor& v = arg.variable->value;
  LS_CHECK(v.defined() && elem_of(v.dtype()) == arg.type.elem && v.shape().vec() == arg.type.dims,
           "XlaProgram: variable '", arg.variable->name, "' is ",
           v.defined() ? std::string(dtype_name(v.dtype())) + v.shape().str() : "undefined",
           ", the program was compiled for ", arg.type.str());
  for (int r = 0; r < exe_.num_replicas(); ++r)
    variables_[size_t(r)][a] = client_->to_device(block(a, v, r), exe_.device_of_replica(r));
  (held_.empty() || !held_[a] ? transfers().other_uploads : transfers().held_uploads) += 1;
}

void XlaProgram::load_variables() {
  for (size_t a = 0; a < lowered_.arguments.size(); ++a)
    if (lowered_.arguments[a].kind == LoweredArgument::Kind::variable) upload(a);
  variables_loaded_ = true;
}

void XlaProgram::set_held(const std::function<bool(const Variable*)>& held) {
  held_.assign(lowered_.arguments.size(), false);
  holds_any_ = updates_held_ = false;
  for (size_t a = 0; a < lowered_.arguments.size(); ++a) {
    const LoweredArgument& arg = lowered_.arguments[a];
    held_[a] = arg.kind == LoweredArgument::Kind::variable && held(arg.variable.get());
    holds_any_ = holds_any_ || held_[a];
  }
  for (const LoweredResult& res : lowered_.results)
    if (res.kind == LoweredResult::Kind::variable && held_[size_t(res.argument)])
      updates_held_ = true;
}

void XlaProgram::upload_variables(Which which) {
  for (size_t a = 0; a < lowered_.arguments.size(); ++a) {
    if (lowered_.arguments[a].kind != LoweredArgument::Kind::variable) continue;
    const bool held = !held_.empty() && held_[a];
    if (held == (which == Which::held)) upload(a);
  }
  variables_loaded_ = true;
}

void XlaProgram::download_variables(Which which) {
  for (const LoweredResult& res : lowered_.results) {
    if (res.kind != LoweredResult::Kind::variable) continue;
    const bool held = !held_.empty() && held_[size_t(res.argument)];
    if (held != (which == Which::held)) continue;
    fetch(size_t(res.argument), res.variable->value);
    (held ? transfers().held_downloads : transfers().other_downloads) += 1;
  }
}

Tensor XlaProgram::block(size_t a, const Tensor& whole, int d) const {
  if (!partitioned()) return whole;
  const DimAxes& axes = lowered_.argument_layouts[a];
  for (const std::string& axis : axes)
    if (!axis.empty()) return shard_of(whole, *lowered_.mesh, axes, d);
  return whole;
}

void XlaProgram::fetch(size_t a, Tensor& dst) const {
  if (!partitioned()) {
    client_->to_host(variables_[0][a], dst.raw(), dst.nbytes());
    return;
  }
  const DimAxes& axes = lowered_.argument_layouts[a];
  for (int64_t p : covering_positions(*lowered_.mesh, axes))
    place_shard(dst, client_->to_host(variables_[size_t(p)][a]), *lowered_.mesh, axes, p);
}

std::vector<int64_t> XlaProgram::variable_device_bytes(const Variable* v) const {
  std::vector<int64_t> out;
  for (size_t a = 0; a < lowered_.arguments.size(); ++a)
    if (lowered_.arguments[a].variable.get() == v && variables_loaded_)
      for (const auto& device : variables_) out.push_back(device[a].on_device_bytes());
  return out;
}

std::vector<Tensor> XlaProgram::run(const std::vector<Tensor>& inputs) {
  if (partitioned()) {
    if (!variables_loaded_) load_variables();
    const size_t D = size_t(exe_.num_replicas());
    std::vector<std::vector<PjrtBuffer>> fed(D);
    std::vector<std::vector<PjrtBuffer*>> args(D);
    for (size_t d = 0; d < D; ++d) {
      fed[d].reserve(lowered_.arguments.size());
      for (size_t a = 0; a < lowered_.arguments.size(); ++a)
        args[d].push_back(argument(int(d), a, inputs, fed[d]));
    }
    std::vector<std::vector<PjrtBuffer>> results = exe_.execute_replicas(args, lowered_.donate());
    std::vector<Tensor> outputs;
    const MeshShape& mesh = *lowered_.mesh;
    for (size_t k = 0; k < lowered_.results.size(); ++k) {
      const LoweredResult& res = lowered_.results[k];
      if (res.kind == LoweredResult::Kind::variable) {
        for (size_t d = 0; d < D; ++d)
          variables_[d][size_t(res.argument)] = std::move(results[d][k]);
        continue;
      }
      const DimAxes& axes = lowered_.result_layouts[k];
      Tensor whole = Tensor::zeros(Shape(res.type.dims), dtype_of_elem(res.type.elem));
      for (int64_t p : covering_positions(mesh, axes))
        place_shard(whole, client_->to_host(results[size_t(p)][k]), mesh, axes, p);
      outputs.push_back(whole);
    }
    ++runs_;
    ++step_;
    transfers().runs += 1;
    return outputs;
  }
  LS_CHECK(num_replicas() == 1, "XlaProgram::run: the program has ", num_replicas(),
           " replicas; use run_replicas");
  return run_replicas({inputs})[0];
}

std::vector<std::vector<Tensor>> XlaProgram::run_replicas(
    const std::vector<std::vector<Tensor>>& inputs) {
  if (!variables_loaded_) load_variables();
  const size_t R = size_t(num_replicas());
  LS_CHECK(inputs.size() == R, "XlaProgram::run_replicas: ", inputs.size(), " input lists for ", R,
           " replicas");
  std::vector<std::vector<PjrtBuffer>> fed(R);
  std::vector<std::vector<PjrtBuffer*>> args(R);
  for (size_t r = 0; r < R; ++r) {
    fed[r].reserve(lowered_.arguments.size());
    for (size_t a = 0; a < lowered_.arguments.size(); ++a)
      args[r].push_back(argument(int(r), a, inputs[r], fed[r]));
  }
  std::vector<std::vector<PjrtBuffer>> results = exe_.execute_replicas(args, lowered_.donate());
  std::vector<std::vector<Tensor>> outputs(R);
  for (size_t r = 0; r < R; ++r)
    for (size_t k = 0; k < lowered_.results.size(); ++k) {
      const LoweredResult& res = lowered_.results[k];
      if (res.kind == LoweredResult::Kind::output)
        outputs[r].push_back(client_->to_host(results[r][k]));
      else
        variables_[r][size_t(res.argument)] = std::move(results[r][k]);
    }
  ++runs_;
  ++step_;
  transfers().runs += 1;
  return outputs;
}

PjrtBuffer* XlaProgram::argument(int replica, size_t a, const std::vector<Tensor>& inputs,
                                 std::vector<PjrtBuffer>& fed) {
  const LoweredArgument& arg = lowered_.arguments[a];
  if (arg.kind == LoweredArgument::Kind::variable) return &variables_[size_t(replica)][a];
  if (arg.kind == LoweredArgument::Kind::step) {
    Tensor step = Tensor::zeros(Shape{}, DType::i64);
    step.data<int64_t>()[0] = int64_t(step_);
    fed.push_back(client_->to_device(step, exe_.device_of_replica(replica)));
    return &fed.back();
  }
  LS_CHECK(arg.input < int(inputs.size()), "XlaProgram::run: ", inputs.size(),
           " inputs, the program takes input ", arg.input);
  const Tensor& t = inputs[size_t(arg.input)];
  LS_CHECK(elem_of(t.dtype()) == arg.type.elem && t.shape().vec() == arg.type.dims,
           "XlaProgram::run: input ", arg.input, " is ", dtype_name(t.dtype()), t.shape().str(),
           ", the program takes ", arg.type.str());
  fed.push_back(client_->to_device(block(a, t, replica), exe_.device_of_replica(replica)));
  return &fed.back();
}

void XlaProgram::sync_variables_to_host() {
  if (!variables_loaded_) return;
  for (size_t a = 0; a < lowered_.arguments.size(); ++a) {
    const LoweredArgument& arg = lowered_.arguments[a];
    if (arg.kind != LoweredArgument::Kind::variable) continue;
    fetch(a, arg.variable->value);
  }
}

}  // namespace lockstep::xla
