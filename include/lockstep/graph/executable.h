// Executable: a compiled graph. Nodes are scheduled once, every intermediate value gets an
// offset in one arena (liveness-based reuse), kernels are built once; run() then executes the
// step with no heap allocation.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/graph/graph.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

class DeviceAllocator;

struct CompileOptions {
  // A name of known_backends() (lockstep/graph/backends.h): "cpu" (an op without a cpu kernel
  // runs its reference kernel, and report() says so) or "reference".
  std::string backend = "cpu";
  bool eager = false;  // op by op, fresh buffers each step (debug path, test oracle)
  bool fuse = true;    // run the fusion pass (env LOCKSTEP_FUSE=0 turns it off everywhere)
  uint64_t seed = 0;
  uint32_t replica = 0;
  // Where the arena, the workspace and so input(i)/output(i) live; their memory comes from
  // device_allocator(device). The kernels of `backend` must run on this device.
  Device device = Device::cpu();
  // Refuse to run an op of a non-reference program on the reference kernel (an error naming the
  // op and the backend) instead of reporting it. Also on with env LOCKSTEP_STRICT_KERNELS=1.
  bool strict_kernels = false;
};

class Executable {
 public:
  // inputs: placeholder values fed per step; outputs: values fetched after each step.
  Executable(const Graph& graph, std::vector<Value> inputs, std::vector<Value> outputs,
             CompileOptions options = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Buffers to write inputs into before run() (views into the arena on device()). Host code
  // may touch them directly only while device() is cpu.
  Tensor& input(int i) { return input_tensors_[i]; }
  int num_inputs() const { return int(input_tensors_.size()); }
  const Tensor& output(int i) const { return output_tensors_[i]; }
  int num_outputs() const { return int(output_tensors_.size()); }
  // The program's host<->device edges: copy a contiguous host tensor of input i's shape and
  // dtype into input(i), and output(i) into a host tensor (allocated when undefined). A
  // memcpy on cpu, H2D / D2H through device_allocator(device()) on a device.
  void copy_input_from_host(int i, const Tensor& host);
  void copy_output_to_host(int i, Tensor& host) const;
  Device device() const { return options_.device; }

  void run();  // one step; advances the step counter
  void set_step(uint64_t step) { step_.step = step; }
  // The global row of this step's first example (-1: random ops keyed by replica); see StepInfo.
  void set_first_row(int64_t row) { step_.first_row = row; }
  uint64_t step() const { return step_.step; }

  size_t arena_bytes() const { return arena_bytes_; }
  size_t unplanned_bytes() const { return unplanned_bytes_; }  // sum of sizes without reuse
  double compile_seconds() const { return compile_seconds_; }
  int num_scheduled() const { return int(schedule_.size()); }
  const Graph& graph() const { return graph_; }
  // One line per pass result (fusions, fallbacks, memory) for --verbose.
  const std::vector<std::string>& report() const { return report_; }

 private:
  struct Step;
  void plan_memory();
  void build_kernels();
  void run_eager();
  void print_profile() const;  // LOCKSTEP_PROFILE=1

  Graph graph_;
  CompileOptions options_;
  std::vector<Value> inputs_, outputs_;
  std::vector<int> schedule_;
  std::vector<std::vector<Tensor>> values_;  // per node, per output: views
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<Tensor> input_tensors_, output_tensors_;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0, unplanned_bytes_ = 0, workspace_bytes_ = 0;
  void* workspace_ = nullptr;
  DeviceAllocator* allocator_ = nullptr;  // of options_.device: arena and workspace
  double compile_seconds_ = 0;
  StepInfo step_;
  std::vector<std::string> report_;
};

// Graph passes (run by Executable; exposed for tests).
// Dead-code elimination + scheduling: pure nodes reachable from `outputs` in index order,
// then side-effect nodes in index order; nodes with attr schedule_early=true then move up to
// right after their last producer (the gradient all-reduce starts).
std::vector<int> schedule_nodes(const Graph& g, const std::vector<Value>& outputs);
// Rewrites conv2d -> bias_add -> relu chains into one fused conv2d node, batch_norm_train ->
// [add ->] relu into one batch_norm_train (activation, residual), the same for
// batch_norm_infer, relu_grad -> batch_norm_train_grad into one batch_norm_train_grad, folds
// conv2d -> batch_norm_infer into the conv (batch_norm_fold) and merges neighbouring optimizer
// updates; returns a report.
std::vector<std::string> fuse_graph(Graph& g, std::vector<Value>& outputs);
// The cpu backend's layouts (after fuse_graph): a float32 4-D activation (channels a multiple of
// 16, so the same bytes) whose producer and every reader take oneDNN's blocked nChw16c layout
// stays in it, where a convolution writes or reads it: no reorder between the convolutions of
// an inference or a training program. Takers: conv2d and its two gradients (x and y sides),
// max_pool2d (x) and max_pool2d_grad (x, dx), batch_norm_train/_infer/_train_grad (all tensors
// shaped like x), reduce_sum/reduce_mean over axes [0, 1, 2] or [1, 2] and their gradients, and
// same-shape elementwise ops (layout-agnostic: they tie their operands to one layout). A graph
// output, a reshape, a bfloat16 op or any other reader keeps a tensor, and all tied to it, NHWC.
// Sets the nodes' src_layout/dst_layout/layout attrs; appends one "layout: nChw16c between ..."
// line per blocked set of tensors to `report`.
void plan_layouts(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report);

}  // namespace lockstep
