// Reading HDF5 files in a child process (io/h5_util.h: read_isolated). libhdf5 1.10 trusts
// addresses it reads from the file: keras_weights_fuzz found crafted .weights.h5 files whose
// symbol-table message puts a group's local heap or B-tree at the undefined address 0xff..ff;
// the range check in H5F__accum_read wraps and the library copies from NULL — a crash inside
// the library that no check of ours before or after the call can catch in the same process
// (any address of any HDF5 structure can do it: checking them all is a second HDF5 parser).
// So every read of a file the user hands us runs in a fork()ed child: the child parses with
// libhdf5 and streams the tensors and strings back through a pipe; if it dies (a signal), the
// parent reports the file as damaged, naming it.
//
// Thread safety after fork: only the forking thread exists in the child. The child uses
// malloc (glibc resets its locks at fork), Lockstep's tensors (no locks) and libhdf5, whose
// own global lock (Debian builds it thread-safe) must not be held by another thread at the
// fork: every Lockstep use of libhdf5 takes hdf5_lock(), and the fork happens under it. The
// child never takes that lock (its copy may be held) and ends with _exit (no atexit handlers,
// no static destructors, no OpenMP). A child that sends nothing for kChildSilenceSeconds is
// killed (a deadlock we did not foresee becomes an error, not a hang).
#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "io/h5_util.h"

namespace lockstep::io::h5 {
namespace {

constexpr int kChildSilenceSeconds = 300;

// ----- the child's side: records written to the pipe ----------------------------------------
// 'S' u64 length, bytes              a string
// 'C' i64                            a count
// 'T' u64 length, name, u8 dtype, u8 rank, i64 dims[rank], u64 nbytes, bytes   a tensor
// 'E' u64 length, message            the read failed with this lockstep::Error
// 'D'                                done

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) ::_exit(3);  // the parent is gone
    c += w;
    n -= size_t(w);
  }
}
template <typename T>
void put(int fd, T v) {
  write_all(fd, &v, sizeof v);
}
void put_string(int fd, const std::string& s) {
  put<uint64_t>(fd, s.size());
  write_all(fd, s.data(), s.size());
}

void send(int fd, const IsolatedResult& r) {
  for (auto& s : r.strings) put<char>(fd, 'S'), put_string(fd, s);
  for (int64_t c : r.counts) put<char>(fd, 'C'), put<int64_t>(fd, c);
  for (auto& t : r.tensors) {
    const Tensor v = t.value.contiguous();
    put<char>(fd, 'T');
    put_string(fd, t.name);
    put<uint8_t>(fd, uint8_t(v.dtype()));
    put<uint8_t>(fd, uint8_t(v.rank()));
    for (int i = 0; i < v.rank(); ++i) put<int64_t>(fd, v.dim(i));
    put<uint64_t>(fd, v.nbytes());
    write_all(fd, v.raw(), v.nbytes());
  }
}

[[noreturn]] void run_child(int fd, const std::function<void(IsolatedResult&)>& read) {
  // A crash is a plain death by that signal (not a sanitizer's or a crash reporter's report
  // about libhdf5, and no core file from a damaged input).
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);
  try {
    IsolatedResult r;
    read(r);
    send(fd, r);
    put<char>(fd, 'D');
  } catch (const std::exception& e) {
    put<char>(fd, 'E');
    put_string(fd, e.what());
  } catch (...) {
    put<char>(fd, 'E');
    put_string(fd, "unknown error");
  }
  ::close(fd);
  ::_exit(0);
}

// ----- the parent's side ----------------------------------------------------------------------

class PipeReader {
 public:
  PipeReader(int fd, pid_t child) : fd_(fd), child_(child) {}
  // Reads n bytes; false at the end of the stream (the child exited or died).
  bool read(void* p, size_t n) {
    char* c = static_cast<char*>(p);
    while (n > 0) {
      if (pos_ == len_ && !fill()) return false;
      const size_t k = std::min(n, len_ - pos_);
      std::memcpy(c, buf_ + pos_, k);
      pos_ += k, c += k, n -= k;
    }
    return true;
  }
  template <typename T>
  bool get(T* v) {
    return read(v, sizeof *v);
  }
  bool get_string(std::string* s, uint64_t max_bytes) {
    uint64_t n = 0;
    if (!get(&n) || n > max_bytes) return false;
    s->assign(size_t(n), '\0');
    return read(s->data(), s->size());
  }
  bool silent() const { return silent_; }

 private:
  bool fill() {
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      const int rc = ::poll(&p, 1, kChildSilenceSeconds * 1000);
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) {  // no byte for minutes: a stuck child
        silent_ = true;
        ::kill(child_, SIGKILL);
        return false;
      }
      const ssize_t r = ::read(fd_, buf_, sizeof buf_);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      pos_ = 0, len_ = size_t(r);
      return true;
    }
  }
  int fd_;
  pid_t child_;
  char buf_[1 << 16];
  size_t pos_ = 0, len_ = 0;
  bool silent_ = false;
};

// Decodes the child's records; the first error (message) or "" when the stream ended early.
bool receive(PipeReader& in, IsolatedResult* r, std::string* error) {
  for (;;) {
    char tag = 0;
    if (!in.get(&tag)) return false;
    switch (tag) {
      case 'D':
        return true;
      case 'E':
        if (!in.get_string(error, 1u << 20)) return false;
        return true;
      case 'S': {
        std::string s;
        if (!in.get_string(&s, uint64_t(1) << 32)) return false;
        r->strings.push_back(std::move(s));
        break;
      }
      case 'C': {
        int64_t c = 0;
        if (!in.get(&c)) return false;
        r->counts.push_back(c);
        break;
      }
      case 'T': {
        NamedTensor t;
        uint8_t dt = 0, rank = 0;
        if (!in.get_string(&t.name, 1u << 20) || !in.get(&dt) || !in.get(&rank)) return false;
        if (rank > Shape::kMaxRank || dt > uint8_t(DType::u8)) return false;
        Shape shape;
        for (int i = 0; i < rank; ++i) {
          int64_t d = 0;
          if (!in.get(&d) || d < 0) return false;
          shape.push_back(d);
        }
        uint64_t nbytes = 0;
        if (!in.get(&nbytes)) return false;
        // The child checked the shape against the file; these are its bytes, checked again.
        if (nbytes != checked_bytes(shape, dtype_size(DType(dt)), "'" + t.name + "'")) return false;
        t.value = Tensor::empty(shape, DType(dt));
        if (!in.read(t.value.raw(), nbytes)) return false;
        r->tensors.push_back(std::move(t));
        break;
      }
      default:
        return false;
    }
  }
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGKILL:
      return "SIGKILL";
    default:
      return "signal " + std::to_string(sig);
  }
}

}  // namespace

std::mutex& hdf5_lock() {
  static std::mutex mu;
  return mu;
}

IsolatedResult read_isolated(const std::string& path, const std::string& what,
                             const std::function<void(IsolatedResult&)>& read) {
  // For debugging the reader (gdb, a fuzzer's view of its coverage): no child process, and no
  // protection from libhdf5's crashes.
  static const bool in_process = [] {
    const char* v = std::getenv("LOCKSTEP_HDF5_IN_PROCESS");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (in_process) {
    IsolatedResult r;
    read(r);
    return r;
  }
  int fds[2];
  LS_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "'", path, "': cannot create a pipe to read the ", what,
           " in a separate process: ", std::strerror(errno));
  pid_t pid;
  {
    std::lock_guard<std::mutex> lock(hdf5_lock());  // no other thread inside libhdf5 at the fork
    H5open();                                       // initialised once here, not in every child
    pid = ::fork();
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(fds[1], read);
  }
  ::close(fds[1]);
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    LS_FAIL("'", path, "': cannot start a process to read the ", what,
            " in (fork: ", std::strerror(err),
            "; Lockstep reads HDF5 files in a separate process)");
  }
  IsolatedResult r;
  std::string error;
  bool complete = false;
  bool silent = false;
  try {
    PipeReader in(fds[0], pid);
    complete = receive(in, &r, &error);
    silent = in.silent();
  } catch (...) {
    ::close(fds[0]);
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw;
  }
  ::close(fds[0]);
  if (!complete) ::kill(pid, SIGKILL);  // a malformed stream: stop whatever the child does
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (complete && error.empty()) return r;
  if (complete) throw Error(error);  // the reader's own error, in its words
  LS_CHECK(!silent, "'", path, "': reading the ", what, " made no progress for ",
           kChildSilenceSeconds, " s; stopped it (the file may be damaged)");
  if (WIFSIGNALED(status))
    LS_FAIL("'", path, "': the ", what, " is damaged: the HDF5 library crashed reading it (",
            signal_name(WTERMSIG(status)),
            " in the separate process Lockstep reads HDF5 files in); save or download it again");
  LS_FAIL("'", path, "': the ", what,
          " could not be read: the process reading it ended early (exit status ",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, "; the file may be damaged)");
}

}  // namespace lockstep::io::h5
