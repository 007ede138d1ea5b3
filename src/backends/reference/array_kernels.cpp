// Reference kernels for cast, concat, slice (+ slice_grad), pad and dropout.
#include <cstring>

#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"
#include "ops/internal/sequence_util.h"

namespace lockstep {

namespace {

const char* kRef = "reference";

// Any dtype as a double and back: the sequence ops' helpers (ops/internal/sequence_util.h).
using seq::load;
using seq::store;

// Copies the box `box` (a shape) from src at offset src_off into dst at offset dst_off, both
// dense row-major: the trailing axes the box covers whole in src and dst merge into one
// contiguous run, so each run is one memcpy (a 96-channel NHWC row of a pad or slice is one
// copy, not 96 element copies with a div/mod per axis each).
struct BoxCopy {
  int r = 0, k = 0;  // axes [0, k) are iterated, [k, r) form the run
  int64_t box[Shape::kMaxRank], src_stride[Shape::kMaxRank], dst_stride[Shape::kMaxRank];
  int64_t src_base = 0, dst_base = 0, rows = 1, run = 1;  // in elements
  BoxCopy(const Shape& src, const std::vector<int64_t>& src_off, const Shape& dst,
          const std::vector<int64_t>& dst_off, const Shape& b) {
    r = b.rank();
    const Shape ss = src.contiguous_strides(), ds = dst.contiguous_strides();
    for (int d = 0; d < r; ++d) {
      box[d] = b[d], src_stride[d] = ss[d], dst_stride[d] = ds[d];
      src_base += src_off[size_t(d)] * ss[d];
      dst_base += dst_off[size_t(d)] * ds[d];
    }
    k = r;
    while (k > 0) {
      run *= box[k - 1];
      --k;
      if (k == 0 || !(box[k] == src[k] && box[k] == dst[k])) break;
    }
    if (r == 0) run = 1;
    for (int d = 0; d < k; ++d) rows *= box[d];
  }
  void operator()(const char* s, char* d, size_t es) const {
    if (run == 0) return;
    for (int64_t row = 0; row < rows; ++row) {
      int64_t so = src_base, dof = dst_base;
      for (int64_t i = row, a = k - 1; a >= 0; --a) {
        const int64_t idx = i % box[a];
        i /= box[a];
        so += idx * src_stride[a], dof += idx * dst_stride[a];
      }
      std::memcpy(d + size_t(dof) * es, s + size_t(so) * es, size_t(run) * es);
    }
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
  const Shape& o = n.outputs[0].shape;
  BoxCopy copy(in[0].shape, attr_ints(n, "begin"), o, std::vector<int64_t>(size_t(o.rank()), 0), o);
  return make_kernel([copy](const KernelArgs& a) {
    copy(static_cast<const char*>(a.in(0).raw()), static_cast<char*>(a.out(0).raw()),
         dtype_size(a.in(0).dtype()));
  });
}

// (dy, x) -> dx: dy written into zeros at `begin`.
std::unique_ptr<Kernel> slice_grad(const Node& n, const Types& in) {
  const Shape& dy = in[0].shape;
  BoxCopy copy(dy, std::vector<int64_t>(size_t(dy.rank()), 0), in[1].shape, attr_ints(n, "begin"),
               dy);
  return make_kernel([copy](const KernelArgs& a) {
    std::memset(a.out(0).raw(), 0, a.out(0).nbytes());
    copy(static_cast<const char*>(a.in(0).raw()), static_cast<char*>(a.out(0).raw()),
         dtype_size(a.out(0).dtype()));
  });
}

// x written into zeros at `before`.
std::unique_ptr<Kernel> pad(const Node& n, const Types& in) {
  const Shape& x = in[0].shape;
  BoxCopy copy(x, std::vector<int64_t>(size_t(x.rank()), 0), n.outputs[0].shape,
               attr_ints(n, "before"), x);
  return make_kernel([copy](const KernelArgs& a) {
    std::memset(a.out(0).raw(), 0, a.out(0).nbytes());
    copy(static_cast<const char*>(a.in(0).raw()), static_cast<char*>(a.out(0).raw()),
         dtype_size(a.in(0).dtype()));
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
  // Byte copies: any element size, bfloat16 included (no conversion of the whole input).
  R.add_kernel(op::concat, kRef, concat, /*takes_bf16=*/true);
  R.add_kernel(op::slice, kRef, slice, /*takes_bf16=*/true);
  R.add_kernel(op::slice_grad, kRef, slice_grad);  // (float32 dx: the adapter converts dy)
  R.add_kernel(op::pad, kRef, pad, /*takes_bf16=*/true);
  R.add_kernel(op::dropout, kRef, dropout);
}

}  // namespace lockstep
