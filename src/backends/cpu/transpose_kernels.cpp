// cpu backend: transpose. The permutation is first reduced to its canonical form (size-1 axes
// dropped, output axes that stay neighbours in the input merged), then
//   - the innermost axis stays innermost (attention's (0, 2, 1, 3)): one memcpy per run;
//   - otherwise (the (0, 2, 1) / (0, 1, 3, 2) swaps): 16 x 16 tiles between the input's
//     innermost axis and the output's, so reads and writes both stay within a few cache lines;
// parallel over the outer positions and tile rows. A byte copy: any element size.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "ops/internal/kernel_util.h"

namespace lockstep::cpu {
namespace {

constexpr int64_t kTile = 16;
constexpr int64_t kParallelBytes = int64_t(1) << 16;  // smaller copies run on one thread

// The canonical form: output extents and the input's step (in elements) along each.
struct Plan {
  std::vector<int64_t> dims, in_step, out_step;
  int64_t total = 1;
};

Plan make_plan(const Shape& x, std::vector<int64_t> perm) {
  const int r = x.rank();
  const Shape xs = x.contiguous_strides();
  Plan p;
  for (auto& a : perm) {
    if (a < 0) a += r;
    p.total *= x[int(a)];
    if (x[int(a)] == 1) continue;
    if (!p.dims.empty() && p.in_step.back() == xs[int(a)] * x[int(a)]) {  // merges with previous
      p.dims.back() *= x[int(a)];
      p.in_step.back() = xs[int(a)];
      continue;
    }
    p.dims.push_back(x[int(a)]);
    p.in_step.push_back(xs[int(a)]);
  }
  p.out_step.assign(p.dims.size(), 1);
  for (int i = int(p.dims.size()) - 2; i >= 0; --i)
    p.out_step[size_t(i)] = p.out_step[size_t(i) + 1] * p.dims[size_t(i) + 1];
  return p;
}

// The input and output offsets of outer position `o` over the axes in `axes` (innermost last).
inline void offsets(const Plan& p, const std::vector<int>& axes, int64_t o, int64_t& in_off,
                    int64_t& out_off) {
  in_off = out_off = 0;
  for (int k = int(axes.size()) - 1; k >= 0; --k) {
    const size_t d = size_t(axes[size_t(k)]);
    const int64_t idx = o % p.dims[d];
    o /= p.dims[d];
    in_off += idx * p.in_step[d];
    out_off += idx * p.out_step[d];
  }
}

// Innermost axis kept: rows of `run` contiguous elements.
void copy_runs(const Plan& p, const char* src, char* dst, size_t es) {
  const int last = int(p.dims.size()) - 1;
  const size_t run = size_t(p.dims[size_t(last)]) * es;
  std::vector<int> axes;
  for (int i = 0; i < last; ++i) axes.push_back(i);
  const int64_t rows = p.total / p.dims[size_t(last)];
#pragma omp parallel for schedule(static) if (p.total * int64_t(es) >= kParallelBytes)
  for (int64_t o = 0; o < rows; ++o) {
    int64_t io, oo;
    offsets(p, axes, o, io, oo);
    std::memcpy(dst + size_t(oo) * es, src + size_t(io) * es, run);
  }
}

// Tiles between output axis j (the input's innermost, step 1) and the output's innermost axis.
template <class T>
void copy_tiles(const Plan& p, int j, const T* src, T* dst) {
  const int last = int(p.dims.size()) - 1;
  const int64_t dj = p.dims[size_t(j)], dl = p.dims[size_t(last)];
  const int64_t sl = p.in_step[size_t(last)], oj = p.out_step[size_t(j)];
  std::vector<int> axes;
  for (int i = 0; i < last; ++i)
    if (i != j) axes.push_back(i);
  const int64_t outer = p.total / (dj * dl), tj = (dj + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (p.total * int64_t(sizeof(T)) >= kParallelBytes)
  for (int64_t w = 0; w < outer * tj; ++w) {
    int64_t io, oo;
    offsets(p, axes, w / tj, io, oo);
    const int64_t a0 = (w % tj) * kTile, a1 = std::min(dj, a0 + kTile);
    for (int64_t b0 = 0; b0 < dl; b0 += kTile) {
      const int64_t b1 = std::min(dl, b0 + kTile);
      for (int64_t a = a0; a < a1; ++a) {
        T* out = dst + oo + a * oj;
        const T* in = src + io + a;
        for (int64_t b = b0; b < b1; ++b) out[b] = in[b * sl];
      }
    }
  }
}

template <class T>
void run_plan(const Plan& p, const void* src, void* dst) {
  const int last = int(p.dims.size()) - 1;
  if (last < 0) {  // one element
    std::memcpy(dst, src, sizeof(T));
    return;
  }
  if (p.in_step[size_t(last)] == 1) {
    copy_runs(p, static_cast<const char*>(src), static_cast<char*>(dst), sizeof(T));
    return;
  }
  int j = 0;
  while (p.in_step[size_t(j)] != 1) ++j;  // the input's innermost axis (step 1 after merging)
  copy_tiles(p, j, static_cast<const T*>(src), static_cast<T*>(dst));
}

std::unique_ptr<Kernel> transpose(const Node& n, const std::vector<TensorType>& in) {
  Plan p = make_plan(in[0].shape, attr_ints(n, "perm"));
  const size_t es = dtype_size(in[0].dtype);
  return make_kernel([p, es](const KernelArgs& a) {
    if (p.total == 0) return;
    const void* s = a.in(0).raw();
    void* d = a.out(0).raw();
    switch (es) {
      case 1:
        return run_plan<uint8_t>(p, s, d);
      case 2:
        return run_plan<uint16_t>(p, s, d);
      case 4:
        return run_plan<uint32_t>(p, s, d);
      default:
        return run_plan<uint64_t>(p, s, d);
    }
  });
}

}  // namespace

LOCKSTEP_REGISTER(cpu_transpose_kernels) {
  OpRegistry::get().add_kernel(op::transpose, "cpu", transpose, /*takes_bf16=*/true);
}

}  // namespace lockstep::cpu
