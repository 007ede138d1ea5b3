// The --mesh and --layout-map flags of `lockstep train` (keras.distribution on the xla backend):
//   --mesh batch=2,model=2      a DeviceMesh of 2 x 2 devices of --device xla:PLUGIN (the CPU
//                               plugin is asked for 4), axes named as given, row-major
//   --layout-map rules.json     ModelParallel with these rules, Keras's LayoutMap as JSON:
//                               {"dense.*kernel": [null, "model"], "dense.*bias": ["model"]}
// --mesh without --layout-map is DataParallel over the mesh; the batch is split over the mesh's
// first axis either way.
#pragma once
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/json.h"
#include "lockstep/distribute/distribution.h"
#include "lockstep/distribute/xla_strategy.h"

namespace lockstep::cli {

// "batch=2,model=2" -> the mesh's shape and axis names.
inline std::pair<std::vector<int64_t>, std::vector<std::string>> parse_mesh(
    const std::string& text) {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const size_t eq = part.find('=');
    LS_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < part.size() &&
                 part.find_first_not_of("0123456789", eq + 1) == std::string::npos,
             "--mesh '", text, "': each axis is NAME=SIZE, comma-separated (e.g. batch=2,model=2)");
    names.push_back(part.substr(0, eq));
    shape.push_back(std::stoll(part.substr(eq + 1)));
  }
  LS_CHECK(!shape.empty(), "--mesh is empty; give e.g. batch=2,model=2");
  return {shape, names};
}

// The LayoutMap of a rules file over `mesh`.
inline distribution::LayoutMap read_layout_map(const std::string& path,
                                               const distribution::DeviceMesh& mesh) {
  std::ifstream f(path);
  LS_CHECK(f, "--layout-map '", path, "': cannot open the file");
  std::stringstream text;
  text << f.rdbuf();
  const json rules = parse_json(text.str(), "--layout-map '" + path + "'");
  LS_CHECK(rules.is_object(), "--layout-map '", path,
           "': give a JSON object of rules, e.g. {\"dense.*kernel\": [null, \"model\"]}");
  distribution::LayoutMap map(mesh);
  for (const auto& [key, value] : rules.items()) {
    LS_CHECK(value.is_array(), "--layout-map '", path, "': rule '", key,
             "' must be a list with a mesh axis name or null per dim, e.g. [null, \"model\"]");
    std::vector<std::optional<std::string>> axes;
    for (const json& a : value) {
      LS_CHECK(a.is_null() || a.is_string(), "--layout-map '", path, "': rule '", key, "' has ",
               a.dump(), "; each dim is a mesh axis name or null");
      axes.push_back(a.is_null() ? std::nullopt : std::optional<std::string>(a.get<std::string>()));
    }
    map[key] = distribution::TensorLayout(axes);
  }
  return map;
}

// Connects to the mesh's devices of `device` (xla:PLUGIN) and installs DataParallel or
// ModelParallel for the process; returns the distribution's one-line description.
inline std::string set_mesh_distribution(const std::string& device, const std::string& mesh_text,
                                         const std::string& layout_map) {
  LS_CHECK(device.rfind("xla:", 0) == 0 && device.size() > 4, "--mesh needs --device xla:PLUGIN ",
           "(the mesh is devices of a PJRT plugin, partitioned by XLA)");
  auto [shape, names] = parse_mesh(mesh_text);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  auto resolver = distribute::XlaClusterResolver::connect(device.substr(4), int(n));
  distribution::DeviceMesh mesh(shape, names);
  const distribution::Distribution d =
      layout_map.empty() ? distribution::DataParallel(mesh)
                         : distribution::ModelParallel(read_layout_map(layout_map, mesh));
  distribution::set_distribution(d);
  return d.plan()->describe();
}

}  // namespace lockstep::cli
