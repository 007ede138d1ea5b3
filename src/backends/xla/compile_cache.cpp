// The persistent compile cache's entries on disk (see compile_cache.h).
#include "backends/xla/compile_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/core/env.h"

namespace fs = std::filesystem;

namespace lockstep::xla {

namespace {

constexpr char kMagic[] = "LSXLAC01";
constexpr size_t kMagicSize = 8;

std::atomic<int64_t> hits{0}, misses{0}, writes{0}, rejected{0};

uint64_t fnv1a(const std::string& data, uint64_t h) {
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

bool get_u64(const std::string& in, size_t& pos, uint64_t& v) {
  if (in.size() < pos + 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(in[pos + i])) << (8 * i);
  pos += 8;
  return true;
}

// Why `bytes` is not a good entry for `key` ("" when it is); the payload goes to `payload`.
std::string parse_entry(const std::string& bytes, const std::string& key, std::string& payload) {
  if (bytes.size() < kMagicSize || bytes.compare(0, kMagicSize, kMagic) != 0)
    return "not a Lockstep compile cache entry (bad magic)";
  size_t pos = kMagicSize;
  uint64_t key_size = 0, payload_size = 0, hash = 0;
  if (!get_u64(bytes, pos, key_size) || bytes.size() - pos < key_size)
    return "truncated (in its key)";
  if (bytes.compare(pos, key_size, key) != 0 || key_size != key.size())
    return "foreign: it was written for another module, options or plugin";
  pos += key_size;
  if (!get_u64(bytes, pos, payload_size) || !get_u64(bytes, pos, hash))
    return "truncated (in its header)";
  if (bytes.size() - pos != payload_size)
    return "truncated or padded: " + std::to_string(bytes.size() - pos) + " bytes of payload, " +
           std::to_string(payload_size) + " expected";
  payload = bytes.substr(pos);
  if (fnv1a(payload, 0xcbf29ce484222325ULL) != hash) return "damaged (its checksum differs)";
  return "";
}

}  // namespace

CompileCacheStats compile_cache_stats() {
  return {hits.load(), misses.load(), writes.load(), rejected.load()};
}
void count_compile_cache_hit() { ++hits; }
void count_compile_cache_miss() { ++misses; }

std::string compile_cache_dir() {
  const std::string set = env::text_or_empty(env::xla_cache_dir);
  if (set == "off" || set == "0" || set == "none") return "";
  if (!set.empty()) return set;
  if (auto xdg = env::text(env::xdg_cache_home))
    return (fs::path(*xdg) / "lockstep" / "xla").string();
  if (auto home = env::text(env::home))
    return (fs::path(*home) / ".cache" / "lockstep" / "xla").string();
  return "";
}

std::string hash128_hex(const std::string& data) {
  return hex64(fnv1a(data, 0xcbf29ce484222325ULL)) + hex64(fnv1a(data, 0x84222325cbf29ce4ULL));
}

std::string CompileCache::path_for(const std::string& key) const {
  return (fs::path(dir_) / (hash128_hex(key) + ".xlaexe")).string();
}

void CompileCache::reject(const std::string& key, const std::string& why) const {
  ++rejected;
  std::fprintf(stderr, "warning: xla compile cache: entry %s %s; compiling again\n",
               path_for(key).c_str(), why.c_str());
}

std::optional<std::string> CompileCache::read(const std::string& key) const {
  const std::string path = path_for(key);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  if (!in.good() && !in.eof()) {
    reject(key, "cannot be read");
    return std::nullopt;
  }
  std::string payload;
  const std::string why = parse_entry(buf.str(), key, payload);
  if (!why.empty()) {
    reject(key, "is " + why);
    return std::nullopt;
  }
  return payload;
}

void CompileCache::write(const std::string& key, const std::string& payload) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const std::string path = path_for(key);
  static std::atomic<uint64_t> serial{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  std::string header(kMagic, kMagicSize);
  put_u64(header, key.size());
  header += key;
  put_u64(header, payload.size());
  put_u64(header, fnv1a(payload, 0xcbf29ce484222325ULL));
  bool ok = false;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(header.data(), std::streamsize(header.size()));
    out.write(payload.data(), std::streamsize(payload.size()));
    out.flush();
    ok = out.good();
  }
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    std::fprintf(stderr, "warning: xla compile cache: cannot write %s (%s); not cached\n",
                 path.c_str(), ok ? "rename failed" : "write failed");
    return;
  }
  ++writes;
}

}  // namespace lockstep::xla
