// Reverse-mode autodiff over the graph IR: appends gradient nodes to the same graph.
#pragma once
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep {

/// Handed to each op's gradient function: adds nodes to the graph being differentiated.
class GradBuilder {
 public:
  explicit GradBuilder(Graph& g) : g_(g) {}  ///< Adds gradient nodes to `g`.
  Graph& graph() { return g_; }              ///< The graph being differentiated.
  /// Graph::add of a gradient node (named by set_name's name): op `op` on `inputs`, its one
  /// output.
  Value add(OpId op, std::vector<Value> inputs, Attrs attrs = {}) {
    return g_.add(op, std::move(inputs), std::move(attrs), grad_name_);
  }
  /// Graph::add_multi of a gradient node: every output of op `op`.
  std::vector<Value> add_multi(OpId op, std::vector<Value> inputs, Attrs attrs = {}) {
    return g_.add_multi(op, std::move(inputs), std::move(attrs), grad_name_);
  }
  /// The shape and dtype of `v`.
  const TensorType& type(Value v) const { return g_.type(v); }
  /// Sums a broadcast gradient back down to `shape` (numpy broadcasting rules).
  Value sum_to(Value grad, const Shape& shape);
  /// The name the nodes added from now on get (gradients() uses "<forward node>/grad").
  void set_name(const std::string& n) { grad_name_ = n; }

 private:
  Graph& g_;
  std::string grad_name_;
};

/// d(loss)/d(wrt[i]) for each i; loss must be a scalar. A wrt that loss does not depend on gets
/// a zeros value of its shape.
std::vector<Value> gradients(Graph& g, Value loss, const std::vector<Value>& wrt);

}  // namespace lockstep
