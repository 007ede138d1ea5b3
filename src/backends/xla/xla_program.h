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
#include <memory>
#include <vector>

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
  int num_replicas() const { return exe_.num_replicas(); }

  // The variables' device values (replica 0's) copied into their Variable::value host tensors.
  void sync_variables_to_host();
  // The host values changed (load_weights, set_weights): upload them again at the next run.
  void reload_variables() { variables_loaded_ = false; }

  // The step counter the random ops are keyed by (as Executable::step(); advances per run).
  uint64_t step() const { return step_; }
  void set_step(uint64_t step) { step_ = step; }

  const LoweredGraph& lowered() const { return lowered_; }
  double lower_seconds() const { return lower_seconds_; }
  double compile_seconds() const { return compile_seconds_; }
  int64_t runs() const { return runs_; }

 private:
  void load_variables();
  // Argument a of replica r: its variable buffer, or input tensor copied to the device (kept
  // in `fed`, which must not reallocate).
  PjrtBuffer* argument(int replica, size_t a, const std::vector<Tensor>& inputs,
                       std::vector<PjrtBuffer>& fed);

  std::shared_ptr<PjrtClient> client_;
  LoweredGraph lowered_;
  PjrtExecutable exe_;
  std::vector<std::vector<PjrtBuffer>> variables_;  // [replica][argument]; empty for inputs
  bool variables_loaded_ = false;
  double lower_seconds_ = 0, compile_seconds_ = 0;
  int64_t runs_ = 0;
  uint64_t step_ = 0;
};

}  // namespace lockstep::xla
