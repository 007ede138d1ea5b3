// The layering check (see layering_check.h).
#include "architecture/layering_check.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace lockstep::testing {

ModuleGraph read_module_graph(const std::string& modules_txt) {
  std::ifstream in(modules_txt);
  if (!in) throw std::runtime_error("cannot open " + modules_txt);
  ModuleGraph g;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line[0] == ' ') continue;
    std::istringstream fields(line);
    ModuleDecl m;
    fields >> m.name >> m.folder;
    for (std::string dep; fields >> dep;) {
      if (dep == "-") continue;
      if (!g.reach.count(dep))
        throw std::runtime_error(modules_txt + ": module '" + m.name + "' depends on '" + dep +
                                 "', which is not declared above it (the list is bottom up)");
      m.deps.push_back(dep);
      g.reach[m.name].insert(dep);
      g.reach[m.name].insert(g.reach[dep].begin(), g.reach[dep].end());
    }
    g.reach[m.name];  // a module without dependencies still exists
    g.modules.push_back(m);
  }
  return g;
}

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The module owning a path relative to src/ (or include/lockstep/): longest folder prefix.
const ModuleDecl* owner(const ModuleGraph& g, const std::string& rel) {
  const ModuleDecl* best = nullptr;
  for (auto& m : g.modules)
    if (starts_with(rel, m.folder + "/") && (!best || m.folder.size() > best->folder.size()))
      best = &m;
  return best;
}

std::string deps_text(const ModuleGraph& g, const std::string& module) {
  std::string s;
  for (auto& d : g.reach.at(module)) s += (s.empty() ? "" : " ") + d;
  return s.empty() ? "nothing" : s;
}

// Checks one #include target of a file owned by `from`; returns a message or "".
std::string check_include(const ModuleGraph& g, const ModuleDecl& from, const std::string& target,
                          const fs::path& root) {
  const ModuleDecl* to = nullptr;
  bool is_public = false;
  if (starts_with(target, "lockstep/")) {
    std::string rel = target.substr(9);
    if (rel.find('/') == std::string::npos) return "";  // the umbrella header: users only
    to = owner(g, rel);
    if (!to) return "includes " + target + ", which belongs to no module of src/modules.txt";
    is_public = true;
  } else {
    to = owner(g, target);
    if (!to || !fs::exists(root / "src" / target)) return "";  // a system or local header
  }
  if (to->name == from.name) return "";
  if (!g.reach.at(from.name).count(to->name))
    return "includes " + target + ": module " + from.name + " may not use " + to->name +
           " (it may use: " + deps_text(g, from.name) + "; see src/modules.txt)";
  if (!is_public && !starts_with(target, to->folder + "/internal/"))
    return "includes " + target + ", a private header of module " + to->name +
           " (only include/lockstep/" + to->folder + "/ and src/" + to->folder +
           "/internal/ are shared)";
  return "";
}

void check_file(const ModuleGraph& g, const ModuleDecl& from, const fs::path& file,
                const fs::path& root, std::vector<std::string>& out) {
  static const std::regex include_re(R"(^\s*#\s*include\s*[<"]([^">]+)[">])");
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::smatch m;
    if (!std::regex_search(line, m, include_re)) continue;
    std::string msg = check_include(g, from, m[1].str(), root);
    if (!msg.empty())
      out.push_back(fs::relative(file, root).string() + ":" + std::to_string(n) + ": " + msg);
  }
}

}  // namespace

std::vector<std::string> check_layering(const std::string& root_dir) {
  const fs::path root(root_dir);
  ModuleGraph g = read_module_graph((root / "src" / "modules.txt").string());
  std::vector<std::string> out;
  for (const char* top : {"src", "include/lockstep"}) {
    const fs::path base = root / top;
    if (!fs::exists(base)) continue;
    for (auto& e : fs::recursive_directory_iterator(base)) {
      if (!e.is_regular_file()) continue;
      auto ext = e.path().extension();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".hpp") continue;
      std::string rel = fs::relative(e.path(), base).generic_string();
      if (rel.find('/') == std::string::npos) continue;  // lockstep.h, the umbrella
      const ModuleDecl* from = owner(g, rel);
      if (!from) {
        out.push_back(fs::relative(e.path(), root).string() +
                      ": is in no module (add its folder to src/modules.txt)");
        continue;
      }
      check_file(g, *from, e.path(), root, out);
    }
  }
  return out;
}

}  // namespace lockstep::testing
