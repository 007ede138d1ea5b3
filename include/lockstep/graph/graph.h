// The graph IR: nodes (op + attrs + inputs + typed outputs) appended in topological order.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/graph/attrs.h"
#include "lockstep/graph/op_ids.h"

namespace lockstep {

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
  std::string str() const;
};

// A persistent tensor that outlives steps: weights, optimizer slots, metric accumulators.
struct Variable {
  std::string name;
  Tensor value;
  bool trainable = true;
};
using VariablePtr = std::shared_ptr<Variable>;

// One output of one node.
struct Value {
  int node = -1;
  int index = 0;
  bool valid() const { return node >= 0; }
  bool operator==(const Value&) const = default;
};

struct Node {
  int id = -1;
  std::string op;
  std::string name;  // user-facing (layer) name for errors; may be empty
  Attrs attrs;
  std::vector<Value> inputs;
  std::vector<TensorType> outputs;
  VariablePtr variable;  // op "variable" (read) and in-place update ops (target)
};

class Graph {
 public:
  // Appends a node, running the op's shape function; errors name the op and node.
  Value add(const std::string& op, std::vector<Value> inputs, Attrs attrs = {},
            const std::string& name = "", VariablePtr var = nullptr);
  // Same, returning all outputs.
  std::vector<Value> add_multi(const std::string& op, std::vector<Value> inputs, Attrs attrs = {},
                               const std::string& name = "", VariablePtr var = nullptr);
  Value input(const TensorType& type, const std::string& name);  // placeholder
  Value variable(const VariablePtr& v);  // read of a persistent variable (deduplicated)
  Value scalar(float v);                 // f32 constant of shape ()

  const Node& node(int i) const { return nodes_[i]; }
  Node& node(int i) { return nodes_[i]; }
  int size() const { return int(nodes_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const TensorType& type(Value v) const { return nodes_[v.node].outputs[v.index]; }
  const std::vector<int>& inputs() const { return inputs_; }

  // Re-runs shape inference with every input's dim 0 set to `batch` (specialise a symbolic
  // batch to a concrete one). Returns the specialised copy.
  Graph specialise_batch(int64_t batch) const;
  std::string dump() const;

 private:
  std::vector<Node> nodes_;
  std::vector<int> inputs_;
  std::vector<std::pair<Variable*, int>> var_nodes_;
};

}  // namespace lockstep
