// Helpers of the tests that scan src/ line by line (op_names_test, declarations_test): read a
// file, write a fixture file, visit every code line (comments cut off), join messages.
#pragma once
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace lockstep::source_scan {

namespace fs = std::filesystem;

inline std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// Calls visit(rel, where, code, line) for every line of every .cpp and .h under root/src: rel is
// the path from root ("src/ops/fusions.cpp"), where "rel:N: ", code the line before any "//".
inline void for_each_code_line(
    const fs::path& root,
    const std::function<void(const std::string& rel, const std::string& where,
                             const std::string& code, const std::string& line)>& visit) {
  for (const auto& entry : fs::recursive_directory_iterator(root / "src")) {
    const fs::path p = entry.path();
    if (p.extension() != ".cpp" && p.extension() != ".h") continue;
    const std::string rel = fs::relative(p, root).generic_string();
    std::istringstream lines(read(p));
    std::string line;
    for (int n = 1; std::getline(lines, line); ++n) {
      const size_t comment = line.find("//");
      const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
      visit(rel, rel + ":" + std::to_string(n) + ": ", code, line);
    }
  }
}

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

}  // namespace lockstep::source_scan
