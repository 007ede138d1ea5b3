// Executable (lockstep/graph/executable.h): runs the passes, then has the backend compile.
#include "lockstep/graph/executable.h"

#include <chrono>
#include <cstdio>

#include "graph/internal/passes.h"
#include "lockstep/core/config.h"
#include "lockstep/core/env.h"

namespace lockstep {

namespace {

// LOCKSTEP_DUMP_GRAPH=1: the live program after the passes, in schedule order.
void dump_graph(const Graph& g, const std::vector<Value>& outputs) {
  const std::vector<int> schedule = schedule_nodes(g, outputs);
  std::fprintf(stderr, "--- executable: %zu live nodes\n", schedule.size());
  for (int i : schedule) {
    const Node& n = g.node(i);
    std::string line = "%" + std::to_string(i) + " = " + n.op + "(";
    for (size_t k = 0; k < n.inputs.size(); ++k)
      line += (k ? ", %" : "%") + std::to_string(n.inputs[k].node) + ":" +
              std::to_string(n.inputs[k].index);
    line += ") {" + n.attrs.str() + "} ->";
    for (const auto& t : n.outputs) line += " " + t.str();
    std::fprintf(stderr, "%s  # %s\n", line.c_str(), n.name.c_str());
  }
}

// The host side of a copy at the program's edge: defined, on the host, contiguous, and of the
// edge buffer's shape and dtype.
void check_host_side(const char* what, int i, const Tensor& host, const Tensor& edge) {
  LS_CHECK(host.defined() && host.device().type == DeviceType::cpu && host.is_contiguous(),
           "Executable::", what, "(", i, "): needs a contiguous host tensor");
  const bool same = host.shape() == edge.shape() && host.dtype() == edge.dtype();
  LS_CHECK(same, "Executable::", what, "(", i, "): host tensor is ", dtype_name(host.dtype()),
           host.shape().str(), ", the program's is ", dtype_name(edge.dtype()), edge.shape().str());
}

}  // namespace

Executable::Executable(const Graph& graph, std::vector<Value> inputs, std::vector<Value> outputs,
                       CompileOptions options)
    : options_(std::move(options)) {
  auto t0 = std::chrono::steady_clock::now();
  const Backend& backend = find_backend(options_.backend);
  step_.seed = options_.seed;
  step_.replica = options_.replica;
  for (Value v : inputs)
    LS_CHECK(v.valid() && v.node < graph.size() &&
                 OpRegistry::get().op(graph.node(v.node).op).source == Source::placeholder,
             "Executable: input ", v.node, " is not a placeholder");
  for (Value v : outputs)
    LS_CHECK(v.valid() && v.node < graph.size(), "Executable: invalid output value");
  Graph g = graph;
  // LOCKSTEP_FUSE=0: no fusion or layout pass in any executable (A/B profiling of the passes).
  if (options_.fuse && !options_.eager && env::flag(env::fuse)) {
    fuse_updates(g, outputs, report_);
    backend.run_passes(g, outputs, report_);
  }
  if (env::flag(env::dump_graph)) dump_graph(g, outputs);
  program_ = backend.compile(std::move(g), std::move(inputs), std::move(outputs), options_, &step_);
  const auto& more = program_->report();
  report_.insert(report_.end(), more.begin(), more.end());
  compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Executable::~Executable() = default;

void Executable::copy_input_from_host(int i, const Tensor& host) {
  LS_CHECK(i >= 0 && i < num_inputs(), "Executable::copy_input_from_host: no input ", i, " (",
           num_inputs(), " inputs)");
  check_host_side("copy_input_from_host", i, host, program_->input(i));
  program_->copy_input_from_host(i, host);
}

void Executable::copy_output_to_host(int i, Tensor& host) const {
  LS_CHECK(i >= 0 && i < num_outputs(), "Executable::copy_output_to_host: no output ", i, " (",
           num_outputs(), " outputs", options_.eager ? "; eager outputs exist after run()" : "",
           ")");
  const Tensor& out = program_->output(i);
  if (!host.defined()) host = Tensor::empty(out.shape(), out.dtype());
  check_host_side("copy_output_to_host", i, host, out);
  program_->copy_output_to_host(i, host);
}

void Executable::run() {
  program_->run();
  ++step_.step;
}

}  // namespace lockstep
