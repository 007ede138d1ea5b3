// Python's str.format mini-language for ints and floats (ModelCheckpoint's file names).
#include "callbacks/python_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "lockstep/core/error.h"

namespace lockstep::train {
namespace {

struct Spec {
  char fill = ' ', align = 0, sign = '-', type = 0;
  bool alternate = false;
  char grouping = 0;
  int width = 0, precision = -1;
};

bool is_align(char c) { return c == '<' || c == '>' || c == '^' || c == '='; }

int read_number(const std::string& s, size_t& i) {
  int n = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    n = n * 10 + (s[i++] - '0');
    LS_CHECK(n < 100000, "format spec '", s, "': number too large");
  }
  return n;
}

Spec parse_spec(const std::string& s) {
  Spec p;
  size_t i = 0;
  if (s.size() >= 2 && is_align(s[1])) {
    p.fill = s[0], p.align = s[1], i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    p.align = s[0], i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) p.sign = s[i++];
  if (i < s.size() && s[i] == '#') p.alternate = true, ++i;
  if (i < s.size() && s[i] == '0') {
    if (!p.align) p.fill = '0', p.align = '=';
    ++i;
  }
  p.width = read_number(s, i);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) p.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    LS_CHECK(i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])), "format spec '", s,
             "': a precision must follow '.'");
    p.precision = read_number(s, i);
  }
  if (i < s.size()) p.type = s[i++];
  LS_CHECK(i == s.size(), "invalid format spec '", s, "' (Python's format mini-language: ",
           "[[fill]align][sign][#][0][width][,][.precision][type])");
  return p;
}

// Python's repr(float): the shortest round-trip digits, fixed for 1e-4 <= |v| < 1e16.
std::string python_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e-05"
  size_t e = sci.find('e');
  int exponent = std::atoi(sci.c_str() + e + 1);
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t k = sign.size(); k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  if (exponent < -4 || exponent >= 16) {
    std::string m = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + m + ex;
  }
  if (exponent < 0) return sign + "0." + std::string(size_t(-exponent - 1), '0') + digits;
  if (int(digits.size()) <= exponent + 1)
    return sign + digits + std::string(size_t(exponent + 1 - int(digits.size())), '0') + ".0";
  return sign + digits.substr(0, size_t(exponent + 1)) + "." + digits.substr(size_t(exponent + 1));
}

std::string printf_float(double v, char type, int precision, bool alternate) {
  char fmt[16], buf[512];
  std::snprintf(fmt, sizeof fmt, "%%%s.%d%c", alternate ? "#" : "", precision, type);
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string format_float(double v, const Spec& p) {
  const char type = p.type;
  if (type == 0 && p.precision < 0) return python_repr(v);
  if (type == '%')
    return printf_float(v * 100, 'f', p.precision < 0 ? 6 : p.precision, p.alternate) + "%";
  if (type == 'f' || type == 'F' || type == 'e' || type == 'E')
    return printf_float(v, type, p.precision < 0 ? 6 : p.precision, p.alternate);
  const int precision = p.precision < 0 ? 6 : std::max(p.precision, 1);
  std::string s = printf_float(v, type == 'G' ? 'G' : 'g', precision, p.alternate);
  if (type == 0 && std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Inserts the grouping character every three digits of the integer part.
std::string group_digits(const std::string& body, char grouping) {
  size_t end = body.find_first_not_of("0123456789");
  if (end == std::string::npos) end = body.size();
  std::string out;
  for (size_t k = 0; k < end; ++k) {
    if (k > 0 && (end - k) % 3 == 0) out += grouping;
    out += body[k];
  }
  return out + body.substr(end);
}

std::string pad(std::string sign, std::string body, const Spec& p) {
  const int len = int(sign.size() + body.size());
  if (len >= p.width) return sign + body;
  const size_t n = size_t(p.width - len);
  const char align = p.align ? p.align : '>';
  if (align == '<') return sign + body + std::string(n, p.fill);
  if (align == '=') return sign + std::string(n, p.fill) + body;
  if (align == '^')
    return std::string(n / 2, p.fill) + sign + body + std::string(n - n / 2, p.fill);
  return std::string(n, p.fill) + sign + body;
}

std::string format_value(const FormatValue& value, const std::string& name,
                         const std::string& spec_text) {
  Spec p = parse_spec(spec_text);
  std::string body;
  bool negative = false;
  if (const int64_t* i = std::get_if<int64_t>(&value);
      i && (p.type == 0 || p.type == 'd' || p.type == 'n')) {
    LS_CHECK(p.precision < 0, "format of {", name, ":", spec_text,
             "}: Precision not allowed in integer format specifier");
    negative = *i < 0;
    body = std::to_string(negative ? -(*i) : *i);
  } else {
    const double v = std::holds_alternative<int64_t>(value) ? double(std::get<int64_t>(value))
                                                            : std::get<double>(value);
    LS_CHECK(std::string("fFeEgG%").find(p.type) != std::string::npos || p.type == 0, "format of {",
             name, ":", spec_text, "}: Unknown format code '", std::string(1, p.type),
             "' for object of type '", std::holds_alternative<double>(value) ? "float" : "int",
             "'");
    body = format_float(v, p);
    negative = !body.empty() && body[0] == '-';
    if (negative) body = body.substr(1);
  }
  if (p.grouping) body = group_digits(body, p.grouping);
  std::string sign = negative ? "-" : p.sign == '+' ? "+" : p.sign == ' ' ? " " : "";
  return pad(sign, body, p);
}

}  // namespace

std::string python_format(const std::string& pattern,
                          const std::map<std::string, FormatValue>& values) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if ((c == '{' || c == '}') && i + 1 < pattern.size() && pattern[i + 1] == c) {
      out += c, ++i;
      continue;
    }
    LS_CHECK(c != '}', "format string '", pattern,
             "': Single '}' encountered (write }} for a brace)");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = pattern.find('}', i);
    LS_CHECK(close != std::string::npos, "format string '", pattern,
             "': Single '{' encountered (write {{ for a brace)");
    const std::string field = pattern.substr(i + 1, close - i - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    auto it = values.find(name);
    if (it == values.end()) throw MissingFormatKey{name};
    out +=
        format_value(it->second, name, colon == std::string::npos ? "" : field.substr(colon + 1));
    i = close;
  }
  return out;
}

}  // namespace lockstep::train
