// Reference kernels for the sequence ops (src/ops/sequence_ops.cpp): gather and its scatter-add
// gradient, one_hot, comparisons, logical ops, where, reverse and cumsum.
#include <cstring>

#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"
#include "ops/internal/sequence_util.h"

namespace lockstep {

namespace {

const char* kRef = "reference";
using Types = std::vector<TensorType>;

std::unique_ptr<Kernel> gather(const Node& n, const Types& in) {
  const seq::GatherGeometry g = seq::gather_geometry(n, in[0].shape, in[1].shape.numel());
  const size_t es = dtype_size(in[0].dtype);
  const std::string node = n.name;
  return make_kernel([g, es, node](const KernelArgs& a) {
    seq::check_ids(a.in(1), g.rows, node);
    const char* t = static_cast<const char*>(a.in(0).raw());
    char* y = static_cast<char*>(a.out(0).raw());
    const size_t run = size_t(g.inner) * es;
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t i = 0; i < g.ids; ++i)
        std::memcpy(y + size_t(o * g.ids + i) * run,
                    t + size_t(o * g.rows + seq::id_at(a.in(1), i)) * run, run);
  });
}

std::unique_ptr<Kernel> gather_grad(const Node& n, const Types& in) {
  const seq::GatherGeometry g = seq::gather_grad_geometry(n, in[1].shape.numel());
  const std::string node = n.name;
  return make_kernel([g, node](const KernelArgs& a) {
    seq::check_ids(a.in(1), g.rows, node);
    const float* dy = a.in(0).data<float>();
    float* dt = a.out(0).data<float>();
    std::memset(dt, 0, a.out(0).nbytes());
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t i = 0; i < g.ids; ++i) {
        const float* src = dy + (o * g.ids + i) * g.inner;
        float* dst = dt + (o * g.rows + seq::id_at(a.in(1), i)) * g.inner;
        for (int64_t k = 0; k < g.inner; ++k) dst[k] += src[k];
      }
  });
}

std::unique_ptr<Kernel> one_hot(const Node& n, const Types&) {
  const int64_t depth = attr_i(n, "depth");
  return make_kernel([depth](const KernelArgs& a) {
    Tensor& y = a.out(0);
    std::memset(y.raw(), 0, y.nbytes());
    for (int64_t i = 0, m = a.in(0).numel(); i < m; ++i) {
      const int64_t id = int64_t(seq::load(a.in(0).raw(), a.in(0).dtype(), i));
      if (id >= 0 && id < depth) seq::store(y.raw(), y.dtype(), i * depth + id, 1.0);
    }
  });
}

template <class Cmp>
void register_compare(OpId id, Cmp cmp) {
  OpRegistry::get().add_kernel(id, kRef, simple_kernel([cmp](const Node&, const KernelArgs& a) {
                                 const Tensor &x = a.in(0), &z = a.in(1);
                                 uint8_t* y = a.out(0).data<uint8_t>();
                                 ew::broadcast_loop(a.out(0).shape(), x.shape(), z.shape(),
                                                    [&](int64_t i, int64_t ia, int64_t ib) {
                                                      y[i] = cmp(seq::load(x.raw(), x.dtype(), ia),
                                                                 seq::load(z.raw(), z.dtype(), ib));
                                                    });
                               }));
}

template <class Logic>
void register_logic(OpId id, Logic f) {
  OpRegistry::get().add_kernel(
      id, kRef, simple_kernel([f](const Node&, const KernelArgs& a) {
        const uint8_t* x = a.in(0).data<uint8_t>();
        uint8_t* y = a.out(0).data<uint8_t>();
        if (a.num_inputs == 1) {
          for (int64_t i = 0, m = a.out(0).numel(); i < m; ++i) y[i] = f(x[i] != 0, false);
          return;
        }
        const uint8_t* z = a.in(1).data<uint8_t>();
        ew::broadcast_loop(
            a.out(0).shape(), a.in(0).shape(), a.in(1).shape(),
            [&](int64_t i, int64_t ia, int64_t ib) { y[i] = f(x[ia] != 0, z[ib] != 0); });
      }));
}

// y = cond ? a : b, all three broadcast against y.
std::unique_ptr<Kernel> where(const Node& n, const Types& in) {
  const Shape ys = n.outputs[0].shape;
  const seq::Broadcast3 bc(ys, in[0].shape, in[1].shape, in[2].shape);
  const size_t es = dtype_size(n.outputs[0].dtype);
  return make_kernel([bc, ys, es](const KernelArgs& a) {
    const uint8_t* cd = a.in(0).data<uint8_t>();
    const char *xs = static_cast<const char*>(a.in(1).raw()),
               *zs = static_cast<const char*>(a.in(2).raw());
    char* yd = static_cast<char*>(a.out(0).raw());
    for (int64_t i = 0, m = ys.numel(); i < m; ++i) {
      int64_t o[3];
      bc.offsets(i, o);
      std::memcpy(yd + size_t(i) * es, cd[o[0]] ? xs + size_t(o[1]) * es : zs + size_t(o[2]) * es,
                  es);
    }
  });
}

std::unique_ptr<Kernel> reverse(const Node& n, const Types& in) {
  const Shape s = in[0].shape;
  std::vector<bool> flip(size_t(s.rank()), false);
  for (int64_t ax : ops::normalise_axes(attr_ints(n, "axes"), s.rank())) flip[size_t(ax)] = true;
  const size_t es = dtype_size(in[0].dtype);
  return make_kernel([s, flip, es](const KernelArgs& a) {
    const Shape st = s.contiguous_strides();
    const char* x = static_cast<const char*>(a.in(0).raw());
    char* y = static_cast<char*>(a.out(0).raw());
    for (int64_t i = 0, m = s.numel(); i < m; ++i) {
      int64_t src = 0;
      for (int d = s.rank() - 1; d >= 0; --d) {
        const int64_t idx = (i / st[d]) % s[d];
        src += (flip[size_t(d)] ? s[d] - 1 - idx : idx) * st[d];
      }
      std::memcpy(y + size_t(i) * es, x + size_t(src) * es, es);
    }
  });
}

std::unique_ptr<Kernel> cumsum(const Node& n, const Types& in) {
  const seq::CumsumGeometry g = seq::cumsum_geometry(n, in[0].shape);
  return make_kernel([g](const KernelArgs& a) {
    seq::cumsum_rows(a.in(0).data<float>(), a.out(0).data<float>(), g, 0, g.outer * g.inner);
  });
}

}  // namespace

LOCKSTEP_REGISTER(reference_sequence_kernels) {
  auto& R = OpRegistry::get();
  // Byte copies: a bfloat16 table is read as it is.
  R.add_kernel(op::gather, kRef, gather, /*takes_bf16=*/true);
  R.add_kernel(op::gather_grad, kRef, gather_grad);
  R.add_kernel(op::one_hot, kRef, one_hot);
  register_compare(op::equal, [](double x, double z) { return uint8_t(x == z); });
  register_compare(op::not_equal, [](double x, double z) { return uint8_t(x != z); });
  register_compare(op::less, [](double x, double z) { return uint8_t(x < z); });
  register_compare(op::less_equal, [](double x, double z) { return uint8_t(x <= z); });
  register_compare(op::greater, [](double x, double z) { return uint8_t(x > z); });
  register_compare(op::greater_equal, [](double x, double z) { return uint8_t(x >= z); });
  register_logic(op::logical_and, [](bool x, bool z) { return uint8_t(x && z); });
  register_logic(op::logical_or, [](bool x, bool z) { return uint8_t(x || z); });
  register_logic(op::logical_not, [](bool x, bool) { return uint8_t(!x); });
  R.add_kernel(op::where, kRef, where);  // (bf16 a, b: through the f32 adapter)
  R.add_kernel(op::reverse, kRef, reverse, /*takes_bf16=*/true);
  R.add_kernel(op::cumsum, kRef, cumsum);
}

}  // namespace lockstep
