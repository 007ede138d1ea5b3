// The example programs' command lines (examples/*.cpp, docs/examples/*.cpp), one parser for all:
// -h/--help prints the usage and exits 0 before anything runs; an unknown option, a missing
// value, a bad number or too many arguments print what is wrong and the usage to stderr and
// exit 2. Nothing is created or trained for a command line that is refused.
//
//   auto args = lockstep::tools::parse_example_args(argc, argv, kUsage, {"--epochs"}, 1);
//   const std::string out = args.positional_or(0, "saved");
//   const int epochs = int(args.integer("--epochs", 3, 0, 1000000));
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lockstep::tools {

/// A parsed example command line.
struct ExampleArgs {
  std::string program;                        ///< argv[0]'s file name
  std::string usage;                          ///< printed with any error
  std::vector<std::string> positional;        ///< arguments that are not options
  std::map<std::string, std::string> values;  ///< "--epochs" -> "3" ("--epochs=3" works too)

  /// positional[i], or `fallback` when there are fewer arguments.
  std::string positional_or(size_t i, const std::string& fallback) const;
  /// The option's value, or `fallback` when it was not given.
  std::string value_or(const std::string& option, const std::string& fallback) const;
  /// The option's value as an integer in [lo, hi] (lockstep::parse_int), or `fallback`; a bad
  /// value prints the error naming the option and exits 2.
  int64_t integer(const std::string& option, int64_t fallback, int64_t lo, int64_t hi) const;
};

/// Parses argv: `value_options` each take one value; at most `max_positional` other arguments.
/// -h/--help: prints `usage` to stdout and exits 0. Anything else not declared (an option, an
/// extra argument, an option without its value): prints the error and `usage` to stderr and
/// exits 2.
ExampleArgs parse_example_args(int argc, char** argv, const std::string& usage,
                               const std::vector<std::string>& value_options = {},
                               size_t max_positional = 0);

}  // namespace lockstep::tools
