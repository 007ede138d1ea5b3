// The example programs' shared command-line parser (lockstep/tools/example_args.h).
#include "lockstep/tools/example_args.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "lockstep/core/parse.h"

namespace lockstep::tools {

namespace {

[[noreturn]] void refuse(const std::string& program, const std::string& what,
                         const std::string& usage) {
  std::fprintf(stderr, "%s: %s\n\n%s", program.c_str(), what.c_str(), usage.c_str());
  if (!usage.empty() && usage.back() != '\n') std::fputc('\n', stderr);
  std::exit(2);
}

}  // namespace

std::string ExampleArgs::positional_or(size_t i, const std::string& fallback) const {
  return i < positional.size() ? positional[i] : fallback;
}

std::string ExampleArgs::value_or(const std::string& option, const std::string& fallback) const {
  auto it = values.find(option);
  return it == values.end() ? fallback : it->second;
}

int64_t ExampleArgs::integer(const std::string& option, int64_t fallback, int64_t lo,
                             int64_t hi) const {
  auto it = values.find(option);
  if (it == values.end()) return fallback;
  try {
    return parse_int(option, it->second, lo, hi);
  } catch (const std::exception& e) {
    refuse(program, e.what(), usage);
  }
}

ExampleArgs parse_example_args(int argc, char** argv, const std::string& usage,
                               const std::vector<std::string>& value_options,
                               size_t max_positional) {
  ExampleArgs out;
  out.program = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "example";
  out.usage = usage;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage.c_str(), stdout);
      if (!usage.empty() && usage.back() != '\n') std::fputc('\n', stdout);
      std::exit(0);
    }
    if (a.size() > 1 && a[0] == '-') {
      std::string value;
      const size_t eq = a.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) value = a.substr(eq + 1), a = a.substr(0, eq);
      if (std::find(value_options.begin(), value_options.end(), a) == value_options.end())
        refuse(out.program, "unknown option " + a, usage);
      if (!inline_value) {
        if (i + 1 >= argc) refuse(out.program, a + " needs a value", usage);
        value = argv[++i];
      }
      out.values[a] = value;
      continue;
    }
    if (out.positional.size() >= max_positional)
      refuse(
          out.program,
          "unexpected argument '" + a + "' (takes at most " + std::to_string(max_positional) + ")",
          usage);
    out.positional.push_back(a);
  }
  return out;
}

}  // namespace lockstep::tools
