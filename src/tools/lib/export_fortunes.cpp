// export_fortunes: Debian's fortune category files -> class folders of one-quote .txt files.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lockstep/core/error.h"
#include "lockstep/core/file_io.h"
#include "lockstep/tools/text_export.h"

namespace lockstep::tools {

namespace fs = std::filesystem;

std::vector<std::string> default_fortune_categories() {
  return {"computers", "definitions", "people", "politics", "science", "songs-poems"};
}

namespace {

std::string trim_blank_lines(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == '\n' || s[b] == '\r' || s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == '\n' || s[e - 1] == '\r' || s[e - 1] == ' ' || s[e - 1] == '\t'))
    --e;
  return s.substr(b, e - b);
}

}  // namespace

std::vector<std::string> split_fortunes(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  size_t i = 0;
  auto flush = [&] {
    std::string q = trim_blank_lines(cur);
    if (!q.empty()) out.push_back(std::move(q));
    cur.clear();
  };
  while (i < text.size()) {
    size_t nl = text.find('\n', i);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(i, nl - i);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "%")
      flush();
    else
      cur.append(line).append("\n");
    i = nl + 1;
  }
  flush();
  return out;
}

ExportFortunesResult export_fortunes(const std::string& fortunes_dir, const std::string& out_dir,
                                     const ExportFortunesOptions& o) {
  LS_CHECK(!o.categories.empty(), "export_fortunes: no categories given");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  LS_CHECK(!ec, "export_fortunes: cannot create '", out_dir, "': ", ec.message());
  ExportFortunesResult res;
  for (const auto& cat : o.categories) {
    LS_CHECK(!cat.empty() && cat.find('/') == std::string::npos && cat != "." && cat != "..",
             "export_fortunes: '", cat, "' is not a category name");
    const fs::path src = fs::path(fortunes_dir) / cat;
    LS_CHECK(fs::is_regular_file(src, ec), "export_fortunes: no category file '", src.string(),
             "' (install Debian's fortunes package: apt-get install fortunes; categories are the "
             "files without .dat/.u8 in ",
             fortunes_dir, ")");
    const auto quotes = split_fortunes(read_regular_file(src.string(), 64 << 20, "fortune file"));
    const fs::path dir = fs::path(out_dir) / cat;
    fs::create_directories(dir, ec);
    LS_CHECK(!ec, "export_fortunes: cannot create '", dir.string(), "': ", ec.message());
    int64_t n = 0;
    for (const auto& q : quotes) {
      if (o.limit_per_class >= 0 && n >= o.limit_per_class) break;
      if (int64_t(q.size()) < o.min_chars) continue;
      char name[32];
      std::snprintf(name, sizeof name, "%05lld.txt", static_cast<long long>(n));
      std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
      f << q << "\n";
      f.close();
      LS_CHECK(f.good(), "export_fortunes: cannot write '", (dir / name).string(), "'");
      ++n;
    }
    res.categories.push_back(cat);
    res.per_class.push_back(n);
    res.files += n;
  }
  return res;
}

}  // namespace lockstep::tools
