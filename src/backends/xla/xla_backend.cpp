// The xla backend (lockstep/graph/backend.h): the whole graph lowered to one StableHLO module
// (lower_graph.h) and compiled by a PJRT plugin into one executable (xla_program.h), instead of
// a kernel per node. CompileOptions{.backend = "xla"} selects it; the plugin is the one named by
// env LOCKSTEP_XLA_PLUGIN (a path, or "cpu", "cuda", "tpu"; see pjrt_plugin.h), the CPU plugin
// when unset. One PJRT client per plugin per process, created at the first compile.
//
// The program's edges are host tensors: input(i) is a staging tensor the caller writes, run()
// uploads the inputs, executes, and downloads the outputs into output(i).
//
// Weights: with CompileOptions::residence (a Model's programs), the variables it holds (weights,
// optimizer slots) stay in device buffers between steps, donated and updated in place; they come
// to the host only when the residence asks (a host read: get_weights, save, a callback, another
// program of the model) and go up again only after a host write. Every other variable (metric
// accumulators, the iteration count, the learning rate: small, and read or written by the host
// loop between steps) is uploaded before each step and, when updated, downloaded after it.
// Without a residence every variable is synced like those.
//
// Replicas (the TPUStrategy way: distribute::XlaStrategy): a program compiled inside a
// DeviceReplicasScope of R > 1 (lockstep/graph/device_system.h) is the graph of one replica's
// step, compiled for R devices of the client connect_devices made. Its inputs are the whole
// batch (R times the graph's rows, as the caller writes them); run() splits them among the
// replicas (replica_split.h) and runs every replica in one PJRT execute. The gradients are
// averaged and the metric totals summed by all_reduce ops inside the program (lower_graph.h), so
// every replica's variables stay equal and replica 0's are the ones read back. The outputs: one
// of rank 0 (the step's loss) is the mean over the replicas, which hold equal shares of the batch,
// so it is the whole batch's loss; any other has the batch's rows as dim 0, the replicas' rows
// concatenated in order.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "backends/xla/lowering.h"
#include "backends/xla/replica_split.h"
#include "backends/xla/xla_connect.h"
#include "backends/xla/xla_program.h"
#include "lockstep/core/error.h"
#include "lockstep/graph/device_system.h"
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

// The client programs run on: the one connect_devices made, else the plugin of env
// LOCKSTEP_XLA_PLUGIN. With replicas, checks it has a device for each.
std::shared_ptr<PjrtClient> client_for_program(int replicas) {
  std::shared_ptr<PjrtClient> client = connected_client();
  if (!client) client = client_for(plugin_spec());
  LS_CHECK(replicas <= int(client->devices().size()), "backend 'xla': the program runs as ",
           replicas, " replicas, one per device, but the PJRT client has ",
           client->devices().size(), " (", client->describe(),
           "); connect to enough devices first (distribute::XlaClusterResolver::connect, "
           "lockstep/distribute/xla_strategy.h)");
  return client;
}

// A buffer of `t`'s type with `replicas` times its rows (rank-0 tensors stay as they are).
Tensor all_replicas(const TensorType& t, int replicas) {
  const Shape s = t.shape.rank() == 0 ? t.shape : t.shape.with_dim(0, t.shape[0] * replicas);
  return Tensor::zeros(s, t.dtype);
}

class XlaCompiledGraph final : public CompiledGraph {
 public:
  XlaCompiledGraph(Graph g, const std::vector<Value>& inputs, const std::vector<Value>& outputs,
                   const CompileOptions& options, const StepInfo* step, int replicas)
      : graph_(std::move(g)),
        step_(step),
        replicas_(replicas),
        client_(client_for_program(replicas)),
        program_(client_, graph_, inputs, outputs,
                 LoweringOptions{.num_replicas = replicas,
                                 .seed = options.seed,
                                 .replica = options.replica,
                                 .steps = options.steps}) {
    LS_CHECK(replicas == 1 || options.steps == 1, "backend 'xla': steps_per_execution (",
             options.steps, ") is run step by step with ", replicas, " replicas");
    for (Value v : inputs)
      LS_CHECK(replicas == 1 || graph_.type(v).shape.rank() >= 1, "backend 'xla': input '",
               graph_.node(v.node).name, "' is a scalar; with ", replicas,
               " replicas every input needs the batch's rows as dim 0 (they are split)");
    for (int k = 0; k < options.steps; ++k) {  // (step k's inputs and outputs: see CompileOptions)
      for (Value v : inputs) inputs_.push_back(all_replicas(graph_.type(v), replicas));
      for (Value v : outputs) outputs_.push_back(all_replicas(graph_.type(v), replicas));
    }
    if (options.residence) {
      program_.set_held([&](const Variable* v) { return options.residence->holds(v); });
      if (program_.holds_any()) residence_ = options.residence;
    }
    int ops = 0;
    for (int i = 0; i < graph_.size(); ++i) ops += graph_.node(i).inputs.empty() ? 0 : 1;
    num_nodes_ = ops;
    char times[96];
    std::snprintf(times, sizeof times, "lowered to StableHLO in %.3f s, compiled in %.3f s",
                  program_.lower_seconds(), program_.compile_seconds());
    report_.push_back("xla: whole graph " + std::string(times) + " (" + client_->describe() +
                      "); " +
                      (residence_ ? "weights stay on the device between steps"
                                  : "variables synced with the host every step") +
                      (replicas > 1 ? "; " + std::to_string(replicas) +
                                          " replicas, one per device, gradients all-reduced in "
                                          "the program"
                                    : std::string()));
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

  ~XlaCompiledGraph() override {
    if (!residence_) return;
    try {
      residence_->forget(this);  // newer weights than the host's come back first
    } catch (const Error& e) {
      std::fprintf(stderr, "xla: could not copy the weights back to the host: %s\n", e.what());
    }
  }

  void run() override {
    using Which = XlaProgram::Which;
    if (step_) program_.set_step(step_->step);
    if (residence_ && residence_->before_run(this)) program_.upload_variables(Which::held);
    program_.upload_variables(Which::others);  // as the host has them now
    if (replicas_ == 1) {
      std::vector<Tensor> results = program_.run(inputs_);
      for (size_t i = 0; i < results.size(); ++i) outputs_[i].copy_from(results[i]);
    } else {
      gather(program_.run_replicas(split_batch(inputs_, replicas_)));
    }
    program_.download_variables(Which::others);
    if (residence_ && program_.updates_held())
      residence_->after_run(this, [this] { program_.download_variables(Which::held); });
  }
  std::string target() const override { return "xla:" + client_->platform(); }

  size_t arena_bytes() const override { return 0; }  // the plugin plans the device memory
  size_t unplanned_bytes() const override { return 0; }
  int num_scheduled() const override { return num_nodes_; }
  const Graph& graph() const override { return graph_; }
  const std::vector<std::string>& report() const override { return report_; }

 private:
  // The replicas' outputs into outputs_: float32 rank 0 averaged, rows concatenated (see the top).
  void gather(const std::vector<std::vector<Tensor>>& results) {
    for (size_t i = 0; i < outputs_.size(); ++i) {
      Tensor& out = outputs_[i];
      if (out.shape().rank() == 0) {  // (a float32 one: other types are replica 0's)
        if (out.dtype() != DType::f32) {
          out.copy_from(results[0][i]);
          continue;
        }
        double sum = 0;
        for (const auto& r : results) sum += r[i].data<float>()[0];
        out.data<float>()[0] = float(sum / double(replicas_));
        continue;
      }
      const int64_t rows = out.dim(0) / replicas_;
      for (int r = 0; r < replicas_; ++r) {
        Tensor part = out.slice(r * rows, (r + 1) * rows);
        part.copy_from(results[size_t(r)][i]);
      }
    }
  }

  Graph graph_;
  const StepInfo* step_;
  int replicas_;
  std::shared_ptr<PjrtClient> client_;
  XlaProgram program_;
  std::shared_ptr<DeviceResidence> residence_;  // set when the program holds some variable
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
  bool runs_steps_per_call() const override { return true; }  // unrolled: lower_graph.h
  std::unique_ptr<CompiledGraph> compile(Graph g, std::vector<Value> inputs,
                                         std::vector<Value> outputs, const CompileOptions& options,
                                         const StepInfo* step) const override {
    LS_CHECK(!options.eager,
             "backend 'xla' compiles the whole graph: run_eagerly is not "
             "supported, use backend 'cpu' or 'reference' to debug op by op");
    return std::make_unique<XlaCompiledGraph>(std::move(g), inputs, outputs, options, step,
                                              DeviceReplicasScope::current());
  }
};

}  // namespace

LOCKSTEP_REGISTER(xla_backend) { register_backend(std::make_shared<XlaBackend>()); }

}  // namespace lockstep::xla
