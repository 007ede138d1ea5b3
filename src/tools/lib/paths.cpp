// The command-line tools' path and name checks (lockstep/tools/paths.h).
#include "lockstep/tools/paths.h"

#include <sys/stat.h>

#include <cstdio>

#include "lockstep/core/error.h"

namespace lockstep::tools {

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_output_is_not_input(const std::string& command, const std::string& output,
                               const std::vector<std::string>& inputs) {
  for (const std::string& input : inputs) {
    if (input.empty() || !same_file(output, input)) continue;
    LS_FAIL(command, ": the output '", output, "' is the same file as the input '", input,
            "'; writing it would destroy the input (choose another output path)");
  }
}

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  char buf[8];
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0xC2 && i + 1 < text.size() &&
        (static_cast<unsigned char>(text[i + 1]) & 0xE0) == 0x80) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(text[++i]));  // C1
      out += buf;
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\t' || c == '\n' || c == '\r' || c == 0x1B) {
      out += c == '\t' ? "\\t" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\e";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

}  // namespace lockstep::tools
