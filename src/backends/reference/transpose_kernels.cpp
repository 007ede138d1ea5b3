// Reference kernel for transpose: one element at a time, its input offset from the output index
// (a byte copy: any element size, bfloat16 included).
#include <cstring>

#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

std::unique_ptr<Kernel> transpose(const Node& n, const std::vector<TensorType>& in) {
  const Shape& x = in[0].shape;
  const int r = x.rank();
  const Shape xs = x.contiguous_strides();
  std::vector<int64_t> perm = attr_ints(n, "perm"), dims, strides;
  for (auto& p : perm) {
    if (p < 0) p += r;
    dims.push_back(x[int(p)]);      // the output's extent on each axis
    strides.push_back(xs[int(p)]);  // the input's step along it
  }
  const size_t es = dtype_size(in[0].dtype);
  return make_kernel([dims, strides, r, es](const KernelArgs& a) {
    const char* src = static_cast<const char*>(a.in(0).raw());
    char* dst = static_cast<char*>(a.out(0).raw());
    for (int64_t i = 0, total = a.out(0).numel(); i < total; ++i) {
      int64_t off = 0;
      for (int64_t rest = i, d = r - 1; d >= 0; --d) {
        off += (rest % dims[size_t(d)]) * strides[size_t(d)];
        rest /= dims[size_t(d)];
      }
      std::memcpy(dst + size_t(i) * es, src + size_t(off) * es, es);
    }
  });
}

}  // namespace

LOCKSTEP_REGISTER(reference_transpose_kernels) {
  OpRegistry::get().add_kernel(op::transpose, "reference", transpose, /*takes_bf16=*/true);
}

}  // namespace lockstep
