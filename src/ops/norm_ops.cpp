// Registrations of batch_norm_{train,infer}(+grads) and layer_norm(+grad): shapes and gradients.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

static void check_param(const TensorType& t, int64_t C, const char* what) {
  expect_f32(t, what);
  LS_CHECK(t.shape == Shape{C}, what, " has shape ", t.shape.str(), ", expected (", C,
           ") to match the last axis of x");
}

static int64_t channels(const TensorType& x) {
  expect_f32(x, "x");
  LS_CHECK(x.shape.rank() >= 1, "x must have at least one axis");
  int64_t C = x.shape[-1];
  LS_CHECK(C > 0, "the normalised (last) axis must be known, got ", x.shape.str());
  return C;
}

static Shape rows_shape(const Shape& x) {
  Shape r;
  for (int i = 0; i + 1 < x.rank(); ++i) r.push_back(x[i]);
  return r;
}

static bool is_zero(GradBuilder& b, Value v) { return b.graph().node(v.node).op == "zeros_like"; }

// Gradient op inputs: (dy, x, gamma, stat0, stat1) plus (dstat0, dstat1) when either is used.
static std::vector<Value> norm_grad(GradBuilder& b, const Node& n, const std::vector<Value>& dy,
                                    const char* op) {
  std::vector<Value> in{dy[0], n.inputs[0], n.inputs[1], Value{n.id, 1}, Value{n.id, 2}};
  if (!is_zero(b, dy[1]) || !is_zero(b, dy[2])) {
    in.push_back(dy[1]);
    in.push_back(dy[2]);
  }
  Attrs a;
  a.set("epsilon", AttrValue(n.attrs.f("epsilon", 1e-3)));
  return b.add_multi(op, in, a);
}

LOCKSTEP_REGISTER(norm_ops) {
  add_op({.name = "batch_norm_train",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            expect_inputs(in, 3);
            int64_t C = channels(in[0]);
            check_param(in[1], C, "gamma");
            check_param(in[2], C, "beta");
            return std::vector<TensorType>{in[0], f32(Shape{C}), f32(Shape{C})};
          },
          .grad = [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
            return norm_grad(b, n, dy, "batch_norm_train_grad");
          }});
  add_op({.name = "batch_norm_train_grad",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            LS_CHECK(in.size() == 5 || in.size() == 7, "expects 5 or 7 inputs, got ", in.size());
            int64_t C = channels(in[1]);
            LS_CHECK(in[0].shape == in[1].shape, "dy ", in[0].shape.str(), " and x ", in[1].shape.str(), " differ");
            for (size_t i = 2; i < in.size(); ++i) check_param(in[i], C, "gamma/mean/var");
            return std::vector<TensorType>{in[1], f32(Shape{C}), f32(Shape{C})};
          }});
  add_op({.name = "batch_norm_infer",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            expect_inputs(in, 5);
            int64_t C = channels(in[0]);
            const char* names[] = {"", "gamma", "beta", "moving_mean", "moving_variance"};
            for (int i = 1; i < 5; ++i) check_param(in[i], C, names[i]);
            return std::vector<TensorType>{in[0]};
          },
          .grad = [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
            Attrs a;
            a.set("epsilon", AttrValue(n.attrs.f("epsilon", 1e-3)));
            auto in = n.inputs;
            std::vector<Value> args{dy[0], in[0], in[1], in[3], in[4]};
            auto g = b.add_multi("batch_norm_infer_grad", args, a);  // dx, dgamma, dbeta, dmean, dvar
            return g;
          }});
  // (dy, x, gamma, mean, var) -> (dx, dgamma, dbeta, dmean, dvar).
  add_op({.name = "batch_norm_infer_grad",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            expect_inputs(in, 5);
            int64_t C = channels(in[1]);
            for (int i = 2; i < 5; ++i) check_param(in[i], C, "gamma/mean/var");
            auto c = f32(Shape{C});
            return std::vector<TensorType>{in[1], c, c, c, c};
          }});
  add_op({.name = "layer_norm",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            expect_inputs(in, 3);
            int64_t C = channels(in[0]);
            check_param(in[1], C, "gamma");
            check_param(in[2], C, "beta");
            Shape r = rows_shape(in[0].shape);
            return std::vector<TensorType>{in[0], f32(r), f32(r)};
          },
          .grad = [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
            return norm_grad(b, n, dy, "layer_norm_grad");
          }});
  add_op({.name = "layer_norm_grad",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            LS_CHECK(in.size() == 5 || in.size() == 7, "expects 5 or 7 inputs, got ", in.size());
            int64_t C = channels(in[1]);
            LS_CHECK(in[0].shape == in[1].shape, "dy ", in[0].shape.str(), " and x ", in[1].shape.str(), " differ");
            check_param(in[2], C, "gamma");
            Shape r = rows_shape(in[1].shape);
            for (size_t i = 3; i < in.size(); ++i)
              LS_CHECK(in[i].shape == r, "row statistics have shape ", in[i].shape.str(), ", expected ", r.str());
            return std::vector<TensorType>{in[1], f32(Shape{C}), f32(Shape{C})};
          }});
}

}  // namespace lockstep::ops
