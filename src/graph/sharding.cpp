// The process's sharding plan and the host-side shard arithmetic (lockstep/graph/sharding.h).
#include "lockstep/graph/sharding.h"

#include <cstring>
#include <mutex>
#include <utility>

#include "lockstep/core/error.h"

namespace lockstep {

int64_t MeshShape::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int MeshShape::axis(const std::string& name) const {
  for (size_t i = 0; i < axis_names.size(); ++i)
    if (axis_names[i] == name) return int(i);
  return -1;
}

std::vector<int64_t> MeshShape::coordinates(int64_t p) const {
  std::vector<int64_t> c(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    c[i] = p % shape[i];
    p /= shape[i];
  }
  return c;
}

std::string MeshShape::str() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + axis_names[i] + "=" + std::to_string(shape[i]);
  return s + ")";
}

std::string dim_axes_str(const DimAxes& axes) {
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i)
    s += (i ? ", " : "") + (axes[i].empty() ? std::string("None") : "'" + axes[i] + "'");
  return s + (axes.size() == 1 ? ",)" : ")");
}

namespace {

std::mutex& plan_mutex() {
  static std::mutex m;
  return m;
}
std::shared_ptr<const ShardingPlan>& plan_slot() {
  static std::shared_ptr<const ShardingPlan> plan;
  return plan;
}

// Per dim: the size of the axis it is split over (1 when none).
std::vector<int64_t> splits(const Shape& shape, const MeshShape& mesh, const DimAxes& axes) {
  LS_CHECK(int(axes.size()) == shape.rank(), "sharding: layout ", dim_axes_str(axes), " has ",
           axes.size(), " axes for a tensor of rank ", shape.rank(), " ", shape.str());
  std::vector<int64_t> out(axes.size(), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].empty()) continue;
    const int a = mesh.axis(axes[i]);
    LS_CHECK(a >= 0, "sharding: layout ", dim_axes_str(axes), " names axis '", axes[i],
             "', which mesh ", mesh.str(), " does not have");
    out[i] = mesh.shape[size_t(a)];
  }
  return out;
}

// Copies the block of `big` at `offset` (per dim) of `small`'s shape: into small (to_small), or
// from it. Both contiguous; the innermost dim moves with memcpy.
void copy_block(const Tensor& big, const Tensor& small, const std::vector<int64_t>& offset,
                bool to_small) {
  const int rank = big.rank();
  const size_t elem = dtype_size(big.dtype());
  if (rank == 0) {
    if (to_small)
      std::memcpy(small.raw(), big.raw(), elem);
    else
      std::memcpy(big.raw(), small.raw(), elem);
    return;
  }
  const Shape bs = big.shape().contiguous_strides();
  const int64_t inner = small.dim(rank - 1);
  const int64_t rows = small.numel() / (inner ? inner : 1);
  std::vector<int64_t> idx(size_t(rank), 0);  // over small's outer dims
  char* b = static_cast<char*>(big.raw());
  char* s = static_cast<char*>(small.raw());
  for (int64_t r = 0; r < rows && inner > 0; ++r) {
    int64_t off = offset[size_t(rank - 1)];
    for (int d = 0; d < rank - 1; ++d) off += (idx[size_t(d)] + offset[size_t(d)]) * bs[d];
    char* bp = b + size_t(off) * elem;
    char* sp = s + size_t(r * inner) * elem;
    if (to_small)
      std::memcpy(sp, bp, size_t(inner) * elem);
    else
      std::memcpy(bp, sp, size_t(inner) * elem);
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < small.dim(d)) break;
      idx[size_t(d)] = 0;
    }
  }
}

std::vector<int64_t> block_offset(const Shape& shape, const MeshShape& mesh, const DimAxes& axes,
                                  int64_t p) {
  const std::vector<int64_t> parts = splits(shape, mesh, axes);
  const std::vector<int64_t> c = mesh.coordinates(p);
  std::vector<int64_t> off(axes.size(), 0);
  for (size_t i = 0; i < axes.size(); ++i)
    if (!axes[i].empty()) off[i] = c[size_t(mesh.axis(axes[i]))] * (shape[int(i)] / parts[i]);
  return off;
}

}  // namespace

void set_sharding_plan(std::shared_ptr<const ShardingPlan> plan) {
  std::lock_guard<std::mutex> lock(plan_mutex());
  plan_slot() = std::move(plan);
}

namespace {
thread_local std::shared_ptr<const ShardingPlan> t_scoped_plan;
}  // namespace

std::shared_ptr<const ShardingPlan> sharding_plan() {
  if (t_scoped_plan) return t_scoped_plan;
  std::lock_guard<std::mutex> lock(plan_mutex());
  return plan_slot();
}

ShardingPlanScope::ShardingPlanScope(std::shared_ptr<const ShardingPlan> plan) {
  if (!plan) return;
  std::shared_ptr<const ShardingPlan> installed;
  {
    std::lock_guard<std::mutex> lock(plan_mutex());
    installed = plan_slot();
  }
  LS_CHECK(!installed, "a distribution is set (", installed->describe(),
           ") and the program also compiles under a strategy that partitions it itself (",
           plan->describe(),
           "); use one: clear the distribution (distribution::clear_distribution) or leave the "
           "strategy's scope");
  previous_ = std::exchange(t_scoped_plan, std::move(plan));
  active_ = true;
}

ShardingPlanScope::~ShardingPlanScope() {
  if (active_) t_scoped_plan = std::move(previous_);
}

Shape shard_shape(const Shape& shape, const MeshShape& mesh, const DimAxes& axes) {
  const std::vector<int64_t> parts = splits(shape, mesh, axes);
  Shape out = shape;
  for (size_t i = 0; i < parts.size(); ++i) {
    LS_CHECK(shape[int(i)] % parts[i] == 0, "sharding: dim ", i, " (", shape[int(i)],
             ") of a tensor ", shape.str(), " does not divide by mesh axis '", axes[i], "' (size ",
             parts[i], ")");
    out[int(i)] = shape[int(i)] / parts[i];
  }
  return out;
}

Tensor shard_of(const Tensor& whole, const MeshShape& mesh, const DimAxes& axes, int64_t p) {
  const Tensor src = whole.contiguous();
  Tensor out = Tensor::empty(shard_shape(src.shape(), mesh, axes), src.dtype());
  copy_block(src, out, block_offset(src.shape(), mesh, axes, p), true);
  return out;
}

void place_shard(Tensor& whole, const Tensor& shard, const MeshShape& mesh, const DimAxes& axes,
                 int64_t p) {
  LS_CHECK(whole.is_contiguous() && shard.dtype() == whole.dtype() &&
               shard.shape() == shard_shape(whole.shape(), mesh, axes),
           "place_shard: a shard ", shard.shape().str(), " of a tensor ", whole.shape().str());
  copy_block(whole, shard.contiguous(), block_offset(whole.shape(), mesh, axes, p), false);
}

std::vector<int64_t> covering_positions(const MeshShape& mesh, const DimAxes& axes) {
  std::vector<char> used(mesh.shape.size(), 0);
  for (const std::string& a : axes)
    if (!a.empty() && mesh.axis(a) >= 0) used[size_t(mesh.axis(a))] = 1;
  std::vector<int64_t> out;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    const std::vector<int64_t> c = mesh.coordinates(p);
    bool first = true;
    for (size_t i = 0; i < c.size(); ++i) first = first && (used[i] || c[i] == 0);
    if (first) out.push_back(p);
  }
  return out;
}

}  // namespace lockstep
