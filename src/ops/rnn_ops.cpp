// Declarations of the recurrent ops lstm, gru and simple_rnn (+ their gradients): a whole
// sequence (batch, time, features) through one Keras cell, in Keras's weight layout and gate
// order, with initial states, an optional Keras mask and an optional recurrent-dropout mask.
#include "ops/internal/op_util.h"
#include "ops/internal/rnn_cell.h"

namespace lockstep::ops {
namespace {

using Types = std::vector<TensorType>;
constexpr const char* kGroup = "nn";
constexpr const char* kOnnxPending =
    "!not exported yet: ONNX's LSTM and GRU ops can express it (their gate orders iofc and zrh)";

void check_shape(const TensorType& t, const Shape& want, const char* what) {
  expect_f32(t, what);
  LS_CHECK(t.shape.rank() == want.rank(), what, " has shape ", t.shape.str(), ", expected ",
           want.str());
  for (int i = 0; i < want.rank(); ++i)
    LS_CHECK(want[i] < 0 || t.shape[i] < 0 || want[i] == t.shape[i], what, " has shape ",
             t.shape.str(), ", expected ", want.str());
}

// Checks the forward inputs starting at in[first] against the cell; returns (N, T, H).
Shape check_forward(const Node& n, const Types& in, size_t first) {
  const RnnCell cell = rnn_cell(n);
  const size_t want = first + size_t(cell.forward_inputs());
  LS_CHECK(in.size() == want, "expects ", want, " inputs (", cell.input_names(), "), got ",
           in.size());
  const TensorType& x = in[first];
  expect_f32(x, "x");
  LS_CHECK(x.shape.rank() == 3, "x must be (batch, time, features), got ", x.shape.str());
  const Shape& k = in[first + 1].shape;
  LS_CHECK(k.rank() == 2 && k[1] > 0 && k[1] % cell.gates == 0, "kernel has shape ", k.str(),
           ", expected (features, ", cell.gates, " * units)");
  const int64_t N = x.shape[0], T = x.shape[1], F = x.shape[2], H = k[1] / cell.gates;
  check_shape(in[first + 1], Shape{F, cell.gates * H}, "kernel");
  check_shape(in[first + 2], Shape{H, cell.gates * H}, "recurrent_kernel");
  check_shape(in[first + 3], cell.bias_shape(H), "bias");
  for (int s = 0; s < cell.states; ++s)
    check_shape(in[first + 4 + s], Shape{N, H}, "initial state");
  size_t i = first + 4 + size_t(cell.states);
  if (cell.masked) check_shape(in[i++], Shape{N, T}, "mask");
  if (cell.recurrent_dropout) check_shape(in[i++], Shape{N, H}, "recurrent dropout mask");
  return Shape{N, T, H};
}

Types rnn_infer(const Node& n, const Types& in) {
  const Shape s = check_forward(n, in, 0);
  Types out{f32(s)};
  for (int k = 0; k < rnn_cell(n).states; ++k) out.push_back(f32(Shape{s[0], s[2]}));
  return out;
}

// (dy, dh[, dc], forward inputs...) -> gradients of x, kernel, recurrent_kernel, bias, states.
Types rnn_grad_infer(const Node& n, const Types& in) {
  const RnnCell cell = rnn_cell(n);
  const size_t first = 1 + size_t(cell.states);
  LS_CHECK(in.size() > first, "expects dy, the state gradients and the forward inputs");
  const Shape s = check_forward(n, in, first);
  check_shape(in[0], s, "dy");
  for (int k = 0; k < cell.states; ++k) check_shape(in[1 + k], Shape{s[0], s[2]}, "state grad");
  Types out;
  for (int k = 0; k < 4 + cell.states; ++k) out.push_back(in[first + k]);
  for (auto& t : out) t.dtype = DType::f32;
  return out;
}

std::vector<Value> rnn_grad(OpId grad_op, GradBuilder& b, const Node& n,
                            const std::vector<Value>& dy) {
  std::vector<Value> in(dy.begin(), dy.end());
  for (Value v : n.inputs) in.push_back(v);
  std::vector<Value> g = b.add_multi(grad_op, in, attrs_for(grad_op, n.attrs));
  const RnnCell cell = rnn_cell(n);
  if (cell.masked) g.push_back(Value{});
  if (cell.recurrent_dropout) g.push_back(Value{});
  return g;
}

std::vector<AttrDecl> common_attrs() {
  return {{"go_backwards", boolean, false,
           "process the sequence from its last step to its first; y is in processing order "
           "(y[:, 0] is the last input step), as Keras's go_backwards"},
          {"masked", boolean, false,
           "a mask input (batch, time) follows the initial states: where it is 0 the step is "
           "skipped (the states are kept and the output repeats the previous one)"},
          {"zero_output_for_mask", boolean, false,
           "with a mask: a skipped step outputs zeros instead of the previous output"},
          {"output_in_input_order", boolean, false,
           "with go_backwards: y[:, t] is the output of input step t (the processing order "
           "flipped back, as Keras's Bidirectional flips its backward layer's sequence)"},
          {"recurrent_dropout", boolean, false,
           "a last input (batch, units) multiplies the state fed to the recurrent kernel "
           "(Keras's recurrent dropout mask, one per sequence)"}};
}

void add_rnn(OpId id, OpId grad_id, const char* forward_sig, const char* grad_sig, const char* doc,
             std::vector<AttrDecl> extra, const char* onnx) {
  std::vector<AttrDecl> attrs = common_attrs();
  for (auto& a : extra) attrs.push_back(a);
  add_op(kGroup,
         {.name = id,
          .signature = forward_sig,
          .doc = doc,
          .attrs = attrs,
          .infer = rnn_infer,
          .grad = [grad_id](GradBuilder& b, const Node& n,
                            const std::vector<Value>& dy) { return rnn_grad(grad_id, b, n, dy); },
          .bf16 = true,
          .bf16_outputs = {},
          .onnx = onnx[0] == '!' ? OnnxLowering{.none = onnx + 1} : OnnxLowering{.recipe = onnx}});
  add_op(kGroup, {.name = grad_id,
                  .signature = grad_sig,
                  .doc = std::string("Gradient of ") + id.name() +
                         " (recomputes the forward pass; the mask inputs get none).",
                  .attrs = attrs,
                  .infer = rnn_grad_infer,
                  .bf16 = true,
                  .onnx = {.none = kOnnxGradient}});
}

}  // namespace

LOCKSTEP_REGISTER(rnn_ops) {
  add_rnn(op::lstm, op::lstm_grad,
          "(x[N, T, F], kernel[F, 4H], recurrent_kernel[H, 4H], bias[4H], h0[N, H], c0[N, H]"
          "[, mask[N, T]][, rdrop[N, H]]) -> (y[N, T, H], h[N, H], c[N, H])",
          "(dy, dh, dc, x, kernel, recurrent_kernel, bias, h0, c0[, mask][, rdrop]) -> "
          "(dx, dkernel, drecurrent_kernel, dbias, dh0, dc0)",
          "Keras's LSTM over a whole sequence: gates i, f, c, o (in that order along the 4H "
          "axis), i = sigmoid, c~ = tanh; c = f * c + i * c~, h = o * tanh(c).",
          {}, kOnnxPending);
  add_rnn(op::gru, op::gru_grad,
          "(x[N, T, F], kernel[F, 3H], recurrent_kernel[H, 3H], bias[2, 3H] or [3H], h0[N, H]"
          "[, mask[N, T]][, rdrop[N, H]]) -> (y[N, T, H], h[N, H])",
          "(dy, dh, x, kernel, recurrent_kernel, bias, h0[, mask][, rdrop]) -> "
          "(dx, dkernel, drecurrent_kernel, dbias, dh0)",
          "Keras's GRU over a whole sequence: gates z, r, h (in that order along the 3H axis); "
          "h = z * h_prev + (1 - z) * tanh(x_h + r * (h_prev @ U_h + b_h)) with reset_after, "
          "tanh(x_h + (r * h_prev) @ U_h) without.",
          {{"reset_after", boolean, true,
            "Keras 3's default: bias (2, 3H) = (input bias, recurrent bias) and the reset gate "
            "multiplies the recurrent candidate after its matmul; false: bias (3H) and the reset "
            "gate applies to h_prev before it"}},
          kOnnxPending);
  add_rnn(
      op::simple_rnn, op::simple_rnn_grad,
      "(x[N, T, F], kernel[F, H], recurrent_kernel[H, H], bias[H], h0[N, H][, mask[N, T]]"
      "[, rdrop[N, H]]) -> (y[N, T, H], h[N, H])",
      "(dy, dh, x, kernel, recurrent_kernel, bias, h0[, mask][, rdrop]) -> "
      "(dx, dkernel, drecurrent_kernel, dbias, dh0)",
      "Keras's SimpleRNN over a whole sequence: h = activation(x @ kernel + h_prev @ "
      "recurrent_kernel + bias).",
      {{"nonlinearity", str, "tanh", "the activation: \"tanh\" or \"relu\" (Keras's activation)"}},
      "!no ONNX export of SimpleRNN yet (ONNX's RNN op could express it)");
}

}  // namespace lockstep::ops
