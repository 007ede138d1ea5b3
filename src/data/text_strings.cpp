// The host-side string steps of text preprocessing (lockstep/data/text.h): UTF-8 repair,
// Keras's standardization and splitting, n-grams, FarmHash Fingerprint64 and adapt()'s counts.
#include <algorithm>
#include <cstring>

#include "lockstep/data/text.h"

namespace lockstep::data {

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 character at s[i..], or -(bytes of its maximal invalid subpart).
int utf8_step(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    const unsigned char x = b(i + k);
    const bool ok = k == 1 ? (x >= lo && x <= hi) : (x >= 0x80 && x <= 0xBF);
    if (!ok) return -k;
  }
  return need + 1;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n < 0) return false;
    i += size_t(n);
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n > 0) {
      out.append(s.data() + i, size_t(n));
      i += size_t(n);
    } else {
      out.append(kReplacement);
      i += size_t(-n);
    }
  }
  return out;
}

std::string truncate_utf8(std::string s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s;
}

std::string lower_ascii(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

std::string strip_punctuation(std::string_view s) {
  static const bool* table = [] {
    static bool t[256] = {};
    for (unsigned char c : std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")) t[c] = true;
    return t;
  }();
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (!table[static_cast<unsigned char>(c)]) out.push_back(c);
  return out;
}

std::vector<std::string> split_whitespace(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_ascii_space(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !is_ascii_space(s[j])) ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<std::string> split_characters(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n > 0) {
      out.emplace_back(s.substr(i, size_t(n)));
      i += size_t(n);
    } else {
      out.emplace_back(kReplacement);
      i += size_t(-n);
    }
  }
  return out;
}

std::vector<std::string> ngrams(const std::vector<std::string>& tokens,
                                const std::vector<int>& widths, const std::string& separator) {
  std::vector<std::string> out;
  for (int w : widths) {
    if (w <= 0 || size_t(w) > tokens.size()) continue;
    for (size_t i = 0; i + size_t(w) <= tokens.size(); ++i) {
      std::string g = tokens[i];
      for (size_t k = 1; k < size_t(w); ++k) g.append(separator).append(tokens[i + k]);
      out.push_back(std::move(g));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// FarmHash Fingerprint64 (farmhashna::Hash64), little-endian fetches.

namespace {

constexpr uint64_t k0 = 0xc3a5c85c97cb3127ULL;
constexpr uint64_t k1 = 0xb492b66fbe98f273ULL;
constexpr uint64_t k2 = 0x9ae16a3b2f90404fULL;

uint64_t fetch64(const char* p) {
  uint64_t r = 0;
  for (int i = 7; i >= 0; --i) r = (r << 8) | static_cast<unsigned char>(p[i]);
  return r;
}
uint64_t fetch32(const char* p) {
  uint64_t r = 0;
  for (int i = 3; i >= 0; --i) r = (r << 8) | static_cast<unsigned char>(p[i]);
  return r;
}
uint64_t rotate(uint64_t v, int shift) {
  return shift == 0 ? v : (v >> shift) | (v << (64 - shift));
}
uint64_t shift_mix(uint64_t v) { return v ^ (v >> 47); }

uint64_t hash_len16(uint64_t u, uint64_t v, uint64_t mul) {
  uint64_t a = (u ^ v) * mul;
  a ^= (a >> 47);
  uint64_t b = (v ^ a) * mul;
  b ^= (b >> 47);
  return b * mul;
}

uint64_t hash_len0to16(const char* s, size_t len) {
  if (len >= 8) {
    const uint64_t mul = k2 + len * 2;
    const uint64_t a = fetch64(s) + k2;
    const uint64_t b = fetch64(s + len - 8);
    const uint64_t c = rotate(b, 37) * mul + a;
    const uint64_t d = (rotate(a, 25) + b) * mul;
    return hash_len16(c, d, mul);
  }
  if (len >= 4) {
    const uint64_t mul = k2 + len * 2;
    const uint64_t a = fetch32(s);
    return hash_len16(len + (a << 3), fetch32(s + len - 4), mul);
  }
  if (len > 0) {
    const uint8_t a = uint8_t(s[0]), b = uint8_t(s[len >> 1]), c = uint8_t(s[len - 1]);
    const uint32_t y = uint32_t(a) + (uint32_t(b) << 8);
    const uint32_t z = uint32_t(len) + (uint32_t(c) << 2);
    return shift_mix(y * k2 ^ z * k0) * k2;
  }
  return k2;
}

uint64_t hash_len17to32(const char* s, size_t len) {
  const uint64_t mul = k2 + len * 2;
  const uint64_t a = fetch64(s) * k1, b = fetch64(s + 8);
  const uint64_t c = fetch64(s + len - 8) * mul, d = fetch64(s + len - 16) * k2;
  return hash_len16(rotate(a + b, 43) + rotate(c, 30) + d, a + rotate(b + k2, 18) + c, mul);
}

uint64_t hash_len33to64(const char* s, size_t len) {
  const uint64_t mul = k2 + len * 2;
  const uint64_t a = fetch64(s) * k2, b = fetch64(s + 8);
  const uint64_t c = fetch64(s + len - 8) * mul, d = fetch64(s + len - 16) * k2;
  const uint64_t y = rotate(a + b, 43) + rotate(c, 30) + d;
  const uint64_t z = hash_len16(y, a + rotate(b + k2, 18) + c, mul);
  const uint64_t e = fetch64(s + 16) * mul, f = fetch64(s + 24);
  const uint64_t g = (y + fetch64(s + len - 32)) * mul;
  const uint64_t h = (z + fetch64(s + len - 24)) * mul;
  return hash_len16(rotate(e + f, 43) + rotate(g, 30) + h, e + rotate(f + a, 18) + g, mul);
}

struct U128 {
  uint64_t first = 0, second = 0;
};

U128 weak_hash_len32_with_seeds(const char* s, uint64_t a, uint64_t b) {
  const uint64_t w = fetch64(s), x = fetch64(s + 8), y = fetch64(s + 16), z = fetch64(s + 24);
  a += w;
  b = rotate(b + a + z, 21);
  const uint64_t c = a;
  a += x;
  a += y;
  b += rotate(a, 44);
  return {a + z, b + c};
}

}  // namespace

uint64_t farmhash_fingerprint64(std::string_view str) {
  const char* s = str.data();
  const size_t len = str.size();
  if (len <= 16) return hash_len0to16(s, len);
  if (len <= 32) return hash_len17to32(s, len);
  if (len <= 64) return hash_len33to64(s, len);
  const uint64_t seed = 81;
  uint64_t x = seed, y = seed * k1 + 113, z = shift_mix(y * k2 + 113) * k2;
  U128 v, w;
  x = x * k2 + fetch64(s);
  const char* end = s + ((len - 1) / 64) * 64;
  const char* last64 = end + ((len - 1) & 63) - 63;
  do {
    x = rotate(x + y + v.first + fetch64(s + 8), 37) * k1;
    y = rotate(y + v.second + fetch64(s + 48), 42) * k1;
    x ^= w.second;
    y += v.first + fetch64(s + 40);
    z = rotate(z + w.first, 33) * k1;
    v = weak_hash_len32_with_seeds(s, v.second * k1, x + w.first);
    w = weak_hash_len32_with_seeds(s + 32, z + w.second, y + fetch64(s + 16));
    std::swap(z, x);
    s += 64;
  } while (s != end);
  const uint64_t mul = k1 + ((z & 0xff) << 1);
  s = last64;
  w.first += ((len - 1) & 63);
  v.first += w.first;
  w.first += v.first;
  x = rotate(x + y + v.first + fetch64(s + 8), 37) * mul;
  y = rotate(y + v.second + fetch64(s + 48), 42) * mul;
  x ^= w.second * 9;
  y += v.first * 9 + fetch64(s + 40);
  z = rotate(z + w.first, 33) * mul;
  v = weak_hash_len32_with_seeds(s, v.second * mul, x + w.first);
  w = weak_hash_len32_with_seeds(s + 32, z + w.second, y + fetch64(s + 16));
  std::swap(z, x);
  return hash_len16(hash_len16(v.first, w.first, mul) + shift_mix(y) * k0 + z,
                    hash_len16(v.second, w.second, mul) + x, mul);
}

// ---------------------------------------------------------------------------------------------
// TokenCounter

void TokenCounter::add_document(const std::vector<std::string>& tokens) {
  for (const auto& t : tokens) ++counts_[t].terms;
  // Document counts: each distinct token once.
  std::vector<std::string> distinct(tokens);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (const auto& t : distinct) ++counts_[t].documents;
  ++num_documents_;
}

std::vector<std::string> TokenCounter::vocabulary(int64_t max_tokens,
                                                  const std::vector<std::string>& exclude) const {
  std::vector<std::pair<int64_t, const std::string*>> items;
  items.reserve(counts_.size());
  for (const auto& [token, c] : counts_)
    if (std::find(exclude.begin(), exclude.end(), token) == exclude.end())
      items.emplace_back(c.terms, &token);
  // numpy.lexsort((tokens, counts))[::-1]: counts descending, then tokens (bytes) descending.
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return *a.second > *b.second;  // std::string compares as unsigned bytes (char_traits)
  });
  if (max_tokens >= 0 && int64_t(items.size()) > max_tokens) items.resize(size_t(max_tokens));
  std::vector<std::string> out;
  out.reserve(items.size());
  for (const auto& [n, t] : items) out.push_back(*t);
  return out;
}

int64_t TokenCounter::document_count(const std::string& token) const {
  auto it = counts_.find(token);
  return it == counts_.end() ? 0 : it->second.documents;
}

void TokenCounter::clear() {
  counts_.clear();
  num_documents_ = 0;
}

}  // namespace lockstep::data
