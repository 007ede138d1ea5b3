// The environment registry (lockstep/core/env.h): the only reader of the process environment.
#include "lockstep/core/env.h"

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "lockstep/core/error.h"

extern char** environ;

namespace lockstep::env {

const std::vector<Decl>& switches() {
  static const std::vector<Decl> all = {
#define LOCKSTEP_ENV_DECL(id, name, kind, fallback, area, doc) \
  {Switch::id, name, Kind::kind, fallback, area, doc},
      LOCKSTEP_ENV_SWITCHES(LOCKSTEP_ENV_DECL)
#undef LOCKSTEP_ENV_DECL
  };
  return all;
}

const Decl& decl(Switch s) { return switches().at(size_t(s)); }

namespace {

// The raw value; nullptr when unset or empty.
const char* raw(Switch s) {
  const char* v = std::getenv(decl(s).name);
  return v && *v ? v : nullptr;
}

std::optional<bool> parse_flag(const Decl& d, const char* v) {
  if (!v) return std::nullopt;
  std::string s(v);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  LS_FAIL("environment variable ", d.name, "=\"", v,
          "\" is not a switch: use 1/true/on/yes or 0/false/off/no (or unset it)");
}

}  // namespace

bool flag(Id<Kind::flag> id) {
  const Decl& d = decl(id.sw);
  if (auto v = parse_flag(d, raw(id.sw))) return *v;
  return *parse_flag(d, d.fallback);
}

std::optional<bool> flag_if_set(Id<Kind::flag> id) { return parse_flag(decl(id.sw), raw(id.sw)); }

std::optional<std::string> text(Id<Kind::value> id) {
  const char* v = raw(id.sw);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

std::string text_or_empty(Id<Kind::value> id) { return text(id).value_or(""); }

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::string docs_table() {
  std::ostringstream os;
  os << "| Variable | Area | Kind | Default | What it does |\n"
     << "|---|---|---|---|---|\n";
  for (const Decl& d : switches()) {
    os << "| `" << d.name << "` | " << d.area << " | "
       << (d.kind == Kind::flag ? "switch" : "value") << " | "
       << (*d.fallback ? std::string("`") + d.fallback + "`" : std::string("-")) << " | " << d.doc
       << " |\n";
  }
  return os.str();
}

}  // namespace lockstep::env
