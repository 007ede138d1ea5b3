// No function in src/ is over 80 lines: a longer one is split into parts a reader can name. The
// check scans src/**/*.cpp and .h for function bodies — free and member functions, constructors,
// LOCKSTEP_REGISTER(...) { ... } blocks and lambdas outside functions (a lambda inside a function
// counts towards that function) — with a brace-matching scan that ignores comments, strings and
// preprocessor lines. A long initializer (a table of ops) is not a function; a long lambda
// inside one is. The fixtures below show that the check finds what it claims.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

constexpr int kMaxFunctionLines = 80;

struct FunctionSpan {
  int first_line = 0;  // where its declaration starts (1-based)
  int last_line = 0;   // its closing brace
  std::string name;
  int lines() const { return last_line - first_line + 1; }
};

// The source with every comment, string / character literal body and preprocessor line replaced
// by spaces (newlines kept, so offsets and line numbers stay those of the file).
std::string code_only(const std::string& text) {
  std::string out = text;
  auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < out.size(); ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  const size_t n = text.size();
  bool line_start = true;
  for (size_t i = 0; i < n;) {
    const char c = text[i];
    if (line_start && c == '#') {  // a directive, with its backslash continuations
      size_t end = i;
      while (end < n && !(text[end] == '\n' && text[end - 1] != '\\')) ++end;
      blank(i, end);
      i = end;
      continue;
    }
    if (c == '\n')
      line_start = true;
    else if (!std::isspace(static_cast<unsigned char>(c)))
      line_start = false;
    if (c == '/' && i + 1 < n && text[i + 1] == '/') {
      size_t end = text.find('\n', i);
      end = end == std::string::npos ? n : end;
      blank(i, end);
      i = end;
    } else if (c == '/' && i + 1 < n && text[i + 1] == '*') {
      size_t end = text.find("*/", i + 2);
      end = end == std::string::npos ? n : end + 2;
      blank(i, end);
      i = end;
    } else if (c == '"' && i > 0 && text[i - 1] == 'R') {  // raw string R"delim( ... )delim"
      const size_t open = text.find('(', i);
      const std::string closing = ")" + text.substr(i + 1, open - i - 1) + "\"";
      size_t end = text.find(closing, open);
      end = end == std::string::npos ? n : end + closing.size();
      blank(i + 1, end - 1);
      i = end;
    } else if (c == '"' ||
               (c == '\'' &&
                !(i > 0 && std::isdigit(static_cast<unsigned char>(text[i - 1]))))) {  // not 1'000
      size_t end = i + 1;
      while (end < n && text[end] != c && text[end] != '\n') end += text[end] == '\\' ? 2 : 1;
      blank(i + 1, std::min(end, n));
      i = std::min(end + 1, n);
    } else {
      ++i;
    }
  }
  return out;
}

class FunctionFinder {
 public:
  explicit FunctionFinder(std::string code) : code_(std::move(code)) {
    for (size_t i = 0; i < code_.size(); ++i)
      if (code_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<FunctionSpan> find() {
    scan(0, code_.size(), true);
    return found_;
  }

 private:
  enum class Kind { kScope, kSkip, kFunction, kOther };

  int line_of(size_t offset) const {
    return int(std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) -
               line_starts_.begin());
  }

  // The offset of the bracket closing the one at `open` (or the end of the text).
  size_t matching(size_t open) const {
    const char o = code_[open], c = o == '{' ? '}' : o == '(' ? ')' : ']';
    int depth = 0;
    for (size_t i = open; i < code_.size(); ++i) {
      if (code_[i] == o) ++depth;
      if (code_[i] == c && --depth == 0) return i;
    }
    return code_.size();
  }

  size_t matching_backwards(size_t close) const {
    const char c = code_[close], o = c == ')' ? '(' : '[';
    int depth = 0;
    for (size_t i = close + 1; i-- > 0;) {
      if (code_[i] == c) ++depth;
      if (code_[i] == o && --depth == 0) return i;
    }
    return 0;
  }

  size_t skip_space_backwards(size_t end) const {  // index of the last non-space before `end`
    while (end > 0 && std::isspace(static_cast<unsigned char>(code_[end - 1]))) --end;
    return end == 0 ? std::string::npos : end - 1;
  }

  // A lambda's body: `[...] {`, `[...](...) {`, with `mutable` / `noexcept` / `-> T` allowed
  // between. Returns the offset of the lambda's '[', or npos.
  size_t lambda_intro(size_t brace) const {
    size_t k = skip_space_backwards(brace);
    const size_t arrow = code_.rfind("->", brace);  // a trailing return type
    if (arrow != std::string::npos && code_.find_first_of(";{}()", arrow) >= brace)
      k = skip_space_backwards(arrow);
    for (const char* word : {"mutable", "noexcept", "constexpr"}) {
      const size_t len = std::string(word).size();
      if (k != std::string::npos && k + 1 >= len && code_.compare(k + 1 - len, len, word) == 0)
        k = skip_space_backwards(k + 1 - len);
    }
    if (k == std::string::npos) return std::string::npos;
    if (code_[k] == ')') k = skip_space_backwards(matching_backwards(k));
    if (k == std::string::npos || code_[k] != ']') return std::string::npos;
    const size_t open = matching_backwards(k);
    const size_t before = skip_space_backwards(open);
    if (before != std::string::npos && before >= 7 && code_.compare(before - 7, 8, "operator") == 0)
      return std::string::npos;  // operator[](...) { : a member function
    return open;
  }

  static std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\n\r");
    if (a == std::string::npos) return "";
    return s.substr(a, s.find_last_not_of(" \t\n\r") - a + 1);
  }

  // Offset (into header) where the declaration starts: past access specifiers.
  static size_t declaration_start(const std::string& header) {
    size_t at = 0;
    for (;;) {
      at = header.find_first_not_of(" \t\n\r", at);
      if (at == std::string::npos) return header.size();
      bool specifier = false;
      for (const char* word : {"public", "private", "protected"}) {
        const size_t len = std::string(word).size();
        if (header.compare(at, len, word) == 0) {
          const size_t colon = header.find_first_not_of(" \t\n\r", at + len);
          if (colon != std::string::npos && header[colon] == ':' &&
              header.compare(colon, 2, "::") != 0) {
            at = colon + 1, specifier = true;
          }
        }
      }
      if (!specifier) return at;
    }
  }

  static Kind classify(const std::string& header) {
    std::string h = trim(header.substr(declaration_start(header)));
    for (;;) {  // drop template <...> and [[attributes]]
      if (h.rfind("template", 0) == 0 && h.find('<') != std::string::npos) {
        int depth = 0;
        size_t k = h.find('<');
        for (; k < h.size(); ++k) {
          if (h[k] == '<') ++depth;
          if (h[k] == '>' && --depth == 0) break;
        }
        h = trim(h.substr(std::min(k + 1, h.size())));
      } else if (h.rfind("[[", 0) == 0) {
        h = trim(h.substr(std::min(h.find("]]") + 2, h.size())));
      } else {
        break;
      }
    }
    const std::string word = h.substr(0, h.find_first_of(" \t\n\r{(:<"));
    const bool has_paren = h.find('(') != std::string::npos;
    if (word == "namespace" || (word == "extern" && !has_paren)) return Kind::kScope;
    if (word == "class" || word == "struct" || word == "union") return Kind::kScope;
    if (word == "enum") return Kind::kSkip;
    int depth = 0;  // an '=' outside parentheses that is not part of an operator: an initializer
    for (size_t k = 0; k < h.size(); ++k) {
      const char c = h[k];
      if (c == '(' || c == '<') ++depth;
      if (c == ')' || c == '>') --depth;
      if (c != '=' || depth > 0) continue;
      const bool compound =
          (k > 0 && std::string("=!<>+-*/%^&|").find(h[k - 1]) != std::string::npos) ||
          (k + 1 < h.size() && h[k + 1] == '=');
      const std::string before = trim(h.substr(0, k));
      const bool op = before.size() >= 8 && before.compare(before.size() - 8, 8, "operator") == 0;
      if (!compound && !op) return Kind::kOther;
    }
    return has_paren ? Kind::kFunction : Kind::kOther;
  }

  static std::string name_of(const std::string& header) {
    const std::string h = trim(header.substr(declaration_start(header)));
    size_t paren = h.find('(');
    const size_t equals = h.find('=');
    if (equals != std::string::npos && equals < paren) {  // auto name = [...](...) {
      size_t end = h.find_last_not_of(" \t\n\r", equals - 1) + 1, begin = end;
      while (begin > 0 &&
             (std::isalnum(static_cast<unsigned char>(h[begin - 1])) || h[begin - 1] == '_'))
        --begin;
      return h.substr(begin, end - begin) + " (lambda)";
    }
    if (paren == std::string::npos) return "lambda";
    size_t end = h.find_last_not_of(" \t\n\r", paren - 1) + 1, begin = end;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(h[begin - 1])) ||
                         std::string("_:~").find(h[begin - 1]) != std::string::npos))
      --begin;
    std::string name = h.substr(begin, end - begin);
    const bool macro = !name.empty() && std::none_of(name.begin(), name.end(), [](char c) {
      return std::islower(static_cast<unsigned char>(c));
    });
    if (macro) {  // LOCKSTEP_REGISTER(image_ops)
      const size_t close = h.find(')', paren);
      name += "(" + trim(h.substr(paren + 1, close - paren - 1)) + ")";
    }
    return name;
  }

  void record(size_t first, size_t close, std::string name) {
    found_.push_back({line_of(first), line_of(close), std::move(name)});
  }

  // Scans [begin, end): a namespace or class body (scope) or an expression (an initializer, the
  // arguments of a call), where only lambdas are functions.
  void scan(size_t begin, size_t end, bool scope) {
    size_t header_start = begin;
    int parens = 0;
    for (size_t i = begin; i < end; ++i) {
      const char c = code_[i];
      if (c == '(') ++parens;
      if (c == ')') --parens;
      if (c == ';' && parens == 0) header_start = i + 1;
      if (c != '{') continue;
      const size_t close = matching(i);
      const size_t after = code_.find_first_not_of(" \t\n\r", close + 1);
      // `member_{value},` or `member_{value} {` in a constructor's initializer list
      const bool member_init =
          after != std::string::npos && after < end && (code_[after] == ',' || code_[after] == '{');
      const std::string header = code_.substr(header_start, i - header_start);
      const size_t lambda = lambda_intro(i);
      if (lambda != std::string::npos) {
        const bool named = scope && parens == 0;  // auto name = [](...) { at namespace scope
        record(named ? header_start + declaration_start(header) : lambda, close,
               named ? name_of(header) : "lambda");
      } else if (!scope || parens > 0) {
        scan(i + 1, close, false);
      } else {
        const Kind kind = classify(header);
        if (kind == Kind::kScope) scan(i + 1, close, true);
        if (kind == Kind::kFunction && !member_init)
          record(header_start + declaration_start(header), close, name_of(header));
        if (kind == Kind::kOther || (kind == Kind::kFunction && member_init))
          scan(i + 1, close, false);
      }
      i = close;
      if (!(scope && parens == 0 && member_init)) header_start = close + 1;
    }
  }

  std::string code_;
  std::vector<size_t> line_starts_{0};
  std::vector<FunctionSpan> found_;
};

std::vector<FunctionSpan> functions_in(const std::string& source_text) {
  return FunctionFinder(code_only(source_text)).find();
}

// "path:line: name is N lines (limit M)" for every function in root/src over max_lines.
std::vector<std::string> long_functions(const fs::path& root, int max_lines) {
  std::vector<fs::path> files;
  for (auto& entry : fs::recursive_directory_iterator(root / "src")) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".cpp" || ext == ".h")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> found;
  for (auto& path : files) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    for (auto& f : functions_in(text.str()))
      if (f.lines() > max_lines)
        found.push_back(fs::relative(path, root).string() + ":" + std::to_string(f.first_line) +
                        ": " + f.name + " is " + std::to_string(f.lines()) + " lines (limit " +
                        std::to_string(max_lines) + ")");
  }
  return found;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A function `name` whose definition spans exactly `lines` lines.
std::string function_of(const std::string& name, int lines) {
  std::string s = "int " + name + "(int x) {\n";
  for (int k = 0; k < lines - 2; ++k) s += "  x += " + std::to_string(k) + ";\n";
  return s + "}\n";
}

std::string repeated(const std::string& line, int count) {
  std::string s;
  for (int k = 0; k < count; ++k) s += line;
  return s;
}

}  // namespace

TEST(FunctionLength, NoFunctionInSrcIsOver80Lines) {
  auto found = long_functions(LOCKSTEP_SOURCE_DIR, kMaxFunctionLines);
  std::string all;
  for (auto& f : found) all += f + "\n";
  EXPECT_TRUE(found.empty()) << "split these into parts a reader can name:\n" << all;
}

TEST(FunctionLength, FlagsA120LineFunctionAndPassesA50LineOne) {
  const fs::path root =
      fs::temp_directory_path() / ("lockstep_function_length_" + std::to_string(::getpid()));
  fs::remove_all(root);
  write(root / "src/a/short.cpp", "// fixture\n" + function_of("short_one", 50));
  write(root / "src/b/long.h", "#pragma once\n\n" + function_of("long_one", 120));
  auto found = long_functions(root, kMaxFunctionLines);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], "src/b/long.h:3: long_one is 120 lines (limit 80)");
  fs::remove_all(root);
}

// What counts as a function, and what the scan must not be fooled by.
TEST(FunctionLength, FindsMembersRegistrationsAndLambdasButNotTables) {
  const std::string body = repeated("  x += 1;\n", 101);
  // clang-format off
  const std::string text =
      "namespace lockstep {\n"                                                        // 1
      "class Widget : public Base {\n"                                                // 2
      " public:\n"                                                                    // 3
      "  Widget() : a_{1}, b_(2) { x = 1; }\n"                                        // 4
      "  int grow(int x) const {\n" + body + "  }\n"                                  // 5..107
      "};\n"                                                                          // 108
      "LOCKSTEP_REGISTER(image_ops) {\n" + body + "}\n"                               // 109..211
      "const char* kText = \"{ not a brace\", *kRaw = R\"x({ \")x\"; // nor } this\n"  // 212
      "/* { */ const Row kTable[] = {\n" + repeated("  {\"op\", 1},\n", 120) + "};\n"  // 213..334
      "const Row kLambdas[] = {{\"op\", [](int x) {\n" + body + "  return x; }}};\n"  // 335..437
      "int ok(char c) { return c == '{' ? 1 : 0; }\n"                                 // 438
      "}  // namespace lockstep\n";
  // clang-format on
  auto functions = functions_in(text);
  ASSERT_EQ(functions.size(), 5u);
  EXPECT_EQ(functions[0].name, "Widget");
  EXPECT_EQ(functions[0].lines(), 1);
  EXPECT_EQ(functions[1].name, "grow");
  EXPECT_EQ(functions[1].first_line, 5);
  EXPECT_EQ(functions[1].lines(), 103);
  EXPECT_EQ(functions[2].name, "LOCKSTEP_REGISTER(image_ops)");
  EXPECT_EQ(functions[2].first_line, 109);
  EXPECT_EQ(functions[2].lines(), 103);
  EXPECT_EQ(functions[3].name, "lambda");  // inside the table, which itself is not a function
  EXPECT_EQ(functions[3].first_line, 335);
  EXPECT_EQ(functions[3].lines(), 103);
  EXPECT_EQ(functions[4].name, "ok");
  EXPECT_EQ(functions[4].first_line, 438);
}
