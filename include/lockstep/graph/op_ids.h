// Every op's id, declared once: the X-macro LOCKSTEP_OPS lists the names, and lockstep::op::<name>
// is a constant for each. Code names ops through these constants (g.add(op::relu, ...),
// n.op == op::conv2d), so a misspelt op is a compile error, not a silently unmatched string.
// tests/ops/registry_test.cpp holds this list equal to the registered declarations, both ways:
// an id without a declaration, or a declaration without an id, fails it.
#pragma once
#include <string>
#include <string_view>

namespace lockstep {

/// The name of a declared op. Converts to std::string (Graph::add, OpRegistry::op) and
/// compares with one (node.op == op::relu).
struct OpId {
  const char* name;                                         ///< "relu": the op's registered name
  operator std::string() const { return name; }             ///< The name as a std::string.
  constexpr std::string_view view() const { return name; }  ///< The name, without a copy.
  /// A string (a node's op) equals the id with the same name.
  friend bool operator==(const std::string& a, OpId b) { return a == b.name; }
  /// Two ids are equal when their names are.
  friend bool operator==(OpId a, OpId b) { return std::string_view(a.name) == b.name; }
  /// "prefix " + op::relu, for messages.
  friend std::string operator+(const std::string& a, OpId b) { return a + b.name; }
  /// op::relu + " suffix", for messages.
  friend std::string operator+(OpId a, const std::string& b) { return a.name + b; }
};

// clang-format off
#define LOCKSTEP_OPS(X) \
  X(abs) X(abs_grad) X(adam_update) X(add) X(all_reduce_start) X(all_reduce_wait) X(assign) \
  X(assign_add) X(avg_pool2d) X(avg_pool2d_grad) X(batch_norm_fold) X(batch_norm_infer) \
  X(batch_norm_infer_grad) X(batch_norm_train) X(batch_norm_train_grad) X(bias_add) \
  X(binary_accuracy) X(broadcast_to) X(cast) X(categorical_accuracy) X(concat) X(constant) \
  X(conv2d) X(conv2d_backward_filter) X(conv2d_backward_input) X(conv2d_pointwise_depthwise) \
  X(cross_replica_sum) X(div) \
  X(dropout) X(elu) X(elu_grad) X(exp) X(gelu) X(gelu_grad) X(identity) \
  X(image_adjust_brightness) X(image_adjust_brightness_grad) X(image_adjust_contrast) \
  X(image_adjust_contrast_grad) X(image_affine_transform) X(image_affine_transform_grad) \
  X(image_crop) X(image_crop_grad) X(image_flip) X(image_random_affine) \
  X(image_random_brightness) X(image_random_contrast) \
  X(image_random_crop) X(image_random_flip) X(image_resize) X(in_top_k) X(input) X(layer_norm) \
  X(layer_norm_grad) X(leaky_relu) X(leaky_relu_grad) X(log) X(log_softmax) X(log_softmax_grad) \
  X(lr_schedule) X(matmul) X(max_pool2d) X(max_pool2d_grad) X(maximum) X(maximum_grad) X(minimum) \
  X(minimum_grad) X(mul) X(neg) X(ones_like) X(pad) X(reduce_max) X(reduce_max_grad) X(reduce_mean) \
  X(reduce_mean_grad) X(reduce_sum) X(reduce_sum_grad) X(relu) X(relu6) X(relu6_grad) \
  X(relu_grad) X(reshape) X(rmsprop_update) X(scale_shift) X(sgd_update) X(sigmoid) \
  X(sigmoid_cross_entropy) X(sigmoid_cross_entropy_grad) X(sigmoid_grad) X(slice) X(slice_grad) \
  X(softmax) X(softmax_cross_entropy) X(softmax_cross_entropy_grad) X(softmax_grad) X(softplus) \
  X(softplus_grad) X(sparse_categorical_accuracy) X(sparse_softmax_cross_entropy) \
  X(sparse_softmax_cross_entropy_grad) X(sqrt) X(square) X(stop_gradient) X(sub) X(swish) \
  X(swish_grad) X(tanh) X(tanh_grad) X(upsample2d) X(upsample2d_grad) X(variable) \
  X(zeros_like)
// clang-format on

namespace op {
#define LOCKSTEP_OP_ID(name) inline constexpr OpId name{#name};
LOCKSTEP_OPS(LOCKSTEP_OP_ID)
#undef LOCKSTEP_OP_ID
}  // namespace op

/// Every declared id, in the order of LOCKSTEP_OPS (sorted by name).
inline constexpr OpId kAllOpIds[] = {
#define LOCKSTEP_OP_ID(name) op::name,
    LOCKSTEP_OPS(LOCKSTEP_OP_ID)
#undef LOCKSTEP_OP_ID
};

}  // namespace lockstep
