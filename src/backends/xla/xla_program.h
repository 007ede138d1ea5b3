// A Lockstep graph compiled into one PJRT executable, with its variables resident on the
// device: the unit an xla Backend runs per step.
//
//   auto client = PjrtClient::create({.plugin = "cpu"});
//   XlaProgram step(client, graph, {x, y}, {loss});
//   for (...) loss_value = step.run({x_batch, y_batch})[0];
//   step.sync_variables_to_host();   // weights back into Variable::value (save, get_weights)
//
// Variables are uploaded from Variable::value at the first run (and after
// reload_variables()), then live in device buffers: each run donates the buffers of the
// variables it updates and keeps the program's aliased results as their new buffers, so an
// optimizer step is in place with no copy of the weights. Only the inputs go in and only the
// outputs come out.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "backends/xla/compiled_module.h"
#include "backends/xla/lower_graph.h"
#include "backends/xla/pjrt_client.h"

namespace lockstep::xla {

class XlaProgram {
 public:
  // Lowers and compiles (timed: compile_seconds()), for options.num_replicas devices of the
  // client (one copy of the step each; the graph's inputs are one replica's share).
  XlaProgram(std::shared_ptr<PjrtClient> client, const Graph& graph,
             const std::vector<Value>& inputs, const std::vector<Value>& outputs,
             const LoweringOptions& options = {});

  // One step: `inputs` (host tensors of the input placeholders' types) to the device, run,
  // the outputs back to the host. One replica only.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // One step of every replica: inputs[r] goes to replica r; returns outputs[r]. Every replica
  // holds its own copy of the variables (identical when the gradients are averaged).
  std::vector<std::vector<Tensor>> run_replicas(const std::vector<std::vector<Tensor>>& inputs);
  int num_replicas() const { return partitioned() ? 1 : exe_.num_replicas(); }
  // SPMD over a mesh (LoweringOptions::sharding): run() feeds each device its block of every
  // input and variable and gathers the outputs; each variable lives on the devices as blocks
  // (its layout's), gathered into Variable::value by the downloads. 1 when not partitioned.
  bool partitioned() const { return lowered_.mesh.has_value(); }
  int num_partitions() const { return partitioned() ? int(lowered_.mesh->size()) : 1; }
  // The bytes variable `v`'s buffer takes on each device (read from the device buffers; empty
  // before the first upload or for a variable the program does not take).
  std::vector<int64_t> variable_device_bytes(const Variable* v) const;

  // What the compiler planned per device (the plugin's compiled memory stats), or nullopt.
  const std::optional<PjrtExecutable::MemoryStats>& memory_stats() const { return memory_; }
  // The partitioned program read back (partitioned programs only; read = false where the
  // plugin does not offer it): the shardings the compiler settled on and its collectives.
  const CompiledModule& compiled_module() const { return compiled_; }
  // One line on what the compiler chose: how many argument and result layouts it kept as
  // annotated (and the first it changed, named), and the collectives per step. Empty when not
  // partitioned.
  std::string chosen_layouts_line() const;

  // The variables' device values (replica 0's) copied into their Variable::value host tensors.
  void sync_variables_to_host();
  // The host values changed (load_weights, set_weights): upload them again at the next run.
  void reload_variables() { variables_loaded_ = false; }

  // Finer transfers, for a caller that keeps some variables on the device across runs (the xla
  // backend under a DeviceResidence, lockstep/graph/device_residence.h): `held` says which
  // variables those are; a transfer moves the held ones or the others.
  enum class Which { held, others };
  void set_held(const std::function<bool(const Variable*)>& held);
  bool holds_any() const { return holds_any_; }
  bool updates_held() const { return updates_held_; }  // some result is a held variable
  // Host -> device: the variables of `which` (every replica); afterwards no run reloads them.
  void upload_variables(Which which);
  // Device -> host: the variables of `which` that the program updates (replica 0's).
  void download_variables(Which which);

  // Variable buffers moved between host and device by every program of the process so far:
  // held (weights, optimizer slots) and the others (metric state, the iteration count, the
  // learning rate). Tests check that a step moves no held variable.
  struct Transfers {
    std::atomic<int64_t> held_uploads{0}, held_downloads{0};
    std::atomic<int64_t> other_uploads{0}, other_downloads{0};
    std::atomic<int64_t> runs{0};  // executions (one per run or run_replicas call)
  };
  static Transfers& transfers();

  // The step counter the random ops are keyed by (as Executable::step(); advances per run).
  uint64_t step() const { return step_; }
  void set_step(uint64_t step) { step_ = step; }

  const LoweredGraph& lowered() const { return lowered_; }
  double lower_seconds() const { return lower_seconds_; }
  double compile_seconds() const { return compile_seconds_; }
  // True when the executable came from the persistent compile cache (compile_cache.h).
  bool loaded_from_cache() const { return exe_.loaded_from_cache(); }
  int64_t runs() const { return runs_; }

 private:
  void load_variables();
  // Device -> host: argument a's variable (gathered from its blocks when partitioned) into dst.
  void fetch(size_t a, Tensor& dst) const;
  // Device d's block of `whole` for argument a (the tensor itself when not split).
  Tensor block(size_t a, const Tensor& whole, int d) const;
  // Argument a of replica r: its variable buffer, or input tensor copied to the device (kept
  // in `fed`, which must not reallocate).
  PjrtBuffer* argument(int replica, size_t a, const std::vector<Tensor>& inputs,
                       std::vector<PjrtBuffer>& fed);

  std::shared_ptr<PjrtClient> client_;
  LoweredGraph lowered_;
  PjrtExecutable exe_;
  void upload(size_t argument);
  std::vector<std::vector<PjrtBuffer>> variables_;  // [replica][argument]; empty for inputs
  bool variables_loaded_ = false;
  std::vector<bool> held_;  // [argument]: a variable the caller keeps on the device
  bool holds_any_ = false, updates_held_ = false;
  std::optional<PjrtExecutable::MemoryStats> memory_;
  CompiledModule compiled_;
  double lower_seconds_ = 0, compile_seconds_ = 0;
  int64_t runs_ = 0;
  uint64_t step_ = 0;
};

}  // namespace lockstep::xla
