// What a recurrent op node (lstm, gru, simple_rnn and their gradients) computes, read from its
// op and attributes once: the cell, its gate and state counts and which optional inputs it has.
// Shared by the declarations (src/ops/rnn_ops.cpp) and every backend's kernels.
#pragma once
#include <string>

#include "lockstep/graph/op_registry.h"

namespace lockstep::ops {

/// A recurrent node's cell and options.
struct RnnCell {
  enum Kind { lstm, gru, simple } kind = lstm;
  int gates = 4;                       ///< gate blocks along the kernel's last axis (4, 3, 1)
  int states = 2;                      ///< state tensors (LSTM h, c; the others h)
  bool go_backwards = false;           ///< processes time from last to first
  bool output_in_input_order = false;  ///< y[:, t] belongs to input step t (else processing step)
  bool masked = false;                 ///< has a mask input (batch, time)
  bool zero_output_for_mask = false;   ///< a masked step outputs zeros
  bool recurrent_dropout = false;      ///< has a recurrent dropout input (batch, units)
  bool reset_after = true;             ///< GRU: Keras 3's reset_after (bias (2, 3H))
  bool relu = false;                   ///< SimpleRNN: relu instead of tanh

  /// Inputs of the forward op: x, kernel, recurrent_kernel, bias, states, [mask], [rdrop].
  int forward_inputs() const { return 4 + states + int(masked) + int(recurrent_dropout); }
  /// Index of the mask input among the forward inputs (valid when masked).
  int mask_input() const { return 4 + states; }
  /// Index of the recurrent dropout input among the forward inputs.
  int rdrop_input() const { return 4 + states + int(masked); }
  /// The bias's shape for `units`.
  Shape bias_shape(int64_t units) const {
    if (kind == gru && reset_after) return Shape{2, gates * units};
    return Shape{gates * units};
  }
  /// The forward inputs' names, for messages.
  std::string input_names() const {
    std::string s = "x, kernel, recurrent_kernel, bias, h0";
    if (states == 2) s += ", c0";
    if (masked) s += ", mask";
    if (recurrent_dropout) s += ", rdrop";
    return s;
  }
};

/// The cell of a node of lstm, gru, simple_rnn or one of their gradients.
inline RnnCell rnn_cell(const Node& n) {
  RnnCell c;
  if (n.op == op::gru || n.op == op::gru_grad) {
    c.kind = RnnCell::gru;
    c.gates = 3;
    c.states = 1;
    c.reset_after = attr_b(n, "reset_after");
  } else if (n.op == op::simple_rnn || n.op == op::simple_rnn_grad) {
    c.kind = RnnCell::simple;
    c.gates = 1;
    c.states = 1;
    const std::string& a = attr_s(n, "nonlinearity");
    LS_CHECK(a == "tanh" || a == "relu", "nonlinearity must be \"tanh\" or \"relu\", got \"", a,
             "\"");
    c.relu = a == "relu";
  } else {
    LS_CHECK(n.op == op::lstm || n.op == op::lstm_grad, "not a recurrent op: ", n.op);
  }
  c.go_backwards = attr_b(n, "go_backwards");
  c.output_in_input_order = attr_b(n, "output_in_input_order");
  c.masked = attr_b(n, "masked");
  c.zero_output_for_mask = attr_b(n, "zero_output_for_mask");
  c.recurrent_dropout = attr_b(n, "recurrent_dropout");
  return c;
}

}  // namespace lockstep::ops
