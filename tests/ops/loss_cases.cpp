// Op-table cases for losses and metrics (labels are int32, non-differentiable).
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

OpInput in(Shape s, float lo = -1.f, float hi = 1.f) {
  return OpInput{.shape = s, .lo = lo, .hi = hi};
}
OpInput labels(Shape s, int classes) {
  return OpInput{
      .shape = s, .dtype = DType::i32, .lo = 0, .hi = float(classes), .differentiable = false};
}
OpCase fwd(const std::string& name, const std::string& op, std::vector<OpInput> ins,
           Attrs at = {}) {
  return OpCase{.name = name, .op = op, .attrs = at, .inputs = std::move(ins), .check_grad = false};
}

}  // namespace

LS_OP_CASES(loss_ops) {
  std::vector<OpCase> c;
  const std::string sx = "sparse_softmax_cross_entropy";
  c.push_back(OpCase{.name = sx, .op = sx, .inputs = {in({4, 5}, -2.f, 2.f), labels({4}, 5)}});
  c.push_back(OpCase{.name = sx + "_smoothing",
                     .op = sx,
                     .attrs = Attrs{{"label_smoothing", 0.1}},
                     .inputs = {in({4, 5}, -2.f, 2.f), labels({4}, 5)}});
  c.push_back(OpCase{
      .name = sx + "_labels_n1", .op = sx, .inputs = {in({3, 4}, -2.f, 2.f), labels({3, 1}, 4)}});
  c.push_back(OpCase{
      .name = sx + "_rank3", .op = sx, .inputs = {in({2, 3, 4}, -2.f, 2.f), labels({2, 3}, 4)}});
  c.push_back(fwd(sx + "_large", sx, {in({1024, 10}, -4.f, 4.f), labels({1024}, 10)}));
  c.push_back(fwd(sx + "_grad", sx + "_grad", {in({4}), in({4, 5}, -2.f, 2.f), labels({4}, 5)}));
  c.push_back(fwd(sx + "_grad_smoothing_large", sx + "_grad",
                  {in({1024}), in({1024, 10}, -4.f, 4.f), labels({1024}, 10)},
                  Attrs{{"label_smoothing", 0.2}}));

  const std::string dx = "softmax_cross_entropy";
  c.push_back(
      OpCase{.name = dx, .op = dx, .inputs = {in({3, 4}, -2.f, 2.f), in({3, 4}, 0.f, 1.f)}});
  c.push_back(OpCase{.name = dx + "_smoothing",
                     .op = dx,
                     .attrs = Attrs{{"label_smoothing", 0.2}},
                     .inputs = {in({3, 4}, -2.f, 2.f), in({3, 4}, 0.f, 1.f)}});
  c.push_back(
      fwd(dx + "_grad", dx + "_grad", {in({3}), in({3, 4}, -2.f, 2.f), in({3, 4}, 0.f, 1.f)}));

  const std::string bx = "sigmoid_cross_entropy";
  c.push_back(
      OpCase{.name = bx, .op = bx, .inputs = {in({3, 4}, -3.f, 3.f), in({3, 4}, 0.f, 1.f)}});
  c.push_back(
      OpCase{.name = bx + "_rank1", .op = bx, .inputs = {in({5}, -3.f, 3.f), in({5}, 0.f, 1.f)}});
  c.push_back(
      fwd(bx + "_grad", bx + "_grad", {in({3, 4}), in({3, 4}, -3.f, 3.f), in({3, 4}, 0.f, 1.f)}));

  c.push_back(fwd("sparse_categorical_accuracy", "sparse_categorical_accuracy",
                  {in({6, 5}), labels({6}, 5)}));
  c.push_back(fwd("sparse_categorical_accuracy_large", "sparse_categorical_accuracy",
                  {in({4096, 10}), labels({4096}, 10)}));
  c.push_back(
      fwd("categorical_accuracy", "categorical_accuracy", {in({6, 5}), in({6, 5}, 0.f, 1.f)}));
  c.push_back(fwd("in_top_k", "in_top_k", {in({8, 5}), labels({8}, 5)}, Attrs{{"k", 2}}));
  c.push_back(fwd("binary_accuracy", "binary_accuracy",
                  {in({6}, 0.f, 1.f), OpInput{.shape = {6}, .values = {0, 1, 1, 0, 1, 0}}}));
  return c;
}

}  // namespace lockstep::testing
