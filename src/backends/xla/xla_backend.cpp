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
//
// Host collectives (a strategy that also reduces across workers: XlaStrategy with a cluster,
// MultiWorkerMirroredStrategy): the step's all_reduce_start / all_reduce_wait ops need the host
// between backward and the update, so the step runs as two executables around them (HostSplit):
// the first computes every bucket's gradients (no variable writes), the host averages them over
// the devices and runs the ops' own host kernels (pack, scale by the replica's sample weight, the
// strategy's Gloo / MPI all-reduce, wait), and the second takes the reduced buckets in place of
// the all_reduce_start nodes (all_reduce_wait's lowering unpacks them) and runs the whole step
// but the backward: forward again (the loss, the metrics, BatchNormalization's statistics), then
// the updates. The forward runs twice per step, and the variables go through the host every step
// (no residence): correctness first, the cost is stated in docs/accelerator.md.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "backends/xla/lowering.h"
#include "backends/xla/replica_split.h"
#include "backends/xla/xla_connect.h"
#include "backends/xla/xla_program.h"
#include "lockstep/core/env.h"
#include "lockstep/core/error.h"
#include "lockstep/graph/device_residence.h"
#include "lockstep/graph/device_system.h"
#include "lockstep/graph/executable.h"
#include "lockstep/graph/op_registry.h"
#include "lockstep/graph/sharding.h"

namespace lockstep::xla {

namespace {

// The plugin spec: env LOCKSTEP_XLA_PLUGIN (--device xla:PLUGIN sets it); "" when unset or
// empty, which loads env LOCKSTEP_PJRT_PLUGIN's file, else "cpu" (pjrt_plugin.h).
std::string plugin_spec() { return env::text_or_empty(env::xla_plugin); }

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
      throw Error(std::string("backend 'xla': cannot create a PJRT client from plugin '") +
                  (spec.empty() ? std::string("cpu") : spec) +
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

// The sharding plan a program compiled now is partitioned by (lockstep/graph/sharding.h,
// installed by distribution::set_distribution), or none. Checks the client has the mesh's
// devices, and refuses replicas (XlaStrategy) together with a plan.
std::shared_ptr<const ShardingPlan> plan_for_program(const PjrtClient& client, int replicas) {
  std::shared_ptr<const ShardingPlan> plan = sharding_plan();
  if (!plan) return plan;
  LS_CHECK(replicas == 1, "backend 'xla': a distribution is set (", plan->describe(),
           ") and the program also runs as ", replicas,
           " replicas (XlaStrategy); use one: the distribution's batch axis is data parallelism");
  int most = -1;
  for (int d : plan->mesh().devices) most = std::max(most, d);
  LS_CHECK(most < int(client.devices().size()), "backend 'xla': the distribution's mesh ",
           plan->mesh().str(), " uses device ", most, ", but the PJRT client has ",
           client.devices().size(), " (", client.describe(),
           "); connect to enough devices first (distribute::XlaClusterResolver::connect(\"cpu\", ",
           plan->mesh().size(), "))");
  return plan;
}

// A buffer of `t`'s type with `replicas` times its rows (rank-0 tensors stay as they are).
Tensor all_replicas(const TensorType& t, int replicas) {
  const Shape s = t.shape.rank() == 0 ? t.shape : t.shape.with_dim(0, t.shape[0] * replicas);
  return Tensor::zeros(s, t.dtype);
}

// The step split around its host collectives (see the top); empty without any.
struct HostSplit {
  struct Bucket {
    int start = -1;            // the all_reduce_start node (an input of the second program)
    int first = 0, count = 0;  // its inputs among the first program's outputs
    std::unique_ptr<Kernel> start_kernel, wait_kernel;  // the host kernels (backend reference)
    std::vector<Tensor> in;                             // its inputs, averaged over the devices
    Tensor packed;                                      // the bucket, reduced in place
    std::vector<Tensor> unpacked;                       // (the wait kernel's outputs: unused)
  };
  std::unique_ptr<XlaProgram> gradients;  // the first program
  std::vector<Bucket> buckets;
  bool empty() const { return buckets.empty(); }
};

// Builds `split` when g has host collectives: compiles the first program on g as it is, then
// turns every all_reduce_start of g into an input placeholder, appended to `inputs` (the second
// program's).
void split_host_collectives(Graph& g, std::vector<Value>& inputs,
                            const std::shared_ptr<PjrtClient>& client,
                            const LoweringOptions& options, HostSplit& split) {
  std::vector<Value> outputs;
  for (const Node& n : g.nodes()) {
    if (n.op != op::all_reduce_start) continue;
    HostSplit::Bucket b;
    b.start = n.id;
    b.first = int(outputs.size());
    b.count = int(n.inputs.size());
    outputs.insert(outputs.end(), n.inputs.begin(), n.inputs.end());
    split.buckets.push_back(std::move(b));
  }
  if (split.empty()) return;
  for (const Node& n : g.nodes())
    LS_CHECK(n.op != op::cross_replica_sum, "backend 'xla': ", n.op, " '", n.name,
             "' (synchronized BatchNormalization) in a step that all-reduces its gradients "
             "across workers on the host: its sum in the program would cover this worker's "
             "devices only; use plain BatchNormalization, or one worker (XlaStrategy without a "
             "cluster)");
  LS_CHECK(options.steps == 1, "backend 'xla': steps_per_execution (", options.steps,
           ") with a host all-reduce across workers; the step runs one at a time");
  LoweringOptions first = options;
  first.side_effects = false;
  split.gradients = std::make_unique<XlaProgram>(client, g, inputs, outputs, first);
  const OpRegistry& registry = OpRegistry::get();
  for (HostSplit::Bucket& b : split.buckets) {
    const Node& start = g.node(b.start);
    const Node* wait = nullptr;
    for (const Node& n : g.nodes())
      if (n.op == op::all_reduce_wait && n.inputs.size() == 1 && n.inputs[0].node == b.start)
        wait = &n;
    LS_CHECK(wait, "backend 'xla': ", start.op, " '", start.name, "' has no all_reduce_wait");
    const KernelFactory* sk = registry.kernel(op::all_reduce_start, "reference");
    const KernelFactory* wk = registry.kernel(op::all_reduce_wait, "reference");
    LS_CHECK(sk && wk,
             "backend 'xla': the host all-reduce kernels are not registered (link "
             "the distribute module)");
    std::vector<TensorType> in_types;
    for (Value v : start.inputs) {
      in_types.push_back(g.type(v));
      b.in.push_back(Tensor::zeros(g.type(v).shape, g.type(v).dtype));
    }
    b.start_kernel = (*sk)(start, in_types);
    const TensorType packed = g.type(Value{b.start, 0});
    b.packed = Tensor::zeros(packed.shape, packed.dtype);
    b.wait_kernel = (*wk)(*wait, {packed});
    for (const TensorType& t : wait->outputs) b.unpacked.push_back(Tensor::zeros(t.shape, t.dtype));
  }
  for (HostSplit::Bucket& b : split.buckets) {
    Node& n = g.node(b.start);
    n.op = op::input;
    n.inputs.clear();
    inputs.push_back(Value{b.start, 0});
  }
}

class XlaCompiledGraph final : public CompiledGraph {
 public:
  XlaCompiledGraph(Graph g, std::vector<Value> inputs, const std::vector<Value>& outputs,
                   const CompileOptions& options, const StepInfo* step, int replicas)
      : graph_(std::move(g)),
        step_(step),
        replicas_(replicas),
        client_(client_for_program(replicas)),
        num_inputs_(split(inputs, options)),
        program_(client_, graph_, inputs, outputs,
                 LoweringOptions{
                     .num_replicas = replicas,
                     .mean_gradients = split_.empty(),
                     .seed = options.seed,
                     .replica = options.replica,
                     .steps = options.steps,
                     .loop = env::flag(env::xla_step_loop),
                     .sharding = split_.empty() ? plan_for_program(*client_, replicas) : nullptr}) {
    inputs.resize(num_inputs_);  // (the caller's: the split's bucket inputs are internal)
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
    if (options.residence && !split_.empty()) {
      split_residence_ = options.residence;  // (synced through the host every step)
    } else if (options.residence) {
      program_.set_held([&](const Variable* v) { return options.residence->holds(v); });
      if (program_.holds_any()) residence_ = options.residence;
    }
    int ops = 0;
    for (int i = 0; i < graph_.size(); ++i) ops += graph_.node(i).inputs.empty() ? 0 : 1;
    num_nodes_ = ops;
    char times[96];
    std::snprintf(times, sizeof times, "lowered to StableHLO in %.3f s, %s in %.3f s",
                  program_.lower_seconds(),
                  program_.loaded_from_cache() ? "loaded from the compile cache" : "compiled",
                  program_.compile_seconds());
    report_.push_back(
        "xla: whole graph " + std::string(times) + " (" + client_->describe() + "); " +
        (residence_ ? "weights stay on the device between steps"
                    : "variables synced with the host every step") +
        (program_.partitioned() ? "; SPMD over " + std::to_string(program_.num_partitions()) +
                                      " devices (" + sharding_plan()->describe() + ")"
                                : std::string()) +
        (replicas > 1 ? "; " + std::to_string(replicas) +
                            " replicas, one per device, gradients all-reduced in "
                            "the program"
                      : std::string()) +
        (split_.empty()
             ? std::string()
             : "; split around the host all-reduce of " + std::to_string(split_.buckets.size()) +
                   " gradient bucket(s) (forward runs twice a step)"));
    // (before the "whole graph" line, which stays the last: what the compile came to)
    const auto before_last = [this](std::string line) {
      report_.insert(report_.end() - 1, std::move(line));
    };
    if (program_.partitioned()) before_last("xla: " + program_.chosen_layouts_line());
    if (const DeviceMemory m = device_memory(); m.devices > 0) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "xla: per device (%d): arguments %lld B, outputs %lld B (%lld B of them "
                    "written in place), temporaries %lld B; peak %lld B (%s)",
                    m.devices, (long long)m.arguments, (long long)m.outputs, (long long)m.aliased,
                    (long long)m.temporaries, (long long)m.peak,
                    m.peak_from_compiler ? "the compiler's" : "their sum, an upper bound");
      before_last(line);
    }
  }

  DeviceMemory device_memory() const override {
    const std::optional<PjrtExecutable::MemoryStats>& s = program_.memory_stats();
    if (!s) return {};
    DeviceMemory m;
    m.devices = program_.partitioned() ? program_.num_partitions() : replicas_;
    m.arguments = s->arguments;
    m.outputs = s->outputs;
    m.aliased = s->aliased;
    m.temporaries = s->temporaries;
    m.code = s->code;
    m.peak_from_compiler = s->peak > 0;
    m.peak = s->peak > 0 ? s->peak : s->arguments + s->outputs - s->aliased + s->temporaries;
    return m;
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
    if (!split_.empty()) {
      run_split();
      return;
    }
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
  // Splits graph_ (split_host_collectives: it becomes the second program's graph, `inputs` its
  // inputs) and returns the caller's input count.
  size_t split(std::vector<Value>& inputs, const CompileOptions& options) {
    const size_t count = inputs.size();
    split_host_collectives(graph_, inputs, client_,
                           LoweringOptions{.num_replicas = replicas_,
                                           .seed = options.seed,
                                           .replica = options.replica,
                                           .steps = options.steps},
                           split_);
    return count;
  }

  // One step with host collectives (see the top).
  void run_split() {
    using Which = XlaProgram::Which;
    if (split_residence_) split_residence_->host_changed();  // the host has the newest values
    XlaProgram& first = *split_.gradients;
    first.set_step(program_.step());
    first.upload_variables(Which::others);
    std::vector<std::vector<Tensor>> feed = replicas_ == 1
                                                ? std::vector<std::vector<Tensor>>{inputs_}
                                                : split_batch(inputs_, replicas_);
    std::vector<std::vector<Tensor>> grads =
        replicas_ == 1 ? std::vector<std::vector<Tensor>>{first.run(inputs_)}
                       : first.run_replicas(feed);
    for (HostSplit::Bucket& b : split_.buckets) {  // started in order, then waited for
      for (int k = 0; k < b.count; ++k) {
        float* mean = b.in[size_t(k)].data<float>();
        const int64_t m = b.in[size_t(k)].numel();
        for (int64_t j = 0; j < m; ++j) {
          double sum = 0;
          for (const auto& r : grads) sum += r[size_t(b.first + k)].data<float>()[j];
          mean[j] = float(sum / double(replicas_));
        }
      }
      Tensor* out = &b.packed;
      b.start_kernel->run(KernelArgs{.inputs = b.in.data(),
                                     .num_inputs = b.count,
                                     .outputs = out,
                                     .num_outputs = 1,
                                     .step = step_});
    }
    for (HostSplit::Bucket& b : split_.buckets)
      b.wait_kernel->run(KernelArgs{.inputs = &b.packed,
                                    .num_inputs = 1,
                                    .outputs = b.unpacked.data(),
                                    .num_outputs = int(b.unpacked.size()),
                                    .step = step_});
    for (auto& r : feed)
      for (const HostSplit::Bucket& b : split_.buckets) r.push_back(b.packed);
    program_.upload_variables(Which::others);
    if (replicas_ == 1) {
      std::vector<Tensor> results = program_.run(feed[0]);
      for (size_t i = 0; i < results.size(); ++i) outputs_[i].copy_from(results[i]);
    } else {
      gather(program_.run_replicas(feed));
    }
    program_.download_variables(Which::others);
  }

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
  HostSplit split_;    // (before num_inputs_, whose initializer fills it)
  size_t num_inputs_;  // the caller's inputs
  XlaProgram program_;
  std::shared_ptr<DeviceResidence> split_residence_;
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
  bool splits_batch_over_host_threads() const override { return false; }
  bool runs_steps_per_call() const override { return true; }  // see lower_graph.h
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
