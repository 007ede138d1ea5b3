// docs_keras_compat (ctest -L docs): docs/keras_compat.md's "Keras API coverage" tables against
// the code, both ways.
//
//   build/bin/keras_compat_check SOURCE_DIR
//
// Each row of a kind's table is `| Keras name | ... | C++ cell | notes |`. The C++ cell is "yes"
// (a factory of the Keras name, or "yes: `Name`" for another name, is declared in the section's
// header), "model" (layers: a nested model, not a layer factory) or "string only" (a string the
// get() function resolves, with no factory of its own). What Lockstep lacks is in one table,
// "### Not yet" (`| Keras name | kind | strings | notes |`, kind: layer, loss, metric,
// optimizer, schedule or callback); each of its rows counts as a "no" row of its kind's table,
// and a "no" in a kind's own table is a mistake. The checks:
//   * Layers: the ".keras / JSON" column's "yes" rows equal ls::registered_layers() plus
//     InputLayer (which network_from_config reads itself); a "no" row is not registered.
//   * every "yes" C++ cell names a factory declared in the header (lockstep/nn/layers.h,
//     text_layers.h, keras_hub.h (KerasHub's, rows named by registered name: keras_hub>X),
//     lockstep/losses/loss.h, metrics/metric.h,
//     optimizers/optimizer.h, optimizers/schedule.h, callbacks/callback.h), and every factory
//     declared there has a "yes" row;
//   * Losses, Metrics, Optimizers: each string ("mse") of a row whose C++ cell is not "no" is
//     accepted by losses::get / metrics::get / optimizers::get, each string of a "no" row is
//     refused, and every name get()'s error lists as known is in a row.
// Then it shows that it catches a mistake: the same checks on copies of the page with one row
// removed, one row's "no" turned into "yes", and an invented row must each report a problem.
// Exit status 0 when the page agrees with the code and every mutation is caught.
#include <lockstep/lockstep.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ls = lockstep;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "keras_compat_check: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> matches(const std::string& text, const std::regex& re, int group = 1) {
  std::vector<std::string> out;
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it)
    out.push_back((*it)[group]);
  return out;
}

struct Row {
  int line = 0;
  std::string keras;               // the first `Name` of the first column ("" for "(by the loss)")
  std::vector<std::string> cells;  // every cell, trimmed
  std::vector<std::string> strings;  // the "quoted" strings of the strings column
};

// The rows of the table under "### <section>" (header and separator rows skipped).
std::vector<Row> table(const std::string& page, const std::string& section) {
  std::vector<Row> rows;
  std::istringstream in(page);
  std::string line;
  bool inside = false, header_seen = false;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("#", 0) == 0) {
      inside = line == "### " + section;
      header_seen = false;
      continue;
    }
    if (!inside || line.rfind("|", 0) != 0) continue;
    if (line.rfind("|---", 0) == 0) continue;
    if (!header_seen) {
      header_seen = true;
      continue;
    }
    Row r;
    r.line = n;
    std::string cell;
    std::istringstream cells(line.substr(1));
    while (std::getline(cells, cell, '|')) r.cells.push_back(trim(cell));
    // (KerasHub's layers by their registered names: `keras_hub>TransformerEncoder`.)
    auto names = matches(r.cells[0], std::regex("`([A-Za-z0-9_>]+)`"));
    if (!names.empty()) r.keras = names[0];
    rows.push_back(r);
  }
  return rows;
}

struct Section {
  std::string name;                             // the "### " heading
  std::string kind;                             // its rows' kind in the "Not yet" table
  std::vector<std::string> headers;             // whose factories the C++ column names
  int cxx_column;                               // the C++ cell's index
  int strings_column = -1;                      // the strings' index (-1: none)
  std::function<void(const std::string&)> get;  // get(name); throws when unknown
};

// Factories declared in a header: a return type, then a PascalCase name and "(" at the start of
// a line (`LayerHandle Dense(`, `inline LayerHandle Conv2D(`, `LossPtr Huber(`).
std::set<std::string> declared(const std::string& source_dir, const std::vector<std::string>& hs) {
  std::set<std::string> out;
  const std::regex decl(R"(\n(?:inline )?(?:[A-Za-z_:]+(?:<[^>\n]*>)?) ([A-Z][A-Za-z0-9]*)\()");
  for (const auto& h : hs)
    for (auto& n : matches("\n" + read_text(source_dir + "/include/lockstep/" + h), decl))
      out.insert(n);
  return out;
}

// The names get()'s error lists as known ("unknown loss 'x' (known: a, b, c)").
std::set<std::string> known_names(const Section& s) {
  try {
    s.get("no_such_name_for_keras_compat_check");
  } catch (const std::exception& e) {
    std::smatch m;
    const std::string what = e.what();
    std::set<std::string> out;
    if (std::regex_search(what, m, std::regex(R"(known: ([^)]*)\))"))) {
      std::string list = m[1], item;
      std::istringstream in(list);
      while (std::getline(in, item, ',')) out.insert(trim(item));
    }
    return out;
  }
  return {};
}

bool accepted(const Section& s, const std::string& name) {
  try {
    s.get(name);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The factory a C++ cell names: the Keras name for "yes", the `Name` given for "yes: `Name`".
std::optional<std::string> factory(const Row& r, const std::string& cell) {
  if (cell.rfind("yes", 0) != 0) return std::nullopt;
  auto given = matches(cell, std::regex("`([A-Za-z0-9_]+)`"));
  if (!given.empty()) return given[0];
  if (r.keras.empty()) return std::nullopt;
  return r.keras;
}

const char* const kNotYet = "Not yet";

// The "Not yet" rows of `s`'s kind, as "no" rows of its own table: the Keras name, "no" in the
// .keras / JSON column (layers) and the C++ column, the strings where the section has them.
std::vector<Row> not_yet_rows(const std::vector<Row>& not_yet, const Section& s) {
  std::vector<Row> out;
  for (const Row& n : not_yet) {
    if (n.cells.size() < 4 || n.cells[1] != s.kind) continue;
    Row r = n;
    r.cells.assign(size_t(std::max(s.cxx_column, s.strings_column) + 2), "");
    r.cells[0] = n.cells[0];
    r.cells[size_t(s.cxx_column)] = "no";
    if (s.name == "Layers") r.cells[1] = "no";
    if (s.strings_column >= 0) r.cells[size_t(s.strings_column)] = n.cells[2];
    out.push_back(r);
  }
  return out;
}

// The "Not yet" table's own shape: four cells, a known kind.
std::vector<std::string> check_not_yet(const std::vector<Row>& not_yet,
                                       const std::vector<Section>& sections) {
  std::vector<std::string> problems;
  if (not_yet.empty()) problems.push_back("keras_compat.md has no table under \"### Not yet\"");
  for (const Row& r : not_yet) {
    bool known = false;
    for (const Section& s : sections) known = known || (r.cells.size() > 1 && r.cells[1] == s.kind);
    if (r.cells.size() < 4 || !known)
      problems.push_back("keras_compat.md:" + std::to_string(r.line) + ": Not yet '" + r.keras +
                         "': want | `Name` | kind | strings | notes | with a kind of the tables");
  }
  return problems;
}

// Layers: the .keras / JSON column against the layer registry, both ways.
void check_registry(const std::vector<Row>& rows, std::vector<std::string>& problems) {
  auto where = [](const Row& r) { return "keras_compat.md:" + std::to_string(r.line) + ": "; };
  std::set<std::string> registry;
  for (const std::string& c : ls::registered_layers()) registry.insert(c);
  registry.insert("InputLayer");  // read by network_from_config itself, not registered
  std::set<std::string> yes;
  for (const Row& r : rows) {
    if (r.cells.size() < 2) continue;
    const bool marked = r.cells[1] == "yes";
    if (r.cells[1] != "yes" && r.cells[1] != "no")
      problems.push_back(where(r) + "Layers '" + r.keras + "': the .keras / JSON cell '" +
                         r.cells[1] + "' is neither yes nor no");
    if (marked) yes.insert(r.keras);
    if (marked != bool(registry.count(r.keras)))
      problems.push_back(where(r) + "Layers '" + r.keras + "' is marked " + r.cells[1] +
                         " for .keras / JSON, but the layer registry " +
                         (marked ? "does not know it" : "knows it"));
  }
  for (const std::string& c : registry)
    if (!yes.count(c))
      problems.push_back("Layers: the registry knows '" + c +
                         "' but keras_compat.md has no row marking it yes for .keras / JSON");
}

std::vector<std::string> check(const std::string& page, const std::string& source_dir,
                               const std::vector<Section>& sections) {
  auto where = [](const Row& r) { return "keras_compat.md:" + std::to_string(r.line) + ": "; };
  const std::vector<Row> not_yet = table(page, kNotYet);
  std::vector<std::string> problems = check_not_yet(not_yet, sections);
  for (const Section& s : sections) {
    std::vector<Row> rows = table(page, s.name);
    if (rows.empty()) {
      problems.push_back("keras_compat.md has no table under \"### " + s.name + "\"");
      continue;
    }
    for (const Row& r : rows)
      if (int(r.cells.size()) > s.cxx_column && r.cells[size_t(s.cxx_column)] == "no")
        problems.push_back(where(r) + s.name + " '" + r.keras +
                           "': a \"no\" row belongs in the \"Not yet\" table");
    for (Row& r : not_yet_rows(not_yet, s)) rows.push_back(std::move(r));
    // The C++ column against the header's factories.
    const std::set<std::string> factories = declared(source_dir, s.headers);
    std::set<std::string> documented;
    for (const Row& r : rows) {
      if (int(r.cells.size()) <= std::max(s.cxx_column, s.strings_column)) {
        problems.push_back(where(r) + "too few columns");
        continue;
      }
      const std::string& cell = r.cells[s.cxx_column];
      if (cell.rfind("yes", 0) != 0 && cell != "no" && cell != "model" && cell != "string only") {
        problems.push_back(where(r) + s.name + " '" + r.keras + "': the C++ cell '" + cell +
                           "' is none of yes, yes: `Name`, no, model, string only");
        continue;
      }
      if (auto f = factory(r, cell)) {
        documented.insert(*f);
        if (!factories.count(*f))
          problems.push_back(where(r) + s.name + ": '" + *f +
                             "' is marked yes but no header of the section declares it");
      } else if (cell.rfind("yes", 0) == 0) {
        problems.push_back(where(r) + s.name + ": a yes without a name");
      }
      // The strings against get().
      if (s.strings_column >= 0) {
        const bool should_accept = cell != "no" && cell != "model";
        for (const std::string& name :
             matches(r.cells[s.strings_column], std::regex("\"([A-Za-z0-9_]+)\"")))
          if (accepted(s, name) != should_accept)
            problems.push_back(where(r) + s.name + ": \"" + name + "\" is " +
                               (should_accept ? "listed as supported but get() refuses it"
                                              : "listed as unsupported but get() accepts it"));
      }
    }
    for (const std::string& f : factories)
      if (!documented.count(f))
        problems.push_back(s.name + ": '" + f +
                           "' is declared in the code but keras_compat.md has no yes row for it");
    if (s.strings_column >= 0) {
      std::set<std::string> listed;
      for (const Row& r : rows)
        if (int(r.cells.size()) > s.strings_column)
          for (auto& n : matches(r.cells[s.strings_column], std::regex("\"([A-Za-z0-9_]+)\"")))
            listed.insert(n);
      const std::set<std::string> known = known_names(s);
      if (known.empty())
        problems.push_back(s.name +
                           ": get()'s error lists no known names (its message changed? "
                           "update tests/docs/keras_compat.cpp)");
      for (const std::string& n : known)
        if (!listed.count(n))
          problems.push_back(s.name + ": get() knows \"" + n +
                             "\" but keras_compat.md lists it "
                             "in no row");
    }
    if (s.name == "Layers") check_registry(rows, problems);
  }
  return problems;
}

// The page with `from` replaced by `to` once (the mutation must apply: else the self-check
// itself is stale).
std::string mutate(const std::string& page, const std::string& from, const std::string& to) {
  const size_t at = page.find(from);
  if (at == std::string::npos) {
    std::fprintf(stderr, "keras_compat_check: the self-check's row '%s' is not on the page\n",
                 from.c_str());
    std::exit(2);
  }
  return page.substr(0, at) + to + page.substr(at + from.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: keras_compat_check SOURCE_DIR\n");
    return 2;
  }
  const std::string source_dir = argv[1];
  const std::vector<Section> sections = {
      {"Layers",
       "layer",
       {"nn/layers.h", "nn/recurrent.h", "nn/embedding.h", "nn/layers_1d.h", "nn/text_layers.h",
        "nn/attention.h", "nn/keras_hub.h", "nn/einsum_layers.h"},
       2,
       -1,
       nullptr},
      {"Losses", "loss", {"losses/loss.h"}, 2, 1, [](const std::string& n) { ls::losses::get(n); }},
      {"Metrics",
       "metric",
       {"metrics/metric.h"},
       2,
       1,
       [](const std::string& n) { ls::metrics::get(n, "sparse_categorical_crossentropy"); }},
      {"Optimizers",
       "optimizer",
       {"optimizers/optimizer.h"},
       2,
       1,
       [](const std::string& n) { ls::optimizers::get(n); }},
      {"Learning-rate schedules", "schedule", {"optimizers/schedule.h"}, 1, -1, nullptr},
      {"Callbacks", "callback", {"callbacks/callback.h"}, 1, -1, nullptr},
  };
  const std::string page = read_text(source_dir + "/docs/keras_compat.md");

  const std::vector<std::string> problems = check(page, source_dir, sections);
  for (const std::string& p : problems) std::printf("MISMATCH %s\n", p.c_str());
  std::printf("docs/keras_compat.md against the code: %s\n", problems.empty() ? "agree" : "DIFFER");

  // The checker catches each kind of mistake.
  const std::vector<std::pair<std::string, std::string>> mutations = {
      {"| `Dense` | yes | yes | |\n", ""},                                    // a layer left out
      {"| `Huber` | `\"huber\"` | yes |", "| `Huber` | `\"huber\"` | no |"},  // a wrong "no"
      {"| `SGD` | `\"sgd\"` | yes |",                                         // a wrong "yes"
       "| `Nadam` | `\"nadam\"` | yes | |\n| `SGD` | `\"sgd\"` | yes |"},
      {"| `ModelCheckpoint` | yes |", "| `Invented` | yes | |\n| `ModelCheckpoint` | yes |"},
      {"| `Dense` | yes | yes |",
       "| `Conv3D` | yes | yes | |\n| `Dense` | yes | yes |"},  // registry
      {"| `Subtract` | layer |", "| `Add` | layer |"},         // "not yet" for a layer Lockstep has
      {"| `Nadam` | optimizer |", "| `Nadam` | optimiser |"},  // a kind of no table
  };
  int missed = 0;
  for (const auto& [from, to] : mutations) {
    const size_t caught = check(mutate(page, from, to), source_dir, sections).size();
    const bool ok = caught > problems.size();
    std::printf("self-check: the page with '%s' changed: %s\n",
                trim(from.substr(0, from.find('\n'))).c_str(), ok ? "caught" : "NOT CAUGHT");
    missed += !ok;
  }
  return problems.empty() && missed == 0 ? 0 : 1;
}
