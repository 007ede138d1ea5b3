// Bounded reads of regular files and checked, atomic replacement of files (see file_io.h).
#include "lockstep/core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "lockstep/core/error.h"

namespace lockstep {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes a descriptor on scope exit unless released.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  // close() with its error checked (NFS and some disks report a failed write only here).
  int close_checked() {
    const int rc = ::close(fd);
    fd = -1;
    return rc;
  }
};

std::string prefix(const std::string& what, const std::string& path) {
  return what + " '" + path + "': ";
}

// Opens `path` for reading without blocking on a FIFO and checks that it is a regular file.
int open_regular(const std::string& path, const std::string& what, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) LS_FAIL(prefix(what, path), "no such file");
    LS_FAIL(prefix(what, path), "cannot read: ", std::strerror(e),
            e == EACCES ? " (check its permissions)" : "");
  }
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    const std::string kind = kind_of(st->st_mode);
    ::close(fd);
    LS_FAIL(prefix(what, path), "is ", kind, ", not a regular file (Lockstep reads ", what,
            "s only from regular files)");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

// Paths that name a stream the user means to write to: a plain write, no rename.
bool is_stream_path(const std::string& path) {
  return path == "/dev/stdout" || path == "/dev/stderr" || path.rfind("/dev/fd/", 0) == 0 ||
         path.rfind("/proc/self/fd/", 0) == 0;
}

void write_stream(const std::string& path, const char* p, size_t n, const std::string& what) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY));
  LS_CHECK(fd.fd >= 0, prefix(what, path), "cannot open for writing: ", std::strerror(errno));
  write_all(fd.fd, p, n, what, path);
  LS_CHECK(fd.close_checked() == 0, prefix(what, path), "write failed: ", std::strerror(errno));
}

// Creates "<path>.tmp-<pid>-<n>" exclusively (never through a link), locked while in use.
int create_temporary(const std::string& path, const std::string& what, std::string* tmp) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    *tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    const int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::flock(fd, LOCK_EX | LOCK_NB);  // marks it in use (remove_stale_temporaries)
      return fd;
    }
    if (errno != EEXIST) {
      const int e = errno;
      LS_FAIL(prefix(what, path), "cannot create a temporary file beside it: ", std::strerror(e),
              " (does the folder exist and is it writable?)");
    }
  }
  LS_FAIL(prefix(what, path), "cannot create a temporary file beside it: 100 names taken");
}

// write_file_atomic's temporaries: "<pid>-<n>" (older versions added ".zip" or ".weights.h5").
long atomic_temporary_pid(const std::string& rest) {
  const size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 9) return 0;
  const std::string pid_digits = rest.substr(0, dash);
  const size_t n_end = rest.find_first_not_of("0123456789", dash + 1);
  const std::string suffix = n_end == std::string::npos ? "" : rest.substr(n_end);
  if (pid_digits.find_first_not_of("0123456789") != std::string::npos || n_end == dash + 1 ||
      (suffix != "" && suffix != ".zip" && suffix != ".weights.h5"))
    return 0;
  return std::stol(pid_digits);
}

}  // namespace

int write_fully(int fd, const void* data, size_t n, bool socket) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = n < (size_t(1) << 30) ? n : (size_t(1) << 30);
    const ssize_t w = socket ? ::send(fd, p, chunk, MSG_NOSIGNAL) : ::write(fd, p, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    p += w;
    n -= size_t(w);
  }
  return 0;
}

void write_all(int fd, const void* data, size_t n, const std::string& what,
               const std::string& path) {
  const int e = write_fully(fd, data, n);
  LS_CHECK(e == 0, prefix(what, path), "write failed: ", std::strerror(e),
           e == ENOSPC || e == EFBIG || e == EDQUOT
               ? " (the disk is full or a file-size limit was reached; the previous file, if "
                 "any, is unchanged)"
               : "");
}

void remove_stale_temporaries(const std::string& path,
                              const std::function<long(const std::string& rest)>& pid_of) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp-";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const long pid = pid_of(name.substr(prefix.size()));
    if (pid <= 0 || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0)
      ::unlink(it->path().c_str());
    ::close(fd);
  }
}

std::string file_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return kind_of(st.st_mode);
}

void check_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  ::close(open_regular(path, what, &st));
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes,
                              const std::string& what) {
  struct stat st {};
  Fd fd(open_regular(path, what, &st));
  LS_CHECK(uint64_t(st.st_size) <= max_bytes, prefix(what, path), "is ", st.st_size,
           " bytes, more than the limit of ", max_bytes, " bytes for a ", what);
  std::string out(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    LS_CHECK(n >= 0, prefix(what, path), "read failed: ", std::strerror(errno));
    if (n == 0) break;
    got += size_t(n);
  }
  out.resize(got);  // a file that shrank while read; one that grew is read to its stat size
  return out;
}

void write_file_atomic(const std::string& path, const void* data, size_t bytes,
                       const std::string& what) {
  const char* p = static_cast<const char*>(data);
  LS_CHECK(!path.empty(), what, ": the output path is empty");
  if (is_stream_path(path)) return write_stream(path, p, bytes, what);
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  LS_CHECK(!exists || S_ISREG(st.st_mode), prefix(what, path), "is ", kind_of(st.st_mode),
           ", not a regular file: Lockstep saves only to regular files, by writing a temporary "
           "and renaming it over the target (name a file path, or /dev/stdout to stream it)");
  remove_stale_temporaries(path,
                           atomic_temporary_pid);  // left by saves of this target that were killed
  std::string tmp;
  Fd fd(create_temporary(path, what, &tmp));
  try {
    if (exists) ::fchmod(fd.fd, st.st_mode & 07777);  // keep the replaced file's permissions
    write_all(fd.fd, p, bytes, what, path);
    LS_CHECK(::fsync(fd.fd) == 0, prefix(what, path), "fsync failed: ", std::strerror(errno));
    LS_CHECK(fd.close_checked() == 0, prefix(what, path), "close failed: ", std::strerror(errno));
    LS_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, prefix(what, path),
             "cannot rename the temporary file into place: ", std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  const std::filesystem::path target(path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) ::fsync(dfd), ::close(dfd);  // makes the rename durable
}

}  // namespace lockstep
