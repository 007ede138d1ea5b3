// keras.distribution's objects and their checks (lockstep/distribute/distribution.h); the
// sharding itself is the xla backend's (src/backends/xla/sharding_lowering.cpp).
#include "lockstep/distribute/distribution.h"

#include <cstdio>
#include <mutex>
#include <regex>
#include <set>

#include "lockstep/core/error.h"

namespace lockstep::distribution {

namespace {

std::string quoted_list(const std::vector<std::string>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", '" : "'") + xs[i] + "'";
  return s;
}

int device_index(const std::string& name) {
  const size_t colon = name.rfind(':');
  const std::string digits = colon == std::string::npos ? name : name.substr(colon + 1);
  LS_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos,
           "DeviceMesh: device '", name,
           "' is not a device name; give \"xla:N\" (N: the index among the connected devices, "
           "as XlaClusterResolver::connect lists them)");
  return std::stoi(digits);
}

std::regex compile_rule(const std::string& key) {
  try {
    return std::regex(key, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    LS_FAIL("LayoutMap: rule '", key, "' is not a valid regular expression (", e.what(),
            "); rules are searched in variable paths such as 'dense/kernel'");
  }
}

// Throws, naming `what` and the rule (`by`), unless `layout` fits a tensor of `shape` on `mesh`:
// one axis (or None) per dim, axes the mesh has, each used once, each dividing its dim.
void check_fits(const std::string& kind, const std::string& what, const std::string& by,
                const TensorLayout& layout, const Shape& shape, const MeshShape& mesh) {
  LS_CHECK(int(layout.axes().size()) == shape.rank(), kind, ": ", what, ": ", by, " has ",
           layout.axes().size(), " axes for its ", shape.rank(),
           " dims; give one mesh axis (or None) per dim");
  std::set<std::string> seen;
  for (size_t i = 0; i < layout.axes().size(); ++i) {
    if (!layout.axes()[i]) continue;
    const std::string& axis = *layout.axes()[i];
    const int a = mesh.axis(axis);
    LS_CHECK(a >= 0, kind, ": ", what, ": ", by, " names mesh axis '", axis, "', which mesh ",
             mesh.str(), " does not have; use one of ", quoted_list(mesh.axis_names), " or None");
    LS_CHECK(seen.insert(axis).second, kind, ": ", what, ": ", by, " splits two dims over '", axis,
             "'; a mesh axis can split one dim of a tensor");
    const int64_t size = mesh.shape[size_t(a)];
    LS_CHECK(shape[int(i)] % size == 0, kind, ": ", what, ": ", by, " splits its dim ", i, " (",
             shape[int(i)], ") over mesh axis '", axis, "' of size ", size,
             ", which does not divide it; make that dim a multiple of ", size,
             ", or split another dim (or None) in the rule");
  }
}

}  // namespace

// ---- DeviceMesh ----

DeviceMesh::DeviceMesh(std::vector<int64_t> shape, std::vector<std::string> axis_names,
                       std::vector<std::string> devices) {
  LS_CHECK(!shape.empty(), "DeviceMesh: shape is empty; give the devices along each axis");
  LS_CHECK(shape.size() == axis_names.size(), "DeviceMesh: shape has ", shape.size(),
           " axes but axis_names has ", axis_names.size(), " names; give one name per axis");
  for (size_t i = 0; i < shape.size(); ++i) {
    LS_CHECK(shape[i] >= 1, "DeviceMesh: axis '", axis_names[i], "' has size ", shape[i],
             "; every axis needs at least one device");
    LS_CHECK(!axis_names[i].empty(), "DeviceMesh: axis ", i, " has an empty name");
    for (size_t j = 0; j < i; ++j)
      LS_CHECK(axis_names[j] != axis_names[i], "DeviceMesh: axis name '", axis_names[i],
               "' is given twice; name each axis once");
  }
  mesh_.shape = std::move(shape);
  mesh_.axis_names = std::move(axis_names);
  const int64_t n = mesh_.size();
  if (devices.empty())
    for (int64_t p = 0; p < n; ++p) mesh_.devices.push_back(int(p));
  else {
    LS_CHECK(int64_t(devices.size()) == n, "DeviceMesh: shape ", mesh_.str(), " needs ", n,
             " devices, ", devices.size(), " given");
    for (const std::string& d : devices) {
      const int index = device_index(d);
      for (int seen : mesh_.devices)
        LS_CHECK(seen != index, "DeviceMesh: device '", d, "' is given twice");
      mesh_.devices.push_back(index);
    }
  }
}

std::vector<std::string> DeviceMesh::devices() const {
  std::vector<std::string> out;
  for (int d : mesh_.devices) out.push_back("xla:" + std::to_string(d));
  return out;
}

// ---- TensorLayout ----

TensorLayout::TensorLayout(std::initializer_list<std::optional<std::string>> axes) : axes_(axes) {}

TensorLayout::TensorLayout(std::vector<std::optional<std::string>> axes,
                           std::optional<DeviceMesh> device_mesh)
    : axes_(std::move(axes)), mesh_(std::move(device_mesh)) {}

DimAxes TensorLayout::dim_axes() const {
  DimAxes out;
  for (const auto& a : axes_) out.push_back(a.value_or(""));
  return out;
}

std::string TensorLayout::str() const { return dim_axes_str(dim_axes()); }

// ---- LayoutMap ----

LayoutMap::LayoutMap(DeviceMesh device_mesh) : mesh_(std::move(device_mesh)) {}

TensorLayout& LayoutMap::operator[](const std::string& key) {
  for (auto& [k, layout] : rules_)
    if (k == key) return layout;
  compile_rule(key);  // (checks it now, where the user wrote it)
  rules_.emplace_back(key, TensorLayout(std::vector<std::optional<std::string>>{}, mesh_));
  return rules_.back().second;
}

std::string LayoutMap::matching_key(const std::string& path) const {
  for (const auto& rule : rules_)
    if (rule.first == path) return rule.first;
  std::vector<std::string> matches;
  for (const auto& rule : rules_)
    if (std::regex_search(path, compile_rule(rule.first))) matches.push_back(rule.first);
  LS_CHECK(matches.size() <= 1, "LayoutMap: variable path '", path, "' matches ", matches.size(),
           " layout rules, ", quoted_list(matches),
           "; make each path match at most one rule (anchor a rule with ^ and $, e.g. '^", path,
           "$')");
  return matches.empty() ? std::string() : matches[0];
}

std::optional<TensorLayout> LayoutMap::get(const std::string& path) const {
  const std::string key = matching_key(path);
  if (key.empty()) return std::nullopt;
  for (const auto& rule : rules_)
    if (rule.first == key) {
      TensorLayout layout = rule.second;
      layout.mesh_ = mesh_;
      return layout;
    }
  return std::nullopt;
}

// ---- Distribution ----

Distribution::Distribution(std::string kind, DeviceMesh mesh, std::string batch_dim_name,
                           std::optional<LayoutMap> layout_map)
    : kind_(std::move(kind)),
      mesh_(std::move(mesh)),
      batch_dim_name_(std::move(batch_dim_name)),
      layout_map_(std::move(layout_map)) {
  if (batch_dim_name_.empty()) batch_dim_name_ = mesh_.axis_names()[0];
  LS_CHECK(mesh_.spec().axis(batch_dim_name_) >= 0, kind_, ": batch_dim_name '", batch_dim_name_,
           "' is not an axis of the mesh (its axes: ", quoted_list(mesh_.axis_names()), ")");
}

TensorLayout Distribution::get_data_layout(const Shape& shape) const {
  std::vector<std::optional<std::string>> axes(size_t(shape.rank()));
  if (!axes.empty()) axes[0] = batch_dim_name_;
  return TensorLayout(axes, mesh_);
}

TensorLayout Distribution::get_variable_layout(const std::string& path, const Shape& shape) const {
  if (layout_map_)
    if (std::optional<TensorLayout> layout = layout_map_->get(path)) return *layout;
  return TensorLayout(std::vector<std::optional<std::string>>(size_t(shape.rank())), mesh_);
}

std::vector<std::string> Distribution::unused_rules(const std::vector<std::string>& paths) const {
  std::vector<std::string> out;
  if (!layout_map_) return out;
  for (const auto& rule : layout_map_->rules()) {
    const std::regex re = compile_rule(rule.first);
    // (rules for layer outputs, "<layer>/output", match tensors, not variables)
    bool used = rule.first.find("output") != std::string::npos;
    for (const std::string& p : paths) used = used || p == rule.first || std::regex_search(p, re);
    if (!used) out.push_back(rule.first);
  }
  return out;
}

std::vector<TensorLayout> Distribution::variable_layouts(
    const std::vector<const Variable*>& variables, bool warn_unused) const {
  const MeshShape& mesh = mesh_.spec();
  std::vector<TensorLayout> out;
  std::vector<std::string> paths;
  for (const Variable* v : variables) paths.push_back(v->name);
  for (const Variable* v : variables) {
    const Shape shape = v->value.shape();
    // An optimizer slot "<optimizer>/<path>/<slot>" of a listed variable of the same shape.
    const Variable* reference = nullptr;
    const size_t first = v->name.find('/'), last = v->name.rfind('/');
    if (first != std::string::npos && last > first) {
      const std::string inner = v->name.substr(first + 1, last - first - 1);
      for (const Variable* w : variables)
        if (w != v && w->name == inner && w->value.shape() == shape) reference = w;
    }
    const std::string path = reference ? reference->name : v->name;
    const std::string rule = layout_map_ ? layout_map_->matching_key(path) : "";
    TensorLayout layout = get_variable_layout(path, shape);
    const std::string what =
        "variable '" + v->name + "'" +
        (reference ? " (the optimizer slot of '" + reference->name + "')" : std::string()) +
        " of shape " + shape.str();
    const std::string by = "layout rule '" + rule + "' -> " + layout.str();
    check_fits(kind_, what, by, layout, shape, mesh);
    out.push_back(layout);
  }
  if (warn_unused)
    for (const std::string& rule : unused_rules(paths))
      std::fprintf(stderr,
                   "warning: %s: layout rule '%s' matches no variable of the model (its "
                   "variables are named like '%s'); check the rule against the paths that "
                   "summary() lists\n",
                   kind_.c_str(), rule.c_str(), paths.empty() ? "" : paths[0].c_str());
  return out;
}

namespace {

// The plan the xla backend reads: the distribution's layouts, each unused rule warned once.
class DistributionPlan final : public ShardingPlan {
 public:
  explicit DistributionPlan(Distribution d) : d_(std::move(d)) {}
  const MeshShape& mesh() const override { return d_.device_mesh().spec(); }
  std::string batch_axis() const override { return d_.batch_dim_name(); }
  std::vector<DimAxes> variable_layouts(const std::vector<const Variable*>& variables,
                                        bool whole_model) const override {
    bool warn = false;
    if (whole_model) {
      std::lock_guard<std::mutex> lock(mutex_);
      warn = !warned_;
      warned_ = true;
    }
    std::vector<DimAxes> out;
    for (const TensorLayout& l : d_.variable_layouts(variables, warn)) out.push_back(l.dim_axes());
    return out;
  }
  std::optional<DimAxes> output_layout(const std::string& layer,
                                       const Shape& shape) const override {
    if (!d_.layout_map()) return std::nullopt;
    const std::string path = layer + "/output";
    const std::string rule = d_.layout_map()->matching_key(path);
    if (rule.empty()) return std::nullopt;
    const TensorLayout layout = *d_.layout_map()->get(path);
    check_fits(d_.kind(), "the output of layer '" + layer + "' of shape " + shape.str(),
               "layout rule '" + rule + "' -> " + layout.str(), layout, shape, mesh());
    return layout.dim_axes();
  }
  std::string describe() const override {
    return d_.kind() + " on mesh " + mesh().str() + ", batch split over '" + batch_axis() + "'";
  }

 private:
  Distribution d_;
  mutable std::mutex mutex_;
  mutable bool warned_ = false;
};

std::mutex& current_mutex() {
  static std::mutex m;
  return m;
}
std::optional<Distribution>& current() {
  static std::optional<Distribution> d;
  return d;
}

}  // namespace

std::shared_ptr<const ShardingPlan> Distribution::plan() const {
  return std::make_shared<DistributionPlan>(*this);
}

Distribution DataParallel(DeviceMesh device_mesh) {
  std::string batch = device_mesh.axis_names()[0];
  return Distribution("DataParallel", std::move(device_mesh), batch, std::nullopt);
}

Distribution DataParallel(const std::vector<std::string>& devices) {
  LS_CHECK(!devices.empty(), "DataParallel: no devices given");
  return DataParallel(DeviceMesh({int64_t(devices.size())}, {"batch"}, devices));
}

Distribution ModelParallel(LayoutMap layout_map, std::string batch_dim_name) {
  DeviceMesh mesh = layout_map.device_mesh();
  return Distribution("ModelParallel", std::move(mesh), std::move(batch_dim_name),
                      std::move(layout_map));
}

void set_distribution(const Distribution& distribution) {
  {
    std::lock_guard<std::mutex> lock(current_mutex());
    current() = distribution;
  }
  set_sharding_plan(distribution.plan());
}

void clear_distribution() {
  {
    std::lock_guard<std::mutex> lock(current_mutex());
    current().reset();
  }
  set_sharding_plan(nullptr);
}

std::optional<Distribution> distribution() {
  std::lock_guard<std::mutex> lock(current_mutex());
  return current();
}

DistributedTensor distribute_tensor(const Tensor& tensor, const TensorLayout& layout) {
  LS_CHECK(layout.device_mesh(), "distribute_tensor: layout ", layout.str(),
           " has no mesh; give it one (TensorLayout(axes, mesh)) or take it from a LayoutMap");
  const MeshShape& mesh = layout.device_mesh()->spec();
  const DimAxes axes = layout.dim_axes();
  LS_CHECK(int(axes.size()) == tensor.rank(), "distribute_tensor: layout ", layout.str(), " has ",
           axes.size(), " axes for a tensor of rank ", tensor.rank());
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].empty()) continue;
    const int a = mesh.axis(axes[i]);
    LS_CHECK(a >= 0, "distribute_tensor: layout ", layout.str(), " names axis '", axes[i],
             "', which mesh ", mesh.str(), " does not have");
    LS_CHECK(tensor.dim(int(i)) % mesh.shape[size_t(a)] == 0, "distribute_tensor: dim ", i, " (",
             tensor.dim(int(i)), ") of a tensor ", tensor.shape().str(),
             " does not divide by mesh axis '", axes[i], "' of size ", mesh.shape[size_t(a)]);
  }
  DistributedTensor out{layout, tensor.shape(), {}};
  for (int64_t p = 0; p < mesh.size(); ++p) out.shards.push_back(shard_of(tensor, mesh, axes, p));
  return out;
}

}  // namespace lockstep::distribution
