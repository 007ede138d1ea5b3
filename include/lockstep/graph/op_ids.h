// Every op's id, declared once: the X-macro LOCKSTEP_OPS lists the names, OpCode has an enumerator
// for each and lockstep::op::<name> is a constant for each. The IR holds ids, not strings
// (Node::op is an OpId, Graph::add takes one), so a misspelt op is a compile error, not a
// silently unmatched string.
// tests/ops/registry_test.cpp holds this list equal to the registered declarations, both ways:
// an id without a declaration, or a declaration without an id, fails it.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace lockstep {

enum class OpCode : uint16_t;

/// A declared op: an index into LOCKSTEP_OPS, so `Node::op` and `Graph::add` take only ids the
/// compiler knows (g.add("relu", ...) does not compile), a `switch (n.op.code())` over ops is
/// checked by -Wswitch, and comparing two ids compares two integers. The name is for messages,
/// files and docs: `id.name()`, `std::string(id)`, `os << id`. A name read at run time (a test
/// table, a file) becomes an id through OpId::named, which refuses an undeclared name.
class OpId {
 public:
  /// No op (a default-made Node); name() is "<none>". Never a declared op.
  constexpr OpId() = default;
  constexpr explicit OpId(OpCode c) : code_(c) {}  ///< The id of enumerator `c`.
  constexpr OpCode code() const { return code_; }  ///< The enumerator, for switches.
  constexpr bool valid() const { return uint16_t(code_) != kNone; }  ///< False for OpId().
  const char* name() const;  ///< "relu": the op's registered name ("<none>" for OpId()).
  std::string_view view() const { return name(); }  ///< The name, without a copy.
  operator std::string() const { return name(); }   ///< The name as a std::string.
  /// The id named `name`; an error naming it (and saying it is not declared) otherwise.
  static OpId named(std::string_view name);
  /// The id named `name`, or OpId() when no op is declared under it.
  static OpId find(std::string_view name);
  /// Two ids are equal when they name the same op.
  friend constexpr bool operator==(OpId a, OpId b) { return a.code_ == b.code_; }
  /// Orders ids by declaration order (LOCKSTEP_OPS is sorted by name), for maps and sets.
  friend constexpr bool operator<(OpId a, OpId b) { return a.code_ < b.code_; }
  /// "prefix " + op::relu, for messages.
  friend std::string operator+(const std::string& a, OpId b) { return a + b.name(); }
  /// "prefix " + op::relu, for messages.
  friend std::string operator+(const char* a, OpId b) { return std::string(a) + b.name(); }
  /// op::relu + " suffix", for messages.
  friend std::string operator+(OpId a, const std::string& b) { return a.name() + b; }
  /// op::relu + " suffix", for messages.
  friend std::string operator+(OpId a, const char* b) { return std::string(a.name()) + b; }
  /// Writes the name.
  friend std::ostream& operator<<(std::ostream& os, OpId id) { return os << id.name(); }

 private:
  static constexpr uint16_t kNone = 0xffff;
  OpCode code_ = OpCode(kNone);
};

// clang-format off
#define LOCKSTEP_OPS(X) \
  X(abs) X(abs_grad) X(adam_update) X(add) X(all_reduce_start) X(all_reduce_wait) X(assign) \
  X(assign_add) X(avg_pool2d) X(avg_pool2d_grad) X(batch_matmul) X(batch_norm_fold) \
  X(batch_norm_infer) X(batch_norm_infer_grad) X(batch_norm_train) X(batch_norm_train_grad) \
  X(bias_add) X(binary_accuracy) X(broadcast_to) X(cast) X(categorical_accuracy) X(concat) \
  X(constant) X(conv2d) X(conv2d_backward_filter) X(conv2d_backward_input) \
  X(conv2d_pointwise_depthwise) X(cross_replica_sum) X(cumsum) X(div) X(dropout) X(elu) \
  X(elu_grad) X(equal) X(exp) X(gather) X(gather_grad) X(gelu) X(gelu_grad) X(greater) \
  X(greater_equal) X(gru) X(gru_grad) X(identity) X(image_adjust_brightness) \
  X(image_adjust_brightness_grad) X(image_adjust_contrast) X(image_adjust_contrast_grad) \
  X(image_affine_transform) X(image_affine_transform_grad) X(image_crop) X(image_crop_grad) \
  X(image_flip) X(image_random_affine) X(image_random_brightness) X(image_random_contrast) \
  X(image_random_crop) X(image_random_flip) X(image_resize) X(in_top_k) X(input) X(layer_norm) \
  X(layer_norm_grad) X(leaky_relu) X(leaky_relu_grad) X(less) X(less_equal) X(log) X(log_softmax) \
  X(log_softmax_grad) X(logical_and) X(logical_not) X(logical_or) X(lr_schedule) X(lstm) \
  X(lstm_grad) X(matmul) X(max_pool2d) X(max_pool2d_grad) X(maximum) X(maximum_grad) X(minimum) \
  X(minimum_grad) X(mul) X(neg) X(not_equal) X(one_hot) X(ones_like) X(pad) X(random_categorical) \
  X(reduce_max) X(reduce_max_grad) X(reduce_mean) X(reduce_mean_grad) X(reduce_sum) \
  X(reduce_sum_grad) X(relu) X(relu6) X(relu6_grad) X(relu_grad) X(reshape) X(reverse) \
  X(rms_norm) X(rms_norm_grad) X(rmsprop_update) X(rotary_embedding) X(scale_shift) \
  X(scaled_dot_product_attention) X(scaled_dot_product_attention_grad) X(sgd_update) X(sigmoid) \
  X(sigmoid_cross_entropy) X(sigmoid_cross_entropy_grad) X(sigmoid_grad) X(simple_rnn) \
  X(simple_rnn_grad) X(slice) X(slice_grad) X(softmax) X(softmax_cross_entropy) \
  X(softmax_cross_entropy_grad) X(softmax_grad) X(softplus) X(softplus_grad) \
  X(sparse_categorical_accuracy) X(sparse_softmax_cross_entropy) \
  X(sparse_softmax_cross_entropy_grad) X(sqrt) X(square) X(stop_gradient) X(sub) X(swish) \
  X(swish_grad) X(tanh) X(tanh_grad) X(transpose) X(upsample2d) X(upsample2d_grad) X(variable) \
  X(where) X(zeros_like)
// clang-format on

/// One enumerator per declared op, in the order of LOCKSTEP_OPS.
enum class OpCode : uint16_t {
#define LOCKSTEP_OP_CODE(name) name,
  LOCKSTEP_OPS(LOCKSTEP_OP_CODE)
#undef LOCKSTEP_OP_CODE
};

namespace op {
#define LOCKSTEP_OP_ID(name) inline constexpr OpId name{OpCode::name};
LOCKSTEP_OPS(LOCKSTEP_OP_ID)
#undef LOCKSTEP_OP_ID
}  // namespace op

/// Every declared id, in the order of LOCKSTEP_OPS (sorted by name).
inline constexpr OpId kAllOpIds[] = {
#define LOCKSTEP_OP_ID(name) op::name,
    LOCKSTEP_OPS(LOCKSTEP_OP_ID)
#undef LOCKSTEP_OP_ID
};
/// How many ops are declared.
inline constexpr size_t kOpCount = sizeof(kAllOpIds) / sizeof(kAllOpIds[0]);

}  // namespace lockstep
