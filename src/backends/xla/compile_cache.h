// The persistent compile cache of the xla backend: executables a PJRT plugin compiled,
// serialized (PJRT_Executable_Serialize) into a folder, and loaded back
// (PJRT_Executable_DeserializeAndLoad) by the next process that compiles the same module with
// the same options on the same plugin, instead of compiling again.
//
// The folder: env LOCKSTEP_XLA_CACHE_DIR; "off" (or "0", "none") turns the cache off; unset or
// empty: $XDG_CACHE_HOME/lockstep/xla, else ~/.cache/lockstep/xla.
// The key: the plugin's identity and version (its file, size and modification time, its PJRT C
// API, XLA and StableHLO versions), the platform and device kinds and count, the serialized
// compile options and the module text (a 128-bit hash and its length). The entry's file name is
// a hash of the key, and the entry holds the whole key: one written for another key (a hash
// collision, a copied file) is foreign.
// An entry: "LSXLAC01", the key's length and text, the payload's length and FNV-1a hash, the
// payload. A truncated, damaged or foreign entry, or one the plugin cannot load, is a warning
// on stderr and a recompile (whose result replaces it), never an error. Writes are atomic: a
// temporary file in the folder, renamed over the entry.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace lockstep::xla {

// What the cache did in this process (all clients).
struct CompileCacheStats {
  int64_t hits = 0;      // executables loaded from the cache
  int64_t misses = 0;    // compiles with the cache on and no usable entry
  int64_t writes = 0;    // entries written
  int64_t rejected = 0;  // entries found but not used (damaged, foreign, not loadable)
};
CompileCacheStats compile_cache_stats();

// The cache folder (see above), or "" when the cache is off.
std::string compile_cache_dir();

// 128 bits of FNV-1a (two 64-bit hashes with different offsets) as 32 hex digits.
std::string hash128_hex(const std::string& data);

class CompileCache {
 public:
  explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }
  // The entry file for `key`.
  std::string path_for(const std::string& key) const;
  // The payload stored for `key`, or nullopt: no entry (silently), or a damaged or foreign one
  // (a warning naming the file and why; counted as rejected).
  std::optional<std::string> read(const std::string& key) const;
  // Stores `payload` for `key` (atomically). A failure is a warning: the cache is an aid.
  void write(const std::string& key, const std::string& payload) const;
  // A warning about the entry for `key` (stderr), counted as rejected.
  void reject(const std::string& key, const std::string& why) const;

 private:
  std::string dir_;
};

// Counters (compile_cache.cpp; pjrt_client.cpp counts hits and misses).
void count_compile_cache_hit();
void count_compile_cache_miss();

}  // namespace lockstep::xla
