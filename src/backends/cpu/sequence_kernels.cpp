// cpu kernels for gather (Embedding's lookup) and its scatter-add gradient. gather copies one
// table row per id, OpenMP over the ids. gather_grad splits the table's columns (the inner
// extent) between threads: each thread adds every id's slice of dy, in id order, into its own
// columns, so no two threads write one element and the sums come out in the same order for any
// thread count (deterministic, equal to the reference kernel bit for bit).
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "ops/internal/kernel_util.h"
#include "ops/internal/sequence_util.h"

namespace lockstep {

namespace {

const char* kCpu = "cpu";
using Types = std::vector<TensorType>;

std::unique_ptr<Kernel> gather(const Node& n, const Types& in) {
  const seq::GatherGeometry g = seq::gather_geometry(n, in[0].shape, in[1].shape.numel());
  const size_t es = dtype_size(in[0].dtype);
  const std::string node = n.name;
  return make_kernel([g, es, node](const KernelArgs& a) {
    seq::check_ids(a.in(1), g.rows, node);  // (before the parallel part: it throws)
    const char* t = static_cast<const char*>(a.in(0).raw());
    char* y = static_cast<char*>(a.out(0).raw());
    const Tensor& ids = a.in(1);
    const size_t run = size_t(g.inner) * es;
    const int64_t total = g.outer * g.ids;
#pragma omp parallel for schedule(static) if (total * int64_t(run) > (1 << 16))
    for (int64_t r = 0; r < total; ++r) {
      const int64_t o = r / g.ids, i = r % g.ids;
      std::memcpy(y + size_t(r) * run, t + size_t(o * g.rows + seq::id_at(ids, i)) * run, run);
    }
  });
}

// Columns [c0, c1) of every row: dt[o, id_i, c] += dy[o, i, c], i in order.
void scatter_columns(const float* dy, const Tensor& ids, float* dt, const seq::GatherGeometry& g,
                     int64_t c0, int64_t c1) {
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t i = 0; i < g.ids; ++i) {
      const float* src = dy + (o * g.ids + i) * g.inner;
      float* dst = dt + (o * g.rows + seq::id_at(ids, i)) * g.inner;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
}

std::unique_ptr<Kernel> gather_grad(const Node& n, const Types& in) {
  const seq::GatherGeometry g = seq::gather_grad_geometry(n, in[1].shape.numel());
  const std::string node = n.name;
  return make_kernel([g, node](const KernelArgs& a) {
    seq::check_ids(a.in(1), g.rows, node);
    const float* dy = a.in(0).data<float>();
    float* dt = a.out(0).data<float>();
    std::memset(dt, 0, a.out(0).nbytes());
    // Chunks of 16 columns (one cache line of floats), at most one per thread's share.
    const int64_t chunks = std::max<int64_t>(1, (g.inner + 15) / 16);
    const bool par = g.outer * g.ids * g.inner > (1 << 15) && chunks > 1;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t ch = 0; ch < chunks; ++ch)
      scatter_columns(dy, a.in(1), dt, g, ch * 16, std::min(g.inner, (ch + 1) * 16));
  });
}

}  // namespace

LOCKSTEP_REGISTER(cpu_sequence_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::gather, kCpu, gather, /*takes_bf16=*/true);
  R.add_kernel(op::gather_grad, kCpu, gather_grad);
}

}  // namespace lockstep
