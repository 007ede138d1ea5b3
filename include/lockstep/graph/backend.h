// The backend interface. A backend says what it can run, runs its own graph passes, states its
// memory and layout rules, and builds a runnable program from a graph: node by node from
// registered kernels (the `reference` oracle and `cpu` on oneDNN, both through the kernel
// program in src/graph/kernel_program.cpp), or by compiling the whole graph at once (the XLA
// route of docs/accelerator.md). Executable (executable.h) drives it:
//
//   generic passes (src/graph/passes/) -> backend.run_passes -> backend.compile -> run()
//
// Backends register themselves at load time (register_backend); known_backends() in
// backends.h names the ones an op's kernel coverage may list.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/allocator.h"
#include "lockstep/graph/graph.h"

namespace lockstep {

struct CompileOptions;
struct StepInfo;

/// What a compiled program holds on each device it runs on, as its compiler planned it: per
/// device bytes (a partitioned program runs the same one on every device of its mesh).
struct DeviceMemory {
  int devices = 0;          ///< devices the program runs on; 0: the backend does not say
  int64_t arguments = 0;    ///< its arguments: weights, optimizer slots, the batch's shard
  int64_t outputs = 0;      ///< its results (the variables' new values among them)
  int64_t aliased = 0;      ///< results written over a donated argument (in-place updates)
  int64_t temporaries = 0;  ///< the intermediates (activations, gradients), planned by it
  int64_t code = 0;         ///< its generated code
  /// The peak: the compiler's own figure where it gives one, else arguments + outputs -
  /// aliased + temporaries (everything live at once: an upper bound).
  int64_t peak = 0;
  bool peak_from_compiler = false;  ///< whether `peak` is the compiler's figure
};

/// A graph compiled by a backend: the buffers of its inputs and outputs, and one step.
class CompiledGraph {
 public:
  virtual ~CompiledGraph() = default;
  /// The buffer of graph input `i` (in compile()'s `inputs` order), written before run().
  virtual Tensor& input(int i) = 0;
  virtual int num_inputs() const = 0;  ///< How many inputs compile() was given.
  /// The buffer of output `i` (compile()'s `outputs` order), valid after run() until the next.
  virtual const Tensor& output(int i) const = 0;
  virtual int num_outputs() const = 0;  ///< How many outputs compile() was given.
  /// A host tensor of input i's shape and dtype into input(i); output(i) into a host tensor
  /// (allocated when undefined).
  virtual void copy_input_from_host(int i, const Tensor& host) = 0;
  /// Copies output(i) into `host` (see copy_input_from_host).
  virtual void copy_output_to_host(int i, Tensor& host) const = 0;
  /// One step, reading the step counter and seeds from the StepInfo given to compile().
  virtual void run() = 0;
  virtual size_t arena_bytes() const = 0;      ///< device memory of the intermediates
  virtual size_t unplanned_bytes() const = 0;  ///< their sum without reuse
  /// The one scratch block its kernels share (the largest any kernel asks for), beside the arena.
  virtual size_t workspace_bytes() const { return 0; }
  virtual int num_scheduled() const = 0;                       ///< nodes that run
  virtual const Graph& graph() const = 0;                      ///< the graph after every pass
  virtual const std::vector<std::string>& report() const = 0;  ///< one line per pass result
  /// Where a whole-graph backend runs the step ("xla:cpu"); empty for kernel backends.
  virtual std::string target() const { return {}; }
  /// Its per-device memory as its compiler planned it (devices = 0: not known; the kernel
  /// backends say it through arena_bytes and workspace_bytes instead).
  virtual DeviceMemory device_memory() const { return {}; }
};

/// A way to run graphs (reference, cpu, xla): implement it and register_backend() an instance to
/// add one. Executable calls run_passes, then compile, once per program.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Its name in CompileOptions::backend ("cpu").
  virtual std::string name() const = 0;
  /// One line for errors and docs ("readable serial loops: the oracle of every test ...").
  virtual std::string doc() const = 0;
  /// Whether it runs node `n` (with input types `in`) itself; when not, *why says why (a
  /// kernel backend then falls back to the reference kernel, or refuses in strict mode).
  virtual bool can_run(const Node& n, const std::vector<TensorType>& in,
                       std::string* why) const = 0;
  /// Its own graph passes (fusions its kernels take, memory layouts), run after the generic
  /// ones; appends a line per rewrite to `report`. Not run for eager programs.
  virtual void run_passes(Graph& g, std::vector<Value>& outputs,
                          std::vector<std::string>& report) const = 0;
  /// Whether its programs run on this process's cores through host threads (OpenMP), so the
  /// trainer may split a batch over them: replicas in one process sharing host memory, fit's
  /// thread replicas, predict's thread tiles (the cpu backend). The reference is serial on
  /// purpose; a whole-graph backend runs where its device is.
  virtual bool splits_batch_over_host_threads() const = 0;
  /// Whether compile() takes CompileOptions::steps > 1 (several steps in one program).
  virtual bool runs_steps_per_call() const { return false; }
  /// Builds the program for `g` (after the passes). `step` outlives the program and holds the
  /// step counter, seed and replica its random ops read.
  virtual std::unique_ptr<CompiledGraph> compile(Graph g, std::vector<Value> inputs,
                                                 std::vector<Value> outputs,
                                                 const CompileOptions& options,
                                                 const StepInfo* step) const = 0;
};

/// Registers a backend under backend->name() (at load time, from the backend's module).
void register_backend(std::shared_ptr<const Backend> backend);
/// The registered backend `name`; an error lists the registered ones.
const Backend& find_backend(const std::string& name);
/// The names of the registered backends, sorted.
std::vector<std::string> registered_backends();

}  // namespace lockstep
