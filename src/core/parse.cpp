// Checked parsing of command-line and environment numbers (std::from_chars: no locale, no
// whitespace skipping, overflow reported).
#include "lockstep/core/parse.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <system_error>
#include <thread>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {

std::string shown(std::string_view text) {
  constexpr size_t kMax = 64;  // a pasted file must not become the error message
  if (text.size() <= kMax) return std::string(text);
  return std::string(text.substr(0, kMax)) + "...";
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The text without one leading '+' (from_chars takes '-' but not '+'); "" when the rest is
// empty or starts with another sign ("+-5", "++5").
std::string_view unsigned_body(std::string_view text) {
  if (!text.empty() && text[0] == '+') {
    text.remove_prefix(1);
    if (!text.empty() && (text[0] == '-' || text[0] == '+')) return {};
  }
  return text;
}

}  // namespace

int64_t parse_int(std::string_view what, std::string_view text, int64_t min, int64_t max) {
  auto fail = [&](const char* why) {
    LS_FAIL(what, " expects an integer in ", min, "..", max, ", got '", shown(text), "' (", why,
            ")");
  };
  const std::string_view digits = unsigned_body(text);
  if (digits.empty()) fail(text.empty() ? "empty" : "not an integer");
  int64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value, 10);
  if (ec == std::errc::result_out_of_range) fail("out of range");
  if (ec != std::errc() || ptr != end) fail("not an integer");
  if (value < min || value > max) fail("out of range");
  return value;
}

double parse_double(std::string_view what, std::string_view text, double min, double max) {
  auto fail = [&](const char* why) {
    LS_FAIL(what, " expects a number in ", number_text(min), "..", number_text(max), ", got '",
            shown(text), "' (", why, ")");
  };
  const std::string_view body = unsigned_body(text);
  if (body.empty()) fail(text.empty() ? "empty" : "not a number");
  double value = 0;
  const char* end = body.data() + body.size();
  const auto [ptr, ec] = std::from_chars(body.data(), end, value, std::chars_format::general);
  if (ec == std::errc::result_out_of_range) fail("out of range");
  if (ec != std::errc() || ptr != end) fail("not a number");
  if (!std::isfinite(value)) fail("not a finite number");
  if (value < min || value > max) fail("out of range");
  return value;
}

int max_thread_count() {
  const unsigned hw = std::thread::hardware_concurrency();
  return int(std::max<unsigned>(16, 4 * std::max(1u, hw)));
}

int parse_thread_count(std::string_view what, std::string_view text) {
  return int(parse_int(what, text, 0, max_thread_count()));
}

}  // namespace lockstep
