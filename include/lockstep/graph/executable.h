// Executable: a graph compiled once by a backend (backend.h). The generic passes
// (src/graph/passes/) and the backend's own run first; the backend then builds the program (a
// kernel backend: nodes scheduled once, every intermediate value at an offset of one arena,
// kernels built once, so run() executes the step with no heap allocation).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/graph/backend.h"
#include "lockstep/graph/device_residence.h"
#include "lockstep/graph/graph.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

class DeviceAllocator;

/// How Executable compiles a graph: which backend, fused or not, the random seed and replica.
struct CompileOptions {
  /// A name of known_backends() (lockstep/graph/backends.h): "cpu" (an op without a cpu kernel
  /// runs its reference kernel, and report() says so) or "reference".
  std::string backend = "cpu";
  bool eager = false;    ///< op by op, fresh buffers each step (debug path, test oracle)
  bool fuse = true;      ///< run the fusion pass (env LOCKSTEP_FUSE=0 turns it off everywhere)
  uint64_t seed = 0;     ///< the seed random ops (dropout, augmentation) key their draws by
  uint32_t replica = 0;  ///< this replica's id (decorrelates the replicas' random draws)
  /// Where the arena, the workspace and so input(i)/output(i) live; their memory comes from
  /// device_allocator(device). The kernels of `backend` must run on this device.
  Device device = Device::cpu();
  /// Refuse to run an op of a non-reference program on the reference kernel (an error naming the
  /// op and the backend) instead of reporting it. Also on with env LOCKSTEP_STRICT_KERNELS=1
  /// (a switch of lockstep/core/env.h: 1/true/on/yes, 0/false/off/no).
  bool strict_kernels = false;
  /// The variables a backend may keep on its device between steps, shared by the programs of one
  /// model (lockstep/graph/device_residence.h). nullptr: a backend with device copies syncs every
  /// variable with its host value around every step.
  std::shared_ptr<DeviceResidence> residence;
  /// Steps per run() (steps_per_execution), for a backend whose runs_steps_per_call(): the step
  /// repeated `steps` times in one program, the variables carried from each step into the next.
  /// Its inputs and outputs repeat per step: input(k * I + i) is step k's input i, output(k * O +
  /// o) its output o (I, O: the graph's). Kernel backends take 1.
  int steps = 1;
};

/// A compiled graph: write the inputs, run() one step, read the outputs. Compiling happens
/// once, in the constructor; run() allocates nothing. Not copyable or movable (the program
/// points into it).
///
///   Executable exe(g, {x}, {y});
///   exe.copy_input_from_host(0, batch);  exe.run();  exe.copy_output_to_host(0, result);
class Executable {
 public:
  /// inputs: placeholder values fed per step; outputs: values fetched after each step.
  Executable(const Graph& graph, std::vector<Value> inputs, std::vector<Value> outputs,
             CompileOptions options = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  /// Buffers to write inputs into before run() (views into the arena on device()). Host code
  /// may touch them directly only while device() is cpu.
  Tensor& input(int i) { return program_->input(i); }
  int num_inputs() const { return program_->num_inputs(); }  ///< Size of `inputs`.
  /// The buffer of output `i` after run() (overwritten by the next run()).
  const Tensor& output(int i) const { return program_->output(i); }
  int num_outputs() const { return program_->num_outputs(); }  ///< Size of `outputs`.
  /// The program's host<->device edges: copy a contiguous host tensor of input i's shape and
  /// dtype into input(i), and output(i) into a host tensor (allocated when undefined). A
  /// memcpy on cpu, H2D / D2H through device_allocator(device()) on a device.
  void copy_input_from_host(int i, const Tensor& host);
  /// See copy_input_from_host.
  void copy_output_to_host(int i, Tensor& host) const;
  Device device() const { return options_.device; }  ///< CompileOptions::device.

  void run();  ///< one step; advances the step counter
  /// Sets the step counter the next run() uses (random ops key their draws by it; a resumed
  /// run sets the optimizer's step count).
  void set_step(uint64_t step) { step_.step = step; }
  /// The global row of this step's first example (-1: random ops keyed by replica); see StepInfo.
  void set_first_row(int64_t row) { step_.first_row = row; }
  uint64_t step() const { return step_.step; }  ///< The step counter the next run() uses.

  /// Bytes of the one arena that holds every intermediate value (with buffer reuse).
  size_t arena_bytes() const { return program_->arena_bytes(); }
  /// What the intermediates would take without reuse (arena_bytes() / this = the planner's gain).
  size_t unplanned_bytes() const { return program_->unplanned_bytes(); }  // sum without reuse
  /// Bytes of the kernels' shared scratch block (allocated beside the arena; 0 when none).
  size_t workspace_bytes() const { return program_->workspace_bytes(); }
  /// What the program holds on each device it runs on, as its compiler planned it (a
  /// whole-graph backend that can say; devices = 0 otherwise).
  DeviceMemory device_memory() const { return program_->device_memory(); }
  double compile_seconds() const { return compile_seconds_; }  ///< Time the constructor took.
  /// Where a whole-graph backend runs the step ("xla:cpu"), empty for the kernel backends (whose
  /// compile is quick); fit reports a compile on such a target.
  std::string target() const { return program_->target(); }
  int num_scheduled() const { return program_->num_scheduled(); }  ///< Nodes run per step.
  /// The graph as compiled: after the generic and backend passes (fusions, layouts).
  const Graph& graph() const { return program_->graph(); }
  /// One line per pass result (fusions, fallbacks, memory) for --verbose.
  const std::vector<std::string>& report() const { return report_; }

 private:
  CompileOptions options_;
  StepInfo step_;  ///< the program reads it each step (it does not move: Executable is pinned)
  std::unique_ptr<CompiledGraph> program_;
  double compile_seconds_ = 0;
  std::vector<std::string> report_;
};

}  // namespace lockstep
