// Ops without computation of their own: placeholders, variables, constants, views.
#include <cstring>

#include "ops/internal/op_util.h"

namespace lockstep::ops {

static void fill_kernel(const Node&, const KernelArgs& a, float v) { a.out(0).fill(v); }

LOCKSTEP_REGISTER(source_ops) {
  add_op({.name = "input", .infer = [](const Node& n, const std::vector<TensorType>&) {
            return std::vector<TensorType>{
                {dtype_from_name(n.attrs.s("dtype", "float32")), Shape(n.attrs.ints("shape"))}};
          }});
  add_op({.name = "variable", .infer = [](const Node& n, const std::vector<TensorType>&) {
            LS_CHECK(n.variable && n.variable->value.defined(), "variable without a value");
            return std::vector<TensorType>{{n.variable->value.dtype(), n.variable->value.shape()}};
          }});
  add_op({.name = "constant", .infer = [](const Node& n, const std::vector<TensorType>&) {
            return std::vector<TensorType>{f32(Shape(n.attrs.ints("shape", {})))};
          }});
  add_op({.name = "ones_like", .infer = [](const Node&, const std::vector<TensorType>& in) {
            return std::vector<TensorType>{f32(in[0].shape)};
          }});
  add_op({.name = "zeros_like", .infer = [](const Node&, const std::vector<TensorType>& in) {
            return std::vector<TensorType>{f32(in[0].shape)};
          }});
  auto same = [](const Node&, const std::vector<TensorType>& in) {
    return std::vector<TensorType>{in[0]};
  };
  add_op({.name = "identity", .infer = same,
          .grad = [](GradBuilder&, const Node&, const std::vector<Value>& dy) {
            return std::vector<Value>{dy[0]};
          },
          .alias_input = 0});
  add_op({.name = "stop_gradient", .infer = same, .alias_input = 0});
  // reshape: attr shape (one -1 allowed; with an unknown input dim the -1 stays unknown).
  add_op({.name = "reshape",
          .infer = [](const Node& n, const std::vector<TensorType>& in) {
            Shape target(n.attrs.ints("shape"));
            int64_t known = 1;
            int unknown = -1;
            for (int i = 0; i < target.rank(); ++i) {
              if (target[i] < 0) {
                LS_CHECK(unknown < 0, "more than one -1 in target shape ", target.str());
                unknown = i;
              } else {
                known *= target[i];
              }
            }
            int64_t numel = in[0].shape.numel();
            if (numel >= 0) {
              if (unknown >= 0) {
                LS_CHECK(known > 0 && numel % known == 0, "cannot reshape ", in[0].shape.str(),
                         " to ", target.str());
                target[unknown] = numel / known;
              }
              LS_CHECK(target.numel() == numel, "cannot reshape ", in[0].shape.str(), " (",
                       numel, " elements) to ", target.str());
            }
            return std::vector<TensorType>{{in[0].dtype, target}};
          },
          .grad = [](GradBuilder& b, const Node& n, const std::vector<Value>& dy) {
            return std::vector<Value>{
                b.add("reshape", {dy[0]}, Attrs{{"shape", b.type(n.inputs[0]).shape.vec()}})};
          },
          .alias_input = 0});
  // assign(var_value, new_value): copies new_value into the variable (side effect).
  add_op({.name = "assign",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            expect_inputs(in, 2);
            LS_CHECK(in[0].shape.numel() == in[1].shape.numel(), "assign: ", in[1].shape.str(),
                     " into ", in[0].shape.str());
            return std::vector<TensorType>{};
          },
          .side_effects = true});
  // assign_add(var_value, delta): var += delta (side effect).
  add_op({.name = "assign_add",
          .infer = [](const Node&, const std::vector<TensorType>& in) {
            expect_inputs(in, 2);
            LS_CHECK(in[0].shape.numel() == in[1].shape.numel(), "assign_add: ",
                     in[1].shape.str(), " into ", in[0].shape.str());
            return std::vector<TensorType>{};
          },
          .side_effects = true});

  auto& R = OpRegistry::get();
  R.add_kernel("constant", "reference", simple_kernel([](const Node& n, const KernelArgs& a) {
                 fill_kernel(n, a, float(n.attrs.f("value")));
               }));
  R.add_kernel("ones_like", "reference",
               simple_kernel([](const Node& n, const KernelArgs& a) { fill_kernel(n, a, 1.f); }));
  R.add_kernel("zeros_like", "reference",
               simple_kernel([](const Node& n, const KernelArgs& a) { fill_kernel(n, a, 0.f); }));
  R.add_kernel("assign", "reference", simple_kernel([](const Node&, const KernelArgs& a) {
                 std::memcpy(a.in(0).raw(), a.in(1).raw(), a.in(0).nbytes());
               }));
  R.add_kernel("assign_add", "reference", simple_kernel([](const Node&, const KernelArgs& a) {
                 float* d = a.in(0).data<float>();
                 const float* s = a.in(1).data<float>();
                 for (int64_t i = 0, n = a.in(0).numel(); i < n; ++i) d[i] += s[i];
               }));
}

}  // namespace lockstep::ops
