// The xla backend (lockstep/graph/backend.h): the whole graph lowered to one StableHLO module
// (lower_graph.h) and compiled by a PJRT plugin into one executable (xla_program.h), instead of
// a kernel per node. CompileOptions{.backend = "xla"} selects it; the plugin is the one named by
// env LOCKSTEP_XLA_PLUGIN (a path, or "cpu", "cuda", "tpu"; see pjrt_plugin.h), the CPU plugin
// when unset. One PJRT client per plugin per process, created at the first compile.
//
// The program's edges are host tensors: input(i) is a staging tensor the caller writes, run()
// uploads the inputs, executes, and downloads the outputs into output(i).
//
// Weights: correctness first. Every run uploads every variable from its host tensor
// (Variable::value) and writes the updated ones back after the step, so host code that reads or
// writes variables between steps (metrics' reset_states, get_weights/set_weights, save,
// callbacks) sees the same values as with the kernel backends. This per-step weight sync is the
// simple first step: XlaProgram already keeps the variables on the device between runs (donated
// and updated in place), so a later change syncs only where the host needs them.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "backends/xla/lowering.h"
#include "backends/xla/xla_program.h"
#include "lockstep/core/error.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

// The plugin spec: env LOCKSTEP_XLA_PLUGIN, "cpu" when unset or empty.
std::string plugin_spec() {
  const char* env = std::getenv("LOCKSTEP_XLA_PLUGIN");
  return env && *env ? std::string(env) : std::string("cpu");
}

// One client per plugin spec, for the life of the process (a plugin is never unloaded).
std::shared_ptr<PjrtClient> client_for(const std::string& spec) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<PjrtClient>> clients;
  std::lock_guard<std::mutex> lock(mutex);
  auto& client = clients[spec];
  if (!client) {
    try {
      client = PjrtClient::create({.plugin = spec});
    } catch (const Error& e) {
      clients.erase(spec);
      throw Error(std::string("backend 'xla': cannot create a PJRT client from plugin '") + spec +
                  "' (env LOCKSTEP_XLA_PLUGIN): " + e.what());
    }
  }
  return client;
}

class XlaCompiledGraph final : public CompiledGraph {
 public:
  XlaCompiledGraph(Graph g, const std::vector<Value>& inputs, const std::vector<Value>& outputs,
                   const CompileOptions& options, const StepInfo* step)
      : graph_(std::move(g)),
        step_(step),
        client_(client_for(plugin_spec())),
        program_(client_, graph_, inputs, outputs,
                 LoweringOptions{.seed = options.seed, .replica = options.replica}) {
    for (Value v : inputs)
      inputs_.push_back(Tensor::zeros(graph_.type(v).shape, graph_.type(v).dtype));
    for (Value v : outputs)
      outputs_.push_back(Tensor::zeros(graph_.type(v).shape, graph_.type(v).dtype));
    int ops = 0;
    for (int i = 0; i < graph_.size(); ++i) ops += graph_.node(i).inputs.empty() ? 0 : 1;
    num_nodes_ = ops;
    char times[96];
    std::snprintf(times, sizeof times, "lowered to StableHLO in %.3f s, compiled in %.3f s",
                  program_.lower_seconds(), program_.compile_seconds());
    report_.push_back("xla: whole graph " + std::string(times) + " (" + client_->describe() +
                      "); weights synced with the host every step");
  }

  Tensor& input(int i) override { return inputs_[size_t(i)]; }
  int num_inputs() const override { return int(inputs_.size()); }
  const Tensor& output(int i) const override { return outputs_[size_t(i)]; }
  int num_outputs() const override { return int(outputs_.size()); }
  void copy_input_from_host(int i, const Tensor& host) override {
    inputs_[size_t(i)].copy_from(host);
  }
  void copy_output_to_host(int i, Tensor& host) const override {
    host.copy_from(outputs_[size_t(i)]);
  }

  void run() override {
    if (step_) program_.set_step(step_->step);
    program_.reload_variables();  // the host values, as they are now (see the file comment)
    std::vector<Tensor> results = program_.run(inputs_);
    for (size_t i = 0; i < results.size(); ++i) outputs_[i].copy_from(results[i]);
    program_.sync_variables_to_host();
  }

  size_t arena_bytes() const override { return 0; }  // the plugin plans the device memory
  size_t unplanned_bytes() const override { return 0; }
  int num_scheduled() const override { return num_nodes_; }
  const Graph& graph() const override { return graph_; }
  const std::vector<std::string>& report() const override { return report_; }

 private:
  Graph graph_;
  const StepInfo* step_;
  std::shared_ptr<PjrtClient> client_;
  XlaProgram program_;
  std::vector<Tensor> inputs_, outputs_;
  int num_nodes_ = 0;
  std::vector<std::string> report_;
};

class XlaBackend final : public Backend {
 public:
  std::string name() const override { return "xla"; }
  std::string doc() const override {
    return "the whole graph compiled by XLA through a PJRT plugin (env LOCKSTEP_XLA_PLUGIN; "
           "the CPU plugin by default)";
  }
  bool can_run(const Node& n, const std::vector<TensorType>&, std::string* why) const override {
    if (n.op == op::input || n.op == op::variable || find_lowering(n.op)) return true;
    if (why) *why = "no StableHLO lowering for op '" + n.op + "' (src/backends/xla/lowering_*.cpp)";
    return false;
  }
  // None: XLA fuses and lays out the whole module itself.
  void run_passes(Graph&, std::vector<Value>&, std::vector<std::string>&) const override {}
  MemoryRules memory_rules() const override { return {}; }
  std::unique_ptr<CompiledGraph> compile(Graph g, std::vector<Value> inputs,
                                         std::vector<Value> outputs, const CompileOptions& options,
                                         const StepInfo* step) const override {
    LS_CHECK(!options.eager,
             "backend 'xla' compiles the whole graph: run_eagerly is not "
             "supported, use backend 'cpu' or 'reference' to debug op by op");
    return std::make_unique<XlaCompiledGraph>(std::move(g), inputs, outputs, options, step);
  }
};

}  // namespace

LOCKSTEP_REGISTER(xla_backend) { register_backend(std::make_shared<XlaBackend>()); }

}  // namespace lockstep::xla
