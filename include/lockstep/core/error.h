// Errors: one exception type that carries a message saying what, where and what to do.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace lockstep {

/// The exception every Lockstep error throws: its what() says what went wrong, where (the
/// layer, file, flag or worker) and, where it can, what to do.
class Error : public std::runtime_error {
 public:
  /// An error with the message `what`.
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// LS_CHECK(cond, parts...): throw lockstep::Error with the concatenated message when cond fails.
#define LS_CHECK(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond)) throw ::lockstep::Error(::lockstep::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LS_FAIL(...) throw ::lockstep::Error(::lockstep::detail::concat(__VA_ARGS__))

}  // namespace lockstep
