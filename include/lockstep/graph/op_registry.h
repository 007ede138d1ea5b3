// One registration per op: shape function, gradient builder, flags, and kernels per backend.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep {

// What a kernel sees at run time. Built once per executable; no allocation per step.
struct StepInfo {
  uint64_t step = 0;      // global step counter (RNG counter for dropout etc.)
  uint32_t replica = 0;   // replica id (decorrelates per-replica randomness)
  uint64_t seed = 0;      // model seed
};

struct KernelArgs {
  const Tensor* inputs = nullptr;
  int num_inputs = 0;
  Tensor* outputs = nullptr;
  int num_outputs = 0;
  void* workspace = nullptr;  // workspace_bytes() of scratch, valid during run()
  const StepInfo* step = nullptr;
  const Tensor& in(int i) const { return inputs[i]; }
  Tensor& out(int i) const { return outputs[i]; }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual size_t workspace_bytes() const { return 0; }
  virtual void run(const KernelArgs& args) = 0;
};

// Builds a kernel for one node with its concrete input types (shapes known).
using KernelFactory =
    std::function<std::unique_ptr<Kernel>(const Node&, const std::vector<TensorType>&)>;

// Wraps a stateless lambda as a kernel factory.
template <typename Fn>
KernelFactory simple_kernel(Fn fn) {
  struct K : Kernel {
    Fn fn; const Node* node;
    K(Fn f, const Node* n) : fn(f), node(n) {}
    void run(const KernelArgs& a) override { fn(*node, a); }
  };
  return [fn](const Node& n, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
    return std::make_unique<K>(fn, &n);
  };
}

class GradBuilder;

struct OpDef {
  std::string name;
  // Validates inputs/attrs and returns output types. Throw lockstep::Error on bad input;
  // Graph::add prefixes the op and node name.
  std::function<std::vector<TensorType>(const Node&, const std::vector<TensorType>&)> infer;
  // Builds gradient values for each input from the output gradients; empty = not differentiable.
  std::function<std::vector<Value>(GradBuilder&, const Node&, const std::vector<Value>& dy)> grad;
  bool side_effects = false;  // mutates node.variable (scheduled after all pure nodes)
  int alias_input = -1;       // output 0 is a view of this input (reshape, identity)
};

class OpRegistry {
 public:
  static OpRegistry& get();
  void add(OpDef def);
  const OpDef& op(const std::string& name) const;
  bool has(const std::string& name) const { return ops_.count(name) != 0; }
  void add_kernel(const std::string& op, const std::string& backend, KernelFactory f);
  const KernelFactory* kernel(const std::string& op, const std::string& backend) const;
  std::vector<std::string> op_names() const;

 private:
  std::unordered_map<std::string, OpDef> ops_;
  std::unordered_map<std::string, std::unordered_map<std::string, KernelFactory>> kernels_;
};

// Static registration: LOCKSTEP_REGISTER(unique_id) { ...code run at load time... }
#define LS_CONCAT2(a, b) a##b
#define LS_CONCAT(a, b) LS_CONCAT2(a, b)
#define LOCKSTEP_REGISTER(id)                                          \
  static void LS_CONCAT(ls_register_, id)();                           \
  static const bool LS_CONCAT(ls_registered_, id) =                    \
      (LS_CONCAT(ls_register_, id)(), true);                           \
  static void LS_CONCAT(ls_register_, id)()

}  // namespace lockstep
