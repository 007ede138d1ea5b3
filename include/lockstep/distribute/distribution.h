// keras.distribution in C++: a mesh of devices, layouts over it, and the two distributions,
// DataParallel and ModelParallel. A program compiled under a distribution (backend "xla") is
// one SPMD program over the mesh: its arguments and results carry sharding annotations, XLA's
// SPMD partitioner writes each device's part and the collectives between them, each device is
// fed its shard of the batch, and each sharded variable and its optimizer slots live on the
// devices as shards (docs/distributed.md maps each Keras call to this one).
//
//   namespace ld = ls::distribution;
//   ls::distribute::XlaClusterResolver::connect("cpu", 4);          // the devices
//   ld::DeviceMesh mesh({2, 2}, {"batch", "model"});                // devices 0..3
//   ld::LayoutMap layout_map(mesh);
//   layout_map["dense.*kernel"] = {std::nullopt, "model"};          // Keras: (None, "model")
//   layout_map["dense.*bias"] = {"model"};
//   ld::set_distribution(ld::ModelParallel(layout_map, "batch"));
//   model.compile({..., .backend = "xla"});
//   model.fit(x, y, {.batch_size = 64});   // 2 x 32 rows; each kernel's columns split in two
//
// Variable paths are Keras 3's `variable.path`: "<layer>/<weight>" ("dense_1/kernel"). A rule
// is a regular expression searched in the path (Python's re.search: it may match anywhere;
// anchor with ^ and $); a key equal to the path wins outright, and a path that two rules match
// is an error naming both. Variables no rule matches are replicated. An optimizer slot takes its
// variable's layout (Keras's add_variable_from_reference). Layouts are checked before anything
// compiles: a dim that does not divide by its mesh axis names the variable, the rule, the dim
// and the axis's size; a rule that matches no variable of a model's train step is a warning
// that names it.
#pragma once
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/graph/graph.h"
#include "lockstep/graph/sharding.h"

namespace lockstep::distribution {

/// A grid of devices with named axes (keras.distribution.DeviceMesh).
class DeviceMesh {
 public:
  /// `shape`: devices along each axis; `axis_names`: one per axis; `devices`: shape's product
  /// of device names ("xla:0", "cpu:3": the number is the index among the connected devices,
  /// distribute::XlaClusterResolver::connect), row-major over shape. Empty: devices 0, 1, ...
  /// Throws naming the argument for a count that does not match, a repeated axis name or device.
  DeviceMesh(std::vector<int64_t> shape, std::vector<std::string> axis_names,
             std::vector<std::string> devices = {});
  /// Devices along each axis.
  const std::vector<int64_t>& shape() const { return mesh_.shape; }
  /// The axes' names.
  const std::vector<std::string>& axis_names() const { return mesh_.axis_names; }
  /// The devices, as "xla:N", row-major over shape.
  std::vector<std::string> devices() const;
  /// The mesh as the graph layer holds it.
  const MeshShape& spec() const { return mesh_; }

 private:
  MeshShape mesh_;
};

/// The layout of one tensor over a mesh: per dim, the mesh axis it is split over, or
/// std::nullopt for none (keras.distribution.TensorLayout; Keras writes None).
class TensorLayout {
 public:
  /// `{std::nullopt, "model"}`: dim 0 whole on every device, dim 1 split over "model".
  TensorLayout(std::initializer_list<std::optional<std::string>> axes);
  /// The same from a vector.
  TensorLayout(std::vector<std::optional<std::string>> axes,
               std::optional<DeviceMesh> device_mesh = std::nullopt);
  /// The axes, one per dim.
  const std::vector<std::optional<std::string>>& axes() const { return axes_; }
  /// The mesh, once the layout is in a LayoutMap or given one.
  const std::optional<DeviceMesh>& device_mesh() const { return mesh_; }
  /// The axes with "" for none (the graph layer's form).
  DimAxes dim_axes() const;
  /// "(None, 'model')".
  std::string str() const;

 private:
  friend class LayoutMap;
  std::vector<std::optional<std::string>> axes_;
  std::optional<DeviceMesh> mesh_;
};

/// Regular expressions over variable paths, each to a layout (keras.distribution.LayoutMap),
/// kept in insertion order.
class LayoutMap {
 public:
  /// A map over `device_mesh`: every layout put in it takes this mesh.
  explicit LayoutMap(DeviceMesh device_mesh);
  /// The layout of rule `key` (created empty on first use, as a dict entry):
  /// `map["dense.*kernel"] = {std::nullopt, "model"}`. A key that is not a valid regular
  /// expression is an error naming it.
  TensorLayout& operator[](const std::string& key);
  /// Keras's lookup: the layout of the key equal to `path`, else of the one key that
  /// re.search finds in it, else none. Throws naming the path and both keys when two match.
  std::optional<TensorLayout> get(const std::string& path) const;
  /// The key get(path) takes its layout from, or "" when none.
  std::string matching_key(const std::string& path) const;
  /// The rules, in insertion order.
  const std::vector<std::pair<std::string, TensorLayout>>& rules() const { return rules_; }
  /// The mesh.
  const DeviceMesh& device_mesh() const { return mesh_; }

 private:
  DeviceMesh mesh_;
  std::vector<std::pair<std::string, TensorLayout>> rules_;
};

/// How programs are spread over a mesh (keras.distribution.Distribution): DataParallel or
/// ModelParallel. A value; set_distribution() installs a copy.
class Distribution {
 public:
  /// "DataParallel" or "ModelParallel".
  const std::string& kind() const { return kind_; }
  /// The mesh.
  const DeviceMesh& device_mesh() const { return mesh_; }
  /// The axis the batch is split over.
  const std::string& batch_dim_name() const { return batch_dim_name_; }
  /// The rules (ModelParallel), or none.
  const std::optional<LayoutMap>& layout_map() const { return layout_map_; }
  /// The layout of a batch of `shape`: dim 0 over the batch axis, the others whole.
  TensorLayout get_data_layout(const Shape& shape) const;
  /// The layout of the variable at `path` (Keras's get_variable_layout): its rule's, else
  /// replicated (all std::nullopt, of `shape`'s rank).
  TensorLayout get_variable_layout(const std::string& path, const Shape& shape) const;
  /// Every variable's layout, checked (see the top): a dim that does not divide, an unknown
  /// axis or a rank that differs is an error naming the variable and the rule. A slot
  /// "OPTIMIZER/PATH/NAME" of a listed variable PATH takes that variable's layout.
  /// `warn_unused`: print a warning, to stderr, for each rule that matches none of them.
  std::vector<TensorLayout> variable_layouts(const std::vector<const Variable*>& variables,
                                             bool warn_unused = false) const;
  /// The rules that match none of `paths` (what the warning names).
  std::vector<std::string> unused_rules(const std::vector<std::string>& paths) const;
  /// The plan the xla backend reads (lockstep/graph/sharding.h).
  std::shared_ptr<const ShardingPlan> plan() const;

 private:
  friend Distribution DataParallel(DeviceMesh);
  friend Distribution ModelParallel(LayoutMap, std::string);
  Distribution(std::string kind, DeviceMesh mesh, std::string batch_dim_name,
               std::optional<LayoutMap> layout_map);
  std::string kind_;
  DeviceMesh mesh_;
  std::string batch_dim_name_;
  std::optional<LayoutMap> layout_map_;
};

/// Every device holds every variable whole and the batch is split over the mesh's first axis
/// (keras.distribution.DataParallel(device_mesh=...)).
Distribution DataParallel(DeviceMesh device_mesh);
/// DataParallel on a one-axis mesh "batch" over `devices` (DataParallel(devices=...)).
Distribution DataParallel(const std::vector<std::string>& devices);
/// Variables split as `layout_map` says, the batch over `batch_dim_name` (the mesh's first axis
/// when empty) (keras.distribution.ModelParallel(layout_map=..., batch_dim_name=...)).
Distribution ModelParallel(LayoutMap layout_map, std::string batch_dim_name = "");

/// Installs `distribution` for the process (keras.distribution.set_distribution): programs
/// compiled for backend "xla" from now on are partitioned by it. Programs already compiled keep
/// theirs (compile the model after this call).
void set_distribution(const Distribution& distribution);
/// Removes the distribution (set_distribution(None)).
void clear_distribution();
/// The installed distribution, or none (keras.distribution.distribution()).
std::optional<Distribution> distribution();

/// A tensor split over a mesh: each position's shard (distribute_tensor's result).
struct DistributedTensor {
  TensorLayout layout;         ///< how it is split
  Shape shape;                 ///< the whole tensor's shape
  std::vector<Tensor> shards;  ///< shards[p]: mesh position p's block (on the host)
};

/// `tensor` split as `layout` says over its mesh (keras.distribution.distribute_tensor): the
/// block each device holds. A dim that does not divide by its axis is an error naming both.
DistributedTensor distribute_tensor(const Tensor& tensor, const TensorLayout& layout);

}  // namespace lockstep::distribution
