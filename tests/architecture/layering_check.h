// The layering check: reads the module DAG from <root>/src/modules.txt and reports every
// #include in <root>/src and <root>/include that reaches a module which is not a (transitive)
// dependency, or another module's private header. Used by layering_test.cpp on the real tree
// and on fixture trees.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

namespace lockstep::testing {

struct ModuleDecl {
  std::string name, folder;  // folder under src/ (and under include/lockstep/ if public)
  std::vector<std::string> deps;
};

struct ModuleGraph {
  std::vector<ModuleDecl> modules;                     // bottom up, as declared
  std::map<std::string, std::set<std::string>> reach;  // module -> transitive dependencies
};

// Parses modules.txt ("name folder dep dep..." per line, "-" for none, # comments). Throws
// std::runtime_error on a dependency that is not declared above its user (so cycles can't exist).
ModuleGraph read_module_graph(const std::string& modules_txt);

// Every violation as "path:line: message"; empty when the tree keeps its layering.
std::vector<std::string> check_layering(const std::string& root);

}  // namespace lockstep::testing
