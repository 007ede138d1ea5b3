// The `lockstep` command line's argument parsing: each command declares its options (with a
// value or a plain flag) and how many positional arguments it takes; --help prints its usage.
#pragma once
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/parse.h"
#include "lockstep/tools/paths.h"  // check_output_is_not_input, printable

namespace lockstep::cli {

struct CommandSpec {
  std::string name;                        // "predict"
  std::string usage;                       // full --help text
  std::vector<std::string> value_options;  // "--top-k", ...
  std::vector<std::string> flag_options;   // "--json", ...
  size_t min_positional = 0, max_positional = 0;
};

struct Args {
  std::map<std::string, std::string> values;
  std::set<std::string> flags;
  std::vector<std::string> positional;
  bool help = false;

  bool has(const std::string& option) const { return values.count(option) > 0; }
  std::string get(const std::string& option, const std::string& fallback = "") const {
    auto it = values.find(option);
    return it == values.end() ? fallback : it->second;
  }
  int64_t integer(const std::string& option, int64_t fallback, int64_t lo, int64_t hi) const {
    return has(option) ? parse_int(option, get(option), lo, hi) : fallback;
  }
  double number(const std::string& option, double fallback, double lo, double hi) const {
    return has(option) ? parse_double(option, get(option), lo, hi) : fallback;
  }
};

inline bool contains(const std::vector<std::string>& list, const std::string& s) {
  for (auto& x : list)
    if (x == s) return true;
  return false;
}

// Parses `args` (after the command name). Errors name the command and point to --help.
inline Args parse_args(const CommandSpec& spec, const std::vector<std::string>& args) {
  Args out;
  const std::string see = " (see lockstep " + spec.name + " --help)";
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "-h" || a == "--help") {
      out.help = true;
      return out;
    }
    if (a.size() < 2 || a.rfind("--", 0) != 0) {
      out.positional.push_back(a);
      continue;
    }
    std::string value;
    const size_t eq = a.find('=');
    if (eq != std::string::npos) value = a.substr(eq + 1), a = a.substr(0, eq);
    if (contains(spec.flag_options, a)) {
      LS_CHECK(eq == std::string::npos, spec.name, ": ", a, " takes no value", see);
      out.flags.insert(a);
      continue;
    }
    LS_CHECK(contains(spec.value_options, a), spec.name, ": unknown option ", a, see);
    if (eq == std::string::npos) {
      LS_CHECK(i + 1 < args.size(), spec.name, ": ", a, " needs a value", see);
      value = args[++i];
    }
    out.values[a] = value;
  }
  LS_CHECK(
      out.positional.size() >= spec.min_positional && out.positional.size() <= spec.max_positional,
      spec.name, ": expected ",
      spec.min_positional == spec.max_positional
          ? std::to_string(spec.min_positional)
          : std::to_string(spec.min_positional) + " to " + std::to_string(spec.max_positional),
      " file argument(s), got ", out.positional.size(), see);
  return out;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace lockstep::cli
