// The rendezvous store's wire format (private to distribute; store.cpp is its one user, and
// tests/fuzz/store_protocol_fuzz.cpp feeds it bytes): requests and replies are little-endian
// host integers and strings as u32 length + bytes. Reading a request's arguments is kept apart
// from acting on them so that the parser can be fuzzed without sockets or threads.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::distribute::store_protocol {

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCheck, kWait, kRegister, kLost, kBye, kHello };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kDenied = 2 };

// Longest wait a request may ask the server for (a day; more is clamped).
constexpr int64_t kMaxWaitMs = 24LL * 3600 * 1000;
// Bytes read per step of a long string: memory follows what arrived, not what was claimed.
constexpr size_t kReadChunk = 64 * 1024;

// Fills data[0, size) from the source; false when it ends or fails.
using ReadBytes = std::function<bool(void* data, size_t size)>;

struct Writer {
  std::vector<char> buf;
  template <typename T>
  void pod(T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void bytes(const std::vector<char>& v) {
    pod(uint32_t(v.size()));
    buf.insert(buf.end(), v.begin(), v.end());
  }
  void str(const std::string& s) {
    pod(uint32_t(s.size()));
    buf.insert(buf.end(), s.begin(), s.end());
  }
};

// Any failure (the source, or a length over its cap) clears ok and later reads return
// nothing. `over_limit` tells a protocol error from an I/O error.
struct Reader {
  ReadBytes read;
  bool ok = true;
  bool over_limit = false;
  template <typename T>
  T pod() {
    T v{};
    ok = ok && read(&v, sizeof(T));
    return v;
  }
  std::vector<char> bytes(size_t limit) {
    const uint32_t n = pod<uint32_t>();
    std::vector<char> v;
    if (!ok) return v;
    if (n > limit) {
      ok = false;
      over_limit = true;
      return v;
    }
    while (ok && v.size() < n) {
      const size_t have = v.size(), step = std::min<size_t>(kReadChunk, n - have);
      v.resize(have + step);
      ok = read(v.data() + have, step);
    }
    return v;
  }
  std::string str(size_t limit) {
    auto v = bytes(limit);
    return std::string(v.begin(), v.end());
  }
  std::chrono::milliseconds wait_ms() {
    return std::chrono::milliseconds(std::clamp<int64_t>(pod<int64_t>(), 0, kMaxWaitMs));
  }
};

// One request's arguments, as read from the wire (which fields are set depends on op).
struct Request {
  uint8_t op = 0;
  std::string key;                       // set, get, add, check
  std::vector<char> value;               // set
  int64_t delta = 0;                     // add
  std::vector<std::string> keys;         // wait
  std::chrono::milliseconds timeout{0};  // get, wait, lost
  int32_t rank = -1;                     // register
  std::string token;                     // hello
};

// Reads the arguments of `op` (the byte before them) into request, every length capped
// (kStoreMaxKeyBytes, kStoreMaxValueBytes, kStoreMaxWaitKeys, kStoreMaxTokenBytes). False on
// an unknown op, a length over its cap, or when the bytes end: the server closes the
// connection.
bool read_request(uint8_t op, Reader& in, Request& request);

}  // namespace lockstep::distribute::store_protocol
