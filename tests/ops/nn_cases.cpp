// Op-table cases for the neural-network ops: matmul, conv2d (+backward ops), pools, norms.
#include "ops/op_harness.h"

namespace lockstep::testing {
namespace {

using I = std::vector<int64_t>;

OpInput in(Shape s) { return OpInput{.shape = s}; }

// Distinct, well-separated values in [-1, 1) (no near-ties for max pooling FD checks).
OpInput distinct(Shape s) {
  OpInput r{.shape = s};
  const int64_t n = s.numel();
  for (int64_t i = 0; i < n; ++i) r.values.push_back(float((i * 37) % n) * 2.f / float(n) - 1.f);
  return r;
}

OpCase conv(std::string name, Shape x, Shape w, Attrs a) {
  return OpCase{.name = "conv2d_" + name, .op = "conv2d", .attrs = a, .inputs = {in(x), in(w)}};
}

OpCase matmul(bool ta, bool tb) {
  Shape a = ta ? Shape{4, 3} : Shape{3, 4}, b = tb ? Shape{5, 4} : Shape{4, 5};
  return OpCase{.name = std::string("matmul_") + (ta ? "T" : "N") + (tb ? "T" : "N"),
                .op = "matmul",
                .attrs = Attrs{{"transpose_a", ta}, {"transpose_b", tb}},
                .inputs = {in(a), in(b)}};
}

}  // namespace

LS_OP_CASES(nn_matmul_conv) {
  std::vector<OpCase> c{matmul(false, false), matmul(true, false), matmul(false, true),
                        matmul(true, true)};
  c.push_back(conv("valid", {2, 5, 5, 2}, {3, 3, 2, 3}, {}));
  c.push_back(conv("same", {1, 6, 6, 2}, {3, 3, 2, 2}, Attrs{{"padding", "same"}}));
  c.push_back(conv("same_stride2_even", {1, 6, 6, 2}, {3, 3, 2, 2},
                   Attrs{{"padding", "same"}, {"strides", I{2, 2}}}));
  c.push_back(conv("valid_stride2", {1, 7, 7, 2}, {3, 3, 2, 2}, Attrs{{"strides", I{2, 2}}}));
  c.push_back(conv("stride_2x1_5x3", {1, 7, 6, 2}, {3, 2, 2, 2},
                   Attrs{{"strides", I{2, 1}}, {"padding", "same"}}));
  c.push_back(conv("dilation2", {1, 7, 7, 2}, {3, 3, 2, 2}, Attrs{{"dilations", I{2, 2}}}));
  c.push_back(conv("dilation2_same", {1, 6, 6, 2}, {3, 3, 2, 2},
                   Attrs{{"dilations", I{2, 2}}, {"padding", "same"}}));
  c.push_back(conv("groups2", {1, 5, 5, 4}, {3, 3, 2, 4}, Attrs{{"groups", 2}}));
  c.push_back(
      conv("depthwise", {1, 5, 5, 3}, {3, 3, 1, 6}, Attrs{{"groups", 3}, {"padding", "same"}}));
  c.push_back(conv("pads", {1, 5, 5, 2}, {3, 3, 2, 2}, Attrs{{"pads", I{1, 0, 2, 1}}}));
  c.push_back(conv("1x1", {2, 3, 3, 4}, {1, 1, 4, 3}, {}));
  // Fused forms, as the fusion pass writes them.
  c.push_back(OpCase{.name = "conv2d_fused_bias",
                     .op = "conv2d",
                     .attrs = Attrs{{"fused_bias", true}, {"padding", "same"}},
                     .inputs = {in({1, 5, 5, 2}), in({3, 3, 2, 3}), in({3})}});
  c.push_back(OpCase{.name = "conv2d_fused_bias_relu",
                     .op = "conv2d",
                     .attrs = Attrs{{"fused_bias", true}, {"activation", "relu"}},
                     .inputs = {in({2, 5, 5, 2}), in({3, 3, 2, 3}), in({3})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "conv2d_fused_bias_relu_groups",
                     .op = "conv2d",
                     .attrs = Attrs{{"fused_bias", true},
                                    {"activation", "relu"},
                                    {"groups", 2},
                                    {"strides", I{2, 2}},
                                    {"padding", "same"}},
                     .inputs = {in({1, 6, 6, 4}), in({3, 3, 2, 4}), in({4})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "conv2d_fused_bias_relu6_depthwise_pads",
                     .op = "conv2d",
                     .attrs = Attrs{{"fused_bias", true},
                                    {"activation", "relu6"},
                                    {"groups", 4},
                                    {"strides", I{2, 2}},
                                    {"pads", I{0, 1, 0, 1}}},
                     .inputs = {in({2, 6, 6, 4}), in({3, 3, 1, 4}), in({4})},
                     .check_grad = false});
  c.push_back(
      OpCase{.name = "conv2d_fused_bias_swish",
             .op = "conv2d",
             .attrs = Attrs{{"fused_bias", true}, {"activation", "swish"}, {"padding", "same"}},
             .inputs = {in({2, 5, 5, 2}), in({3, 3, 2, 3}), in({3})},
             .check_grad = false});
  // The cpu backend's swish pass over a conv's output (vec_math.h's swish_span): several
  // parallel pieces of 16 Ki elements and a tail, float32 and bfloat16.
  c.push_back(
      OpCase{.name = "conv2d_fused_bias_swish_large",
             .op = "conv2d",
             .attrs = Attrs{{"fused_bias", true}, {"activation", "swish"}, {"padding", "same"}},
             .inputs = {in({4, 20, 21, 16}), in({1, 1, 16, 37}), in({37})},
             .check_grad = false});
  // The cpu backend's 1x1 + depthwise pair (conv_chain.h), inference only: oneDNN's fused
  // kernel (jit_1x1 with its depthwise post-op: a large pair, whole 16-channel blocks) or its
  // two-primitive form (small pairs, partial blocks) against the reference's two convolutions.
  // Stride 1 "same", stride 2 with Keras's correct_pad pads, an odd input with pads 1.
  auto pw_dw = [&](const char* name, const char* act, const char* dw_act, I strides, I pads, I x,
                   int64_t m) {
    c.push_back(
        OpCase{.name = name,
               .op = "conv2d_pointwise_depthwise",
               .attrs = Attrs{{"activation", act},
                              {"dw_activation", dw_act},
                              {"dw_strides", strides},
                              {"dw_pads", pads}},
               .inputs = {in(Shape(x)), in({1, 1, x[3], m}), in({m}), in({3, 3, 1, m}), in({m})},
               .check_grad = false});
  };
  pw_dw("pointwise_depthwise_same_swish", "swish", "swish", I{1, 1}, I{1, 1, 1, 1}, I{2, 6, 6, 16},
        32);
  pw_dw("pointwise_depthwise_s2_relu6", "relu6", "relu6", I{2, 2}, I{0, 1, 0, 1}, I{2, 8, 8, 8},
        24);
  pw_dw("pointwise_depthwise_s2_odd", "linear", "relu", I{2, 2}, I{1, 1, 1, 1}, I{1, 7, 5, 16}, 16);
  pw_dw("pointwise_depthwise_s2_fused", "swish", "swish", I{2, 2}, I{1, 1, 1, 1}, I{8, 47, 47, 16},
        32);
  // The squeeze-and-excitation gate: its gradient goes through sigmoid_grad of the output.
  c.push_back(
      OpCase{.name = "conv2d_fused_bias_sigmoid",
             .op = "conv2d",
             .attrs = Attrs{{"fused_bias", true}, {"activation", "sigmoid"}, {"padding", "same"}},
             .inputs = {in({2, 5, 5, 2}), in({3, 3, 2, 3}), in({3})}});
  // Backward ops directly (their gradients are conv2d / the other backward op).
  c.push_back(OpCase{
      .name = "conv2d_backward_input_same_s2",
      .op = "conv2d_backward_input",
      .attrs = Attrs{{"input_shape", I{1, 6, 6, 2}}, {"padding", "same"}, {"strides", I{2, 2}}},
      .inputs = {in({1, 3, 3, 3}), in({3, 3, 2, 3})}});
  c.push_back(OpCase{.name = "conv2d_backward_input_groups",
                     .op = "conv2d_backward_input",
                     .attrs = Attrs{{"input_shape", I{2, 5, 5, 4}}, {"groups", 2}},
                     .inputs = {in({2, 3, 3, 2}), in({3, 3, 2, 2})}});
  c.push_back(OpCase{.name = "conv2d_backward_filter_dil",
                     .op = "conv2d_backward_filter",
                     .attrs = Attrs{{"filter_shape", I{3, 3, 2, 3}}, {"dilations", I{2, 2}}},
                     .inputs = {in({1, 3, 3, 3}), in({1, 7, 7, 2})}});
  c.push_back(
      OpCase{.name = "conv2d_backward_filter_depthwise",
             .op = "conv2d_backward_filter",
             .attrs = Attrs{{"filter_shape", I{3, 3, 1, 4}}, {"groups", 2}, {"padding", "same"}},
             .inputs = {in({1, 4, 4, 4}), in({1, 4, 4, 2})}});
  // Depthwise filters other than 3x3 run Lockstep's kernel (depthwise_kernels.cpp), not
  // oneDNN's: 5x5 'same' over 20 channels (a full 16-channel block and a 4-lane tail), 5x5
  // strided with asymmetric pads, a dilated 3x3 at batch 1 (more threads than images: split by
  // rows), 7x7. Each also runs in bfloat16 (the harness's mixed-precision pass).
  c.push_back(
      OpCase{.name = "conv2d_backward_filter_depthwise_5x5_tail",
             .op = "conv2d_backward_filter",
             .attrs = Attrs{{"filter_shape", I{5, 5, 1, 20}}, {"groups", 20}, {"padding", "same"}},
             .inputs = {in({2, 6, 7, 20}), in({2, 6, 7, 20})}});
  c.push_back(OpCase{.name = "conv2d_backward_filter_depthwise_5x5_s2_pads",
                     .op = "conv2d_backward_filter",
                     .attrs = Attrs{{"filter_shape", I{5, 5, 1, 16}},
                                    {"groups", 16},
                                    {"strides", I{2, 2}},
                                    {"pads", I{1, 2, 2, 1}}},
                     .inputs = {in({3, 4, 4, 16}), in({3, 9, 9, 16})}});
  c.push_back(OpCase{.name = "conv2d_backward_filter_depthwise_dil2_batch1",
                     .op = "conv2d_backward_filter",
                     .attrs = Attrs{{"filter_shape", I{3, 3, 1, 32}},
                                    {"groups", 32},
                                    {"dilations", I{2, 2}},
                                    {"padding", "same"}},
                     .inputs = {in({1, 7, 6, 32}), in({1, 7, 6, 32})}});
  c.push_back(
      OpCase{.name = "conv2d_backward_filter_depthwise_7x7",
             .op = "conv2d_backward_filter",
             .attrs = Attrs{{"filter_shape", I{7, 7, 1, 16}}, {"groups", 16}, {"padding", "same"}},
             .inputs = {in({2, 5, 5, 16}), in({2, 5, 5, 16})}});
  // Conv2DTranspose's forms: explicit pads with forward-window slack (stride 3 > kernel 2:
  // the last output rows take no input), and a dilated kernel with asymmetric pads.
  c.push_back(OpCase{
      .name = "conv2d_backward_input_transpose_s3_k2",
      .op = "conv2d_backward_input",
      .attrs = Attrs{{"input_shape", I{1, 6, 9, 2}}, {"strides", I{3, 3}}, {"pads", I{0, 0, 0, 1}}},
      .inputs = {in({1, 2, 3, 3}), in({2, 2, 2, 3})}});
  c.push_back(OpCase{
      .name = "conv2d_backward_input_transpose_dil2",
      .op = "conv2d_backward_input",
      .attrs =
          Attrs{{"input_shape", I{2, 5, 4, 2}}, {"dilations", I{2, 2}}, {"pads", I{2, 2, 2, 2}}},
      .inputs = {in({2, 5, 4, 3}), in({3, 3, 2, 3})}});
  return c;
}

// UpSampling2D's op (linear: its gradient is upsample2d_grad, whose gradient is upsample2d).
LS_OP_CASES(nn_upsample) {
  std::vector<OpCase> c;
  for (std::string ip : {"nearest", "bilinear"}) {
    c.push_back(OpCase{.name = "upsample2d_" + ip + "_2x3",
                       .op = "upsample2d",
                       .attrs = Attrs{{"size", I{2, 3}}, {"interpolation", ip}},
                       .inputs = {in({2, 3, 4, 2})}});
    c.push_back(OpCase{.name = "upsample2d_" + ip + "_3x1",
                       .op = "upsample2d",
                       .attrs = Attrs{{"size", I{3, 1}}, {"interpolation", ip}},
                       .inputs = {in({1, 2, 3, 3})}});
    c.push_back(OpCase{.name = "upsample2d_grad_" + ip,
                       .op = "upsample2d_grad",
                       .attrs = Attrs{{"size", I{2, 2}}, {"interpolation", ip}},
                       .inputs = {in({2, 6, 4, 3})}});
  }
  return c;
}

LS_OP_CASES(nn_pool) {
  auto pool = [](std::string op, std::string name, Shape x, Attrs a) {
    return OpCase{
        .name = op + "_" + name, .op = op, .attrs = a, .inputs = {distinct(x)}, .fd_eps = 1e-3f};
  };
  std::vector<OpCase> c;
  for (std::string op : {"max_pool2d", "avg_pool2d"}) {
    c.push_back(pool(op, "valid2", {2, 4, 4, 3}, Attrs{{"pool_size", I{2, 2}}}));
    c.push_back(pool(op, "same3_s2", {1, 5, 5, 2},
                     Attrs{{"pool_size", I{3, 3}}, {"strides", I{2, 2}}, {"padding", "same"}}));
    c.push_back(pool(op, "same2_even", {1, 6, 6, 2},
                     Attrs{{"pool_size", I{2, 2}}, {"padding", "same"}, {"strides", I{1, 1}}}));
    c.push_back(pool(op, "valid2_odd_tail", {1, 5, 5, 3}, Attrs{{"pool_size", I{2, 2}}}));
    c.push_back(
        pool(op, "same2_s2_odd", {1, 5, 5, 3}, Attrs{{"pool_size", I{2, 2}}, {"padding", "same"}}));
    c.push_back(
        pool(op, "valid3_s1x2", {1, 6, 7, 2}, Attrs{{"pool_size", I{3, 2}}, {"strides", I{1, 2}}}));
  }
  // max_pool2d_grad on a consistent (x, y = max_pool(x)) pair.
  Attrs pa{{"pool_size", I{3, 3}}, {"strides", I{2, 2}}, {"padding", "same"}};
  c.push_back(OpCase{.name = "max_pool2d_grad_same",
                     .op = "max_pool2d_grad",
                     .attrs = pa,
                     .inputs = {in({2, 3, 3, 4}), distinct({2, 6, 6, 4})},
                     .check_grad = false,
                     .build = [pa](Graph& g, const std::vector<Value>& v) {
                       Value y = g.add(op::max_pool2d, {v[1]}, pa);
                       return g.add(op::max_pool2d_grad, {v[0], v[1], y}, pa);
                     }});
  // With the fused relu_grad (dx masked by x > 0): overlapping padded windows, and tiled ones.
  for (auto [tag, attrs, x] :
       {std::tuple{"same", pa, Shape{2, 6, 6, 4}},
        std::tuple{"valid2", Attrs{{"pool_size", I{2, 2}}}, Shape{2, 6, 6, 4}}}) {
    Attrs ra = attrs;
    ra.set("activation", "relu");
    const Shape ys{2, 3, 3, 4};
    c.push_back(OpCase{.name = std::string("max_pool2d_grad_relu_") + tag,
                       .op = "max_pool2d_grad",
                       .attrs = ra,
                       // Mostly negative: windows whose maximum is not positive get no dx.
                       .inputs = {in(ys), OpInput{.shape = x, .lo = -1.f, .hi = 0.4f}},
                       .check_grad = false,
                       .build = [attrs, ra](Graph& g, const std::vector<Value>& v) {
                         Value y = g.add(op::max_pool2d, {v[1]}, attrs);
                         return g.add(op::max_pool2d_grad, {v[0], v[1], y}, ra);
                       }});
  }
  c.push_back(OpCase{.name = "avg_pool2d_grad_same",
                     .op = "avg_pool2d_grad",
                     .attrs = Attrs{{"pool_size", I{3, 3}},
                                    {"strides", I{2, 2}},
                                    {"padding", "same"},
                                    {"input_shape", I{2, 6, 5, 3}}},
                     .inputs = {in({2, 3, 3, 3})}});
  return c;
}

LS_OP_CASES(nn_norm) {
  std::vector<OpCase> c;
  Attrs eps{{"epsilon", 1e-3}};
  for (int k = 0; k < 3; ++k) {
    c.push_back(OpCase{.name = "batch_norm_train_out" + std::to_string(k),
                       .op = "batch_norm_train",
                       .attrs = eps,
                       .inputs = {in({4, 3, 2, 3}), in({3}), in({3})},
                       .grad_output = k});
    c.push_back(OpCase{.name = "layer_norm_out" + std::to_string(k),
                       .op = "layer_norm",
                       .attrs = eps,
                       .inputs = {in({2, 3, 7}), in({7}), in({7})},
                       .grad_output = k});
  }
  c.push_back(OpCase{.name = "batch_norm_train_2d",
                     .op = "batch_norm_train",
                     .attrs = eps,
                     .inputs = {in({16, 5}), in({5}), in({5})}});
  // As the fusion pass rewrites batch_norm_train -> [add(z) ->] relu.
  Attrs relu{{"epsilon", 1e-3}, {"activation", "relu"}};
  Attrs add_relu{{"epsilon", 1e-3}, {"activation", "relu"}, {"residual", true}};
  c.push_back(OpCase{.name = "batch_norm_train_relu",
                     .op = "batch_norm_train",
                     .attrs = relu,
                     .inputs = {in({4, 3, 2, 3}), in({3}), in({3})}});
  c.push_back(OpCase{.name = "batch_norm_train_add_relu",
                     .op = "batch_norm_train",
                     .attrs = add_relu,
                     .inputs = {in({4, 3, 2, 3}), in({3}), in({3}), in({4, 3, 2, 3})},
                     .fd_eps = 1e-3f});  // random inputs: the relu kink lies near some
  c.push_back(OpCase{.name = "batch_norm_train_add",
                     .op = "batch_norm_train",
                     .attrs = Attrs{{"epsilon", 1e-3}, {"residual", true}},
                     .inputs = {in({16, 5}), in({5}), in({5}), in({16, 5})}});
  // batch_norm_train -> relu6 (MobileNetV2) and -> swish (EfficientNet), as the fusion pass
  // writes them; gamma in [3, 5] so bn(x) crosses both of relu6's kinks. The fused gradient
  // ops directly: relu6's masks dy by its input 5, y (values on both sides of 0 and 6);
  // swish's recomputes bn(x) from its input 5, beta.
  OpInput big_gamma{.shape = {3}, .lo = 3.f, .hi = 5.f};
  c.push_back(OpCase{.name = "batch_norm_train_relu6",
                     .op = "batch_norm_train",
                     .attrs = Attrs{{"epsilon", 1e-3}, {"activation", "relu6"}},
                     .inputs = {in({4, 3, 2, 3}), big_gamma, in({3})},
                     .fd_eps = 1e-3f});
  c.push_back(OpCase{.name = "batch_norm_train_swish",
                     .op = "batch_norm_train",
                     .attrs = Attrs{{"epsilon", 1e-3}, {"activation", "swish"}},
                     .inputs = {in({4, 3, 2, 3}), big_gamma, in({3})},
                     .check_grad = false});
  OpInput var3{.shape = {3}, .lo = 0.5f, .hi = 1.5f};
  c.push_back(OpCase{.name = "batch_norm_train_grad_relu6",
                     .op = "batch_norm_train_grad",
                     .attrs = Attrs{{"epsilon", 1e-3}, {"activation", "relu6"}},
                     .inputs = {in({4, 3, 2, 3}), in({4, 3, 2, 3}), in({3}), in({3}), var3,
                                OpInput{.shape = {4, 3, 2, 3}, .lo = -2.f, .hi = 8.f}},
                     .check_grad = false});
  c.push_back(
      OpCase{.name = "batch_norm_train_grad_swish",
             .op = "batch_norm_train_grad",
             .attrs = Attrs{{"epsilon", 1e-3}, {"activation", "swish"}},
             .inputs = {in({4, 3, 2, 3}), in({4, 3, 2, 3}), big_gamma, in({3}), var3, in({3})},
             .check_grad = false});
  OpInput var{.shape = {4}, .lo = 0.5f, .hi = 1.5f};
  c.push_back(OpCase{.name = "batch_norm_infer",
                     .op = "batch_norm_infer",
                     .attrs = eps,
                     .inputs = {in({3, 2, 2, 4}), in({4}), in({4}), in({4}), var}});
  // As the fusion pass rewrites batch_norm_infer -> [add(z) ->] relu (forward only: the pass
  // runs after differentiation, so the fused form has no gradient).
  c.push_back(OpCase{.name = "batch_norm_infer_relu",
                     .op = "batch_norm_infer",
                     .attrs = relu,
                     .inputs = {in({3, 2, 2, 4}), in({4}), in({4}), in({4}), var},
                     .check_grad = false});
  c.push_back(OpCase{.name = "batch_norm_infer_add_relu",
                     .op = "batch_norm_infer",
                     .attrs = add_relu,
                     .inputs = {in({3, 2, 2, 4}), in({4}), in({4}), in({4}), var, in({3, 2, 2, 4})},
                     .check_grad = false});
  // Made by the fusion pass (conv2d -> batch_norm_infer); no gradient.
  c.push_back(OpCase{.name = "batch_norm_fold",
                     .op = "batch_norm_fold",
                     .attrs = eps,
                     .inputs = {in({3, 3, 2, 4}), in({4}), in({4}), in({4}), var, in({4})},
                     .check_grad = false});
  c.push_back(OpCase{.name = "layer_norm_wide",
                     .op = "layer_norm",
                     .attrs = Attrs{{"epsilon", 1e-5}},
                     .inputs = {in({3, 40}), in({40}), in({40})}});
  return c;
}

}  // namespace lockstep::testing
