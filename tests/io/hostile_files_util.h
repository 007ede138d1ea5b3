// Helpers for the hostile-file tests (issue 25): a minimal zip writer (stored or deflated
// members, so a test can declare what libzip would not write), byte patching of HDF5 files, and
// running a check in a child process with a deadline (a hang is a failure, not a stuck suite).
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep::test_util {

struct ZipMember {
  std::string name;
  std::string bytes;
  bool deflate = false;
};

inline void put16(std::string& s, uint32_t v) {
  s.push_back(char(v & 0xff));
  s.push_back(char((v >> 8) & 0xff));
}
inline void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}

inline std::string raw_deflate(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, uLong(in.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip file of `members` (no zip64: each member under 4 GiB).
inline std::string make_zip(const std::vector<ZipMember>& members) {
  std::string out, central;
  for (const auto& m : members) {
    const uint32_t crc =
        uint32_t(crc32(0, reinterpret_cast<const Bytef*>(m.bytes.data()), uInt(m.bytes.size())));
    const std::string data = m.deflate ? raw_deflate(m.bytes) : m.bytes;
    const uint32_t offset = uint32_t(out.size());
    auto header = [&](std::string& s, bool central_entry) {
      put32(s, central_entry ? 0x02014b50 : 0x04034b50);
      if (central_entry) put16(s, 20);  // version made by
      put16(s, 20);                     // version needed
      put16(s, 0);                      // flags
      put16(s, m.deflate ? 8 : 0);      // method
      put16(s, 0), put16(s, 0x21);      // time, date
      put32(s, crc), put32(s, uint32_t(data.size())), put32(s, uint32_t(m.bytes.size()));
      put16(s, uint32_t(m.name.size())), put16(s, 0);  // name length, extra length
      if (central_entry) {
        put16(s, 0), put16(s, 0), put16(s, 0);  // comment, disk, internal attributes
        put32(s, 0), put32(s, offset);          // external attributes, local header offset
      }
      s += m.name;
    };
    header(out, false);
    out += data;
    header(central, true);
  }
  const uint32_t central_at = uint32_t(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0), put16(out, 0);
  put16(out, uint32_t(members.size())), put16(out, uint32_t(members.size()));
  put32(out, uint32_t(central.size())), put32(out, central_at);
  put16(out, 0);
  return out;
}

inline void write_binary(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// Replaces every occurrence of the little-endian u64 pair (a, b) by (c, d); returns how many.
inline int patch_u64_pair(std::string& bytes, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  char from[16], to[16];
  std::memcpy(from, &a, 8), std::memcpy(from + 8, &b, 8);
  std::memcpy(to, &c, 8), std::memcpy(to + 8, &d, 8);
  int n = 0;
  for (size_t at = bytes.find(std::string(from, 16)); at != std::string::npos;
       at = bytes.find(std::string(from, 16), at + 16), ++n)
    bytes.replace(at, 16, std::string(to, 16));
  return n;
}

// Runs `check` in a forked child that must finish within `seconds`. The child's verdict: ""
// when `check` returned "" (pass), else its message. A crash or a hang is reported as such.
inline std::string in_child(const std::function<std::string()>& check, int seconds = 20) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(unsigned(seconds));
    std::string verdict;
    try {
      verdict = check();
    } catch (const std::exception& e) {
      verdict = std::string("uncaught exception: ") + e.what();
    }
    if (::write(fds[1], verdict.data(), verdict.size()) < 0) ::_exit(3);
    ::_exit(verdict.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string verdict;
  char buf[4096];
  ssize_t k;
  while ((k = ::read(fds[0], buf, sizeof buf)) > 0) verdict.append(buf, size_t(k));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return WTERMSIG(status) == SIGALRM
               ? "hung: still running after " + std::to_string(seconds) + " s"
               : "crashed with signal " + std::to_string(WTERMSIG(status));
  return verdict;
}

}  // namespace lockstep::test_util
