// XlaProgram: lower, compile, and run with device-resident, donated variables (see
// xla_program.h).
#include "backends/xla/xla_program.h"

#include <chrono>

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
  LS_CHECK(options.num_replicas == 1, "XlaProgram runs one replica (got ", options.num_replicas,
           ")");
  auto t0 = std::chrono::steady_clock::now();
  lowered_ = lower_graph(graph, inputs, outputs, options);
  lower_seconds_ = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  CompileSpec spec{.num_replicas = options.num_replicas};
  for (const LoweredArgument& a : lowered_.arguments)
    spec.argument_types.push_back({dtype_of_elem(a.type.elem), Shape(a.type.dims)});
  exe_ = client_->compile(lowered_.mlir, spec);
  compile_seconds_ = seconds_since(t0);
  variables_.resize(lowered_.arguments.size());
}

void XlaProgram::load_variables() {
  const int device = exe_.device_of_replica(0);
  for (size_t a = 0; a < lowered_.arguments.size(); ++a) {
    const LoweredArgument& arg = lowered_.arguments[a];
    if (arg.kind != LoweredArgument::Kind::variable) continue;
    const Tensor& v = arg.variable->value;
    LS_CHECK(v.defined() && elem_of(v.dtype()) == arg.type.elem && v.shape().vec() == arg.type.dims,
             "XlaProgram: variable '", arg.variable->name, "' is ",
             v.defined() ? std::string(dtype_name(v.dtype())) + v.shape().str() : "undefined",
             ", the program was compiled for ", arg.type.str());
    variables_[a] = client_->to_device(v, device);
  }
  variables_loaded_ = true;
}

std::vector<Tensor> XlaProgram::run(const std::vector<Tensor>& inputs) {
  if (!variables_loaded_) load_variables();
  const int device = exe_.device_of_replica(0);
  std::vector<PjrtBuffer> fed;
  fed.reserve(inputs.size());
  std::vector<PjrtBuffer*> args(lowered_.arguments.size(), nullptr);
  size_t num_inputs = 0;
  for (const LoweredArgument& a : lowered_.arguments)
    num_inputs += a.kind == LoweredArgument::Kind::input;
  LS_CHECK(inputs.size() == num_inputs, "XlaProgram::run: ", inputs.size(), " inputs for ",
           num_inputs, " placeholders");
  for (size_t a = 0; a < lowered_.arguments.size(); ++a) {
    const LoweredArgument& arg = lowered_.arguments[a];
    if (arg.kind == LoweredArgument::Kind::variable) {
      args[a] = &variables_[a];
      continue;
    }
    const Tensor& t = inputs[size_t(arg.input)];
    LS_CHECK(elem_of(t.dtype()) == arg.type.elem && t.shape().vec() == arg.type.dims,
             "XlaProgram::run: input ", arg.input, " is ", dtype_name(t.dtype()), t.shape().str(),
             ", the program takes ", arg.type.str());
    fed.push_back(client_->to_device(t, device));
    args[a] = &fed.back();
  }
  std::vector<PjrtBuffer> results = exe_.execute(args, lowered_.donate());
  std::vector<Tensor> outputs;
  for (size_t r = 0; r < lowered_.results.size(); ++r) {
    const LoweredResult& res = lowered_.results[r];
    if (res.kind == LoweredResult::Kind::output)
      outputs.push_back(client_->to_host(results[r]));
    else
      variables_[size_t(res.argument)] = std::move(results[r]);
  }
  ++runs_;
  return outputs;
}

void XlaProgram::sync_variables_to_host() {
  if (!variables_loaded_) return;
  for (size_t a = 0; a < lowered_.arguments.size(); ++a) {
    const LoweredArgument& arg = lowered_.arguments[a];
    if (arg.kind != LoweredArgument::Kind::variable) continue;
    Tensor& v = arg.variable->value;
    client_->to_host(variables_[a], v.raw(), v.nbytes());
  }
}

}  // namespace lockstep::xla
