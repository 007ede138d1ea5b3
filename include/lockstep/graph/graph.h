// The graph IR: nodes (op + attrs + inputs + typed outputs) appended in topological order.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/graph/attrs.h"
#include "lockstep/graph/op_ids.h"

namespace lockstep {

/// The static type of a graph value: element type and shape (-1 dims for a symbolic batch).
struct TensorType {
  DType dtype = DType::f32;  ///< element type (default float32)
  Shape shape;               ///< dimensions; may hold -1 until specialise_batch
  bool operator==(const TensorType&) const = default;  ///< Same dtype and shape.
  std::string str() const;  ///< "float32(None, 10)": dtype name, then Shape::str().
};

/// A persistent tensor that outlives steps: weights, optimizer slots, metric accumulators.
struct Variable {
  std::string name;       ///< "dense/kernel": unique within a model, used in checkpoints
  Tensor value;           ///< its current value (on the device the program runs on)
  bool trainable = true;  ///< whether the optimizer updates it (false: BN moving stats, frozen)
};
/// Variables are shared by the layers, graphs and optimizers that use them.
using VariablePtr = std::shared_ptr<Variable>;

/// A process-wide count that moves whenever host code is handed variables it may write outside
/// a model's own bookkeeping (Layer::weights(), Normalization::adapt()). A compiled program that
/// keeps values computed from variables alone (a folded batch norm's weights) recomputes them
/// when it or the model's DeviceResidence version moves.
uint64_t variable_host_epoch();
/// Moves variable_host_epoch() (host code is about to write, or may write, variables).
void note_variable_host_write();

/// One output of one node.
struct Value {
  int node = -1;  ///< the producing node's id in its Graph (-1: no value)
  int index = 0;  ///< which of that node's outputs (0 for single-output ops)
  bool valid() const { return node >= 0; }        ///< False for a default-made Value.
  bool operator==(const Value&) const = default;  ///< Same node and output index.
};

/// One op application in a Graph: its inputs are outputs of earlier nodes.
struct Node {
  int id = -1;                      ///< its index in Graph::nodes()
  OpId op;                          ///< the op (compare with op:: constants)
  std::string name;                 ///< user-facing (layer) name for errors; may be empty
  Attrs attrs;                      ///< the op's attributes, checked against its declaration
  std::vector<Value> inputs;        ///< one Value per operand, in the op's order
  std::vector<TensorType> outputs;  ///< the types its shape function inferred
  VariablePtr variable;             ///< op "variable" (read) and in-place update ops (target)
};

/// A dataflow graph: nodes appended in topological order (an input is always an earlier node),
/// each output's type inferred as it is added. Models trace their layers into one, autodiff
/// (gradients()) appends the backward pass, and Executable compiles it.
class Graph {
 public:
  /// Appends a node, running the op's shape function; errors name the op and node.
  Value add(OpId op, std::vector<Value> inputs, Attrs attrs = {}, const std::string& name = "",
            VariablePtr var = nullptr);
  /// Same, returning all outputs.
  std::vector<Value> add_multi(OpId op, std::vector<Value> inputs, Attrs attrs = {},
                               const std::string& name = "", VariablePtr var = nullptr);
  Value input(const TensorType& type, const std::string& name);  ///< placeholder
  Value variable(const VariablePtr& v);  ///< read of a persistent variable (deduplicated)
  Value scalar(float v);                 ///< f32 constant of shape ()

  const Node& node(int i) const { return nodes_[i]; }  ///< Node `i` (not bounds-checked).
  Node& node(int i) { return nodes_[i]; }  ///< Node `i`, for passes that rewrite it in place.
  int size() const { return int(nodes_.size()); }            ///< Number of nodes.
  const std::vector<Node>& nodes() const { return nodes_; }  ///< All nodes, in order.
  /// The type of value `v`.
  const TensorType& type(Value v) const { return nodes_[v.node].outputs[v.index]; }
  /// The ids of the input (placeholder) nodes, in the order input() added them.
  const std::vector<int>& inputs() const { return inputs_; }

  /// Re-runs shape inference with every input's dim 0 set to `batch` (specialise a symbolic
  /// batch to a concrete one). Returns the specialised copy.
  Graph specialise_batch(int64_t batch) const;
  /// The graph as text, one node a line, its name after '#':
  /// "%3 = matmul(%1:0, %2:0) {...} -> float32(32, 10)  # dense".
  std::string dump() const;

 private:
  std::vector<Node> nodes_;
  std::vector<int> inputs_;
  std::vector<std::pair<Variable*, int>> var_nodes_;
};

}  // namespace lockstep
