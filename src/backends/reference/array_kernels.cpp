// Reference kernels for cast, concat, slice (+ slice_grad), pad and dropout.
#include <cstring>

#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

const char* kRef = "reference";

double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::i32:
      return static_cast<const int32_t*>(p)[i];
    case DType::i64:
      return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(p)[i];
    case DType::bf16:
      return bf16_to_f32(static_cast<const bf16*>(p)[i]);
    default:
      LS_FAIL("cast: dtype ", dtype_name(t), " not supported");
  }
}

void store(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(p)[i] = float(v);
      break;
    case DType::i32:
      static_cast<int32_t*>(p)[i] = int32_t(v);
      break;
    case DType::i64:
      static_cast<int64_t*>(p)[i] = int64_t(v);
      break;
    case DType::bf16:
      static_cast<bf16*>(p)[i] = f32_to_bf16(float(v));
      break;
    case DType::u8:
      static_cast<uint8_t*>(p)[i] = uint8_t(int64_t(v));
      break;
    default:
      LS_FAIL("cast: dtype ", dtype_name(t), " not supported");
  }
}

// Offset in the sliced input of element i of the slice output.
struct SliceMap {
  int r = 0;
  int64_t begin[Shape::kMaxRank], out[Shape::kMaxRank], stride[Shape::kMaxRank];
  SliceMap(const Node& n, const Shape& in, const Shape& o) {
    const auto& b = attr_ints(n, "begin");
    r = in.rank();
    Shape st = in.contiguous_strides();
    for (int d = 0; d < r; ++d) begin[d] = b[d], out[d] = o[d], stride[d] = st[d];
  }
  int64_t operator()(int64_t i) const {
    int64_t off = 0;
    for (int d = r - 1; d >= 0; --d) {
      off += (i % out[d] + begin[d]) * stride[d];
      i /= out[d];
    }
    return off;
  }
};

using Types = std::vector<TensorType>;

std::unique_ptr<Kernel> concat(const Node& n, const Types& in) {
  const Shape& os = n.outputs[0].shape;
  int64_t axis = attr_i(n, "axis");
  if (axis < 0) axis += os.rank();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= os[i];
  for (int i = int(axis) + 1; i < os.rank(); ++i) inner *= os[i];
  const size_t es = dtype_size(n.outputs[0].dtype);
  return make_kernel([axis, outer, inner, es](const KernelArgs& a) {
    char* y = static_cast<char*>(a.out(0).raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int k = 0; k < a.num_inputs; ++k) {
        size_t bytes = size_t(a.in(k).dim(int(axis)) * inner) * es;
        std::memcpy(y, static_cast<const char*>(a.in(k).raw()) + o * bytes, bytes);
        y += bytes;
      }
  });
}

std::unique_ptr<Kernel> slice(const Node& n, const Types& in) {
  return make_kernel([map = SliceMap(n, in[0].shape, n.outputs[0].shape)](const KernelArgs& a) {
    size_t es = dtype_size(a.in(0).dtype());
    const char* x = static_cast<const char*>(a.in(0).raw());
    char* y = static_cast<char*>(a.out(0).raw());
    for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i)
      std::memcpy(y + i * es, x + map(i) * es, es);
  });
}

// (dy, x) -> dx: the slice map of x's shape.
std::unique_ptr<Kernel> slice_grad(const Node& n, const Types& in) {
  return make_kernel([map = SliceMap(n, in[1].shape, in[0].shape)](const KernelArgs& a) {
    const float* dy = a.in(0).data<float>();
    float* dx = a.out(0).data<float>();
    std::memset(dx, 0, a.out(0).nbytes());
    for (int64_t i = 0, e = a.in(0).numel(); i < e; ++i) dx[map(i)] = dy[i];
  });
}

// x written into zeros at `before`: the slice map of the output's shape.
std::unique_ptr<Kernel> pad(const Node& n, const Types& in) {
  Node view = n;
  view.attrs.set("begin", attr_ints(n, "before"));
  return make_kernel([map = SliceMap(view, n.outputs[0].shape, in[0].shape)](const KernelArgs& a) {
    size_t es = dtype_size(a.in(0).dtype());
    const char* x = static_cast<const char*>(a.in(0).raw());
    char* y = static_cast<char*>(a.out(0).raw());
    std::memset(y, 0, a.out(0).nbytes());
    for (int64_t i = 0, e = a.in(0).numel(); i < e; ++i)
      std::memcpy(y + map(i) * es, x + i * es, es);
  });
}

std::unique_ptr<Kernel> dropout(const Node& n, const Types&) {
  const float rate = float(attr_f(n, "rate")), scale = float(1.0 / (1.0 - attr_f(n, "rate")));
  const uint64_t node = ew::node_key(n);
  return make_kernel([rate, scale, node](const KernelArgs& a) {
    const uint64_t key = ew::dropout_key(node, a.step), step = a.step ? a.step->step : 0;
    const ew::DropoutRows rows = ew::dropout_rows(a.in(0), a.step);
    const int64_t e = rows.row_len;
    for (int64_t r = 0; r < rows.rows; ++r)
      for (int64_t blk = 0; blk < (e + 3) / 4; ++blk)
        ew::dropout_block(key, step, blk, a.in(0).data<float>() + r * e,
                          a.out(0).data<float>() + r * e, a.out(1).data<float>() + r * e, e, rate,
                          scale, rows.counter_base(r));
  });
}

}  // namespace

LOCKSTEP_REGISTER(reference_array_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::cast, kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 DType ti = a.in(0).dtype(), to = a.out(0).dtype();
                 for (int64_t i = 0, n = a.in(0).numel(); i < n; ++i)
                   store(a.out(0).raw(), to, i, load(a.in(0).raw(), ti, i));
               }),
               /*takes_bf16=*/true);
  R.add_kernel(op::concat, kRef, concat);
  R.add_kernel(op::slice, kRef, slice);
  R.add_kernel(op::slice_grad, kRef, slice_grad);
  R.add_kernel(op::pad, kRef, pad, /*takes_bf16=*/true);
  R.add_kernel(op::dropout, kRef, dropout);
}

}  // namespace lockstep
