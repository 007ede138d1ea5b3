// Sharding plans: how a whole-graph backend splits one program's tensors over a mesh of devices
// (the data the model-parallel half of keras.distribution comes down to). A plan names the
// mesh (a grid of devices with named axes), the axis the batch is split over, and, per
// variable, which mesh axis each of its dims is split over. lockstep/distribute/distribution.h
// builds plans from Keras's DeviceMesh / LayoutMap / ModelParallel and installs them with
// set_sharding_plan(); the xla backend reads sharding_plan() when it compiles a program and
// lowers it with sharding annotations for XLA's SPMD partitioner (docs/accelerator.md).
//
// The graph layer holds only the data and the host-side slicing (shard_of / place_shard), so
// the distribute module and the optional xla module share one definition of "device p's shard".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/graph/graph.h"

namespace lockstep {

/// An n-dimensional grid of devices with named axes (keras.distribution.DeviceMesh's data).
/// Position p of the mesh (row-major over `shape`) is SPMD partition p, which runs on device
/// `devices[p]` (an index into the connected device system's devices).
struct MeshShape {
  std::vector<int64_t> shape;           ///< devices along each axis, e.g. {2, 2}
  std::vector<std::string> axis_names;  ///< one per axis, e.g. {"batch", "model"}
  std::vector<int> devices;             ///< size() device indices, row-major over shape
  /// The number of devices (the product of shape).
  int64_t size() const;
  /// The index of axis `name`, or -1.
  int axis(const std::string& name) const;
  /// The coordinates of position p along every axis.
  std::vector<int64_t> coordinates(int64_t p) const;
  /// "(batch=2, model=2)".
  std::string str() const;
};

/// Per dim of a tensor, the mesh axis it is split over, or "" when every device holds that dim
/// whole (keras TensorLayout's axes, None spelled "").
using DimAxes = std::vector<std::string>;

/// "(None, 'model')": a layout as Keras prints it.
std::string dim_axes_str(const DimAxes& axes);

/// What a backend asks of a distribution when it compiles a program for a mesh.
class ShardingPlan {
 public:
  virtual ~ShardingPlan() = default;
  /// The mesh the programs run on.
  virtual const MeshShape& mesh() const = 0;
  /// The mesh axis the batch (dim 0 of every input) is split over; "" for none.
  virtual std::string batch_axis() const = 0;
  /// The layout of each variable (one DimAxes of its rank per variable; all "" = replicated).
  /// `whole_model`: the list is every variable of a model's train step, so a rule that matches
  /// none of them is worth a warning. Throws lockstep::Error, before anything compiles, for a
  /// layout that cannot hold (a dim that does not divide by its mesh axis, a variable matched by
  /// two rules, an unknown axis), naming the variable and the rule.
  virtual std::vector<DimAxes> variable_layouts(const std::vector<const Variable*>& variables,
                                                bool whole_model) const = 0;
  /// The layout of the output of layer `layer` (Keras's "<layer>/output" rules, e.g.
  /// "dense_1/output" -> ('batch', 'model')), or none: the program constrains that tensor to it
  /// (a sharding constraint inside the module). Throws, naming the rule, when it does not fit
  /// `shape`.
  virtual std::optional<DimAxes> output_layout(const std::string& layer, const Shape& shape) const {
    (void)layer, (void)shape;
    return std::nullopt;
  }
  /// One line: "ModelParallel on mesh (batch=2, model=2), batch split over 'batch'".
  virtual std::string describe() const = 0;
};

/// Installs `plan` for the process: programs compiled from now on by a backend that partitions
/// (xla) are sharded by it. nullptr removes it.
void set_sharding_plan(std::shared_ptr<const ShardingPlan> plan);
/// The plan programs compiled now on this thread are partitioned by: a ShardingPlanScope's,
/// else the installed one, else nullptr.
std::shared_ptr<const ShardingPlan> sharding_plan();

/// While it lives, programs compiled on this thread are partitioned by `plan` (a strategy's
/// own: XlaStrategy compiles its models' programs as DataParallel over its devices). nullptr
/// changes nothing. A plan installed by set_sharding_plan at the same time is an error naming
/// both (use one of them).
class ShardingPlanScope {
 public:
  /// Installs `plan` for this thread.
  explicit ShardingPlanScope(std::shared_ptr<const ShardingPlan> plan);
  ~ShardingPlanScope();  ///< Restores the previous one.
  ShardingPlanScope(const ShardingPlanScope&) = delete;
  ShardingPlanScope& operator=(const ShardingPlanScope&) = delete;

 private:
  std::shared_ptr<const ShardingPlan> previous_;
  bool active_ = false;
};

/// The shape of the shard of a tensor of `shape` under `axes` on `mesh` (each split dim divided
/// by its axis's size). Throws when a dim does not divide.
Shape shard_shape(const Shape& shape, const MeshShape& mesh, const DimAxes& axes);
/// A contiguous copy of the block of `whole` that mesh position `p` holds under `axes`.
Tensor shard_of(const Tensor& whole, const MeshShape& mesh, const DimAxes& axes, int64_t p);
/// Writes `shard` (position p's block under `axes`) into its place in `whole` (contiguous).
void place_shard(Tensor& whole, const Tensor& shard, const MeshShape& mesh, const DimAxes& axes,
                 int64_t p);
/// The positions whose shards together cover a tensor once: those at index 0 along every axis
/// that `axes` does not use (the other positions hold copies of theirs).
std::vector<int64_t> covering_positions(const MeshShape& mesh, const DimAxes& axes);

}  // namespace lockstep
