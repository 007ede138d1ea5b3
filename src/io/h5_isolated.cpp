// Reading HDF5 files in a separate process (io/h5_util.h: read_isolated). libhdf5 1.10 trusts
// addresses it reads from the file: keras_weights_fuzz found crafted .weights.h5 files whose
// symbol-table message puts a group's local heap or B-tree at the undefined address 0xff..ff;
// the range check in H5F__accum_read wraps and the library copies from NULL — a crash inside
// the library that no check of ours before or after the call can catch in the same process
// (any address of any HDF5 structure can do it: checking them all is a second HDF5 parser).
// So every read of a file the user hands us runs in the program lockstep_h5_reader
// (h5_reader_main.cpp): it parses with libhdf5 and streams the tensors and strings back through
// a pipe; if it dies (a signal), the caller reports the file as damaged, naming it.
//
// The reader is a fresh program started with posix_spawn, not a fork() of the caller: a fork
// of a process with other threads (libFuzzer's, the input pipeline's, the sanitizers') copies
// whatever locks those threads held at that instant, and a child that needs one waits forever
// (keras_file_fuzz hung so under `make test`). A reader that sends nothing for
// reader_silence_seconds() is killed: a deadlock we did not foresee, or a crafted file that
// keeps libhdf5 busy for minutes (keras_weights_fuzz found a 10 KB one: 3 CPU-minutes under
// ASan), becomes an error naming the file, not a hang. The reader also dies with the thread that
// started it (PR_SET_PDEATHSIG): a caller killed mid-read leaves no reader running.
//
// The program is $LOCKSTEP_H5_READER when set, else looked for in this order:
// lockstep/lockstep_h5_reader and
// lockstep_h5_reader beside the library holding this code (the build tree's lib/, an installed
// prefix's lib dir); lockstep_h5_reader beside the running program (the fuzz tree's bin/); the
// path it is installed at (LOCKSTEP_H5_READER_INSTALLED).
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "io/h5_util.h"
#include "lockstep/core/env.h"
#include "lockstep/core/file_io.h"
#include "lockstep/core/parse.h"

namespace lockstep::io::h5 {
namespace {

// How long the reader may send nothing ($LOCKSTEP_H5_READER_SILENCE, default 300 s).
int reader_silence_seconds() {
  auto v = env::text(env::h5_reader_silence);
  return v ? int(parse_int("LOCKSTEP_H5_READER_SILENCE", *v, 1, 86400)) : 300;
}

// ----- the reader's side: records written to the pipe ---------------------------------------
// 'S' u64 length, bytes              a string
// 'C' i64                            a count
// 'T' u64 length, name, u8 dtype, u8 rank, i64 dims[rank], u64 nbytes, bytes   a tensor
// 'E' u64 length, message            the read failed with this lockstep::Error
// 'X' u64 length, message            the read failed with another exception (std::bad_alloc)
// 'D'                                done

void write_all(int fd, const void* p, size_t n) {
  if (write_fully(fd, p, n) != 0) ::_exit(3);  // the parent is gone
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

const char* const kKindNames[] = {"tensors", "keras-weights", "legacy-probe", "legacy"};

void run_request(const ReadRequest& request, IsolatedResult& r) {
  switch (request.kind) {
    case ReadKind::tensors:
      return read_tensors_here(request, r);
    case ReadKind::keras_weights:
      return read_keras_weights_here(request, r);
    case ReadKind::legacy_probe:
      return probe_legacy_here(request, r);
    case ReadKind::legacy:
      return read_legacy_here(request, r);
  }
}

// Runs the request and writes its records to fd; the reader program's whole work.
void serve(int fd, const ReadRequest& request) {
  try {
    IsolatedResult r;
    run_request(request, r);
    send(fd, r);
    put<char>(fd, 'D');
  } catch (const Error& e) {
    put<char>(fd, 'E');
    put_string(fd, e.what());
  } catch (const std::exception& e) {
    put<char>(fd, 'X');
    put_string(fd, e.what());
  } catch (...) {
    put<char>(fd, 'X');
    put_string(fd, "unknown exception");
  }
}

// ----- the parent's side ----------------------------------------------------------------------

class PipeReader {
 public:
  PipeReader(int fd, pid_t child, int silence_seconds)
      : fd_(fd), child_(child), silence_ms_(silence_seconds * 1000) {}
  // Reads n bytes; false at the end of the stream (the reader exited or died).
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
      const int rc = ::poll(&p, 1, silence_ms_);
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) {  // no byte for that long: a stuck reader
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
  int silence_ms_;
  char buf_[1 << 16];
  size_t pos_ = 0, len_ = 0;
  bool silent_ = false;
};

// Decodes the reader's records: true when the stream ended properly, with its result or its
// error (*foreign: an exception other than lockstep::Error, which names no file).
bool receive(PipeReader& in, IsolatedResult* r, std::string* error, bool* foreign) {
  for (;;) {
    char tag = 0;
    if (!in.get(&tag)) return false;
    switch (tag) {
      case 'D':
        return true;
      case 'E':
      case 'X':
        *foreign = tag == 'X';
        return in.get_string(error, 1u << 20);
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
        // The reader checked the shape against the file; these are its bytes, checked again.
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

bool executable(const std::string& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; }

// Where lockstep_h5_reader is (the order is the file's header's); "" when nowhere, with the
// places looked at in *looked.
std::string find_reader(std::string* looked) {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_reader), &info) && info.dli_fname && *info.dli_fname) {
    const fs::path dir = fs::absolute(info.dli_fname).parent_path();
    candidates.push_back((dir / "lockstep" / "lockstep_h5_reader").string());
    candidates.push_back((dir / "lockstep_h5_reader").string());
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((self.parent_path() / "lockstep_h5_reader").string());
#ifdef LOCKSTEP_H5_READER_INSTALLED
  candidates.push_back(LOCKSTEP_H5_READER_INSTALLED);
#endif
  for (auto& c : candidates) {
    if (executable(c)) return c;
    *looked += (looked->empty() ? "" : ", ") + c;
  }
  return "";
}

std::string reader_program(const std::string& path, const std::string& what) {
  if (auto set = env::text(env::h5_reader)) {
    const std::string& env = *set;
    LS_CHECK(executable(env), "'", path, "': cannot read the ", what, ": LOCKSTEP_H5_READER is '",
             env,
             "', which is not an executable program (unset it to use the installed "
             "lockstep_h5_reader)");
    return env;
  }
  static std::string looked;
  static const std::string program = find_reader(&looked);
  LS_CHECK(!program.empty(), "'", path, "': cannot read the ", what,
           ": Lockstep's HDF5 reader program lockstep_h5_reader is not installed (looked at: ",
           looked, "; set LOCKSTEP_H5_READER to its path)");
  return program;
}

// Starts the reader on `request` with its standard output on `out_fd`; its pid.
pid_t spawn_reader(const ReadRequest& request, const std::string& what, int out_fd) {
  const std::string program = reader_program(request.path, what);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGINT, SIGTERM})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string kind = kKindNames[int(request.kind)];
  const std::string budget = std::to_string(request.budget);
  const std::string parent = std::to_string(::getpid());
  std::vector<char*> argv{
      const_cast<char*>(program.c_str()),      const_cast<char*>(kind.c_str()),
      const_cast<char*>(request.path.c_str()), const_cast<char*>(budget.c_str()),
      const_cast<char*>(parent.c_str()),       nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  LS_CHECK(rc == 0, "'", request.path, "': cannot start ", program, " to read the ", what, " (",
           std::strerror(rc), "; Lockstep reads HDF5 files in a separate process)");
  return pid;
}

// Waits for the reader to end; its wait status.
int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

std::mutex& hdf5_lock() {
  static std::mutex mu;
  return mu;
}

int reader_main(int argc, char** argv) {
  // A crash is a plain death by that signal (not a sanitizer's or a crash reporter's report
  // about libhdf5, and no core file from a damaged input).
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGPIPE}) ::signal(sig, SIG_DFL);
  int kind = -1;
  for (int k = 0; argc == 5 && k < 4; ++k)
    if (std::strcmp(argv[1], kKindNames[k]) == 0) kind = k;
  if (kind < 0) {
    std::fprintf(stderr,
                 "usage: lockstep_h5_reader tensors|keras-weights|legacy-probe|legacy PATH "
                 "BUDGET PARENT_PID\n(Lockstep's HDF5 reader: the library starts it; it writes "
                 "binary records to standard output)\n");
    return 2;
  }
  // Die with the caller (a fuzzer's timeout, a kill): no orphaned reader keeps parsing. The
  // parent check closes the race where the caller died before the prctl.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != pid_t(std::strtol(argv[4], nullptr, 10))) ::_exit(4);
  // The records go to the original standard output; anything else that prints to it (a
  // library's message) goes to standard error instead of into the stream.
  const int out = ::dup(1);
  if (out < 0 || ::dup2(2, 1) < 0) return 3;
  const ReadRequest request{ReadKind(kind), argv[2], std::strtoull(argv[3], nullptr, 10)};
  serve(out, request);
  ::close(out);
  // No static destructors or atexit handlers (libhdf5's own clean-up, a leak check of what a
  // failed parse left): the result is sent, and the process ends.
  ::_exit(0);
}

// Runs the reader and collects its records; throws the reader's error or one for its death.
IsolatedResult read_isolated(const ReadRequest& request, const std::string& what) {
  // For debugging the reader (gdb, a fuzzer's view of its coverage): no separate process, and
  // no protection from libhdf5's crashes.
  static const bool in_process = [] { return env::flag(env::hdf5_in_process); }();
  if (in_process) {
    IsolatedResult r;
    run_request(request, r);
    return r;
  }
  const std::string& path = request.path;
  const int silence = reader_silence_seconds();
  int fds[2];
  LS_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "'", path, "': cannot create a pipe to read the ", what,
           " in a separate process: ", std::strerror(errno));
  pid_t pid = -1;
  try {
    pid = spawn_reader(request, what, fds[1]);
  } catch (...) {
    ::close(fds[0]), ::close(fds[1]);
    throw;
  }
  ::close(fds[1]);
  IsolatedResult r;
  std::string error;
  bool complete = false, silent = false, foreign = false;
  try {
    PipeReader in(fds[0], pid, silence);
    complete = receive(in, &r, &error, &foreign);
    silent = in.silent();
  } catch (...) {
    ::close(fds[0]);
    ::kill(pid, SIGKILL);
    reap(pid);
    throw;
  }
  ::close(fds[0]);
  if (!complete) ::kill(pid, SIGKILL);  // a malformed stream: stop whatever the reader does
  const int status = reap(pid);
  if (complete && error.empty()) return r;
  if (complete && !foreign) throw Error(error);  // the reader's own error, in its words
  if (complete)  // std::bad_alloc and the like name no file: this names it
    LS_FAIL("'", path, "': the ", what, " could not be read: ", error,
            " (the file is damaged or crafted)");
  LS_CHECK(!silent, "'", path, "': reading the ", what, " made no progress for ", silence,
           " s; stopped it (the file may be damaged; LOCKSTEP_H5_READER_SILENCE sets the limit)");
  if (WIFSIGNALED(status))
    LS_FAIL("'", path, "': the ", what, " is damaged: the HDF5 library crashed reading it (",
            signal_name(WTERMSIG(status)),
            " in the separate process Lockstep reads HDF5 files in); save or download it again");
  LS_FAIL("'", path, "': the ", what,
          " could not be read: the process reading it ended early (exit status ",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, "; the file may be damaged)");
}

}  // namespace lockstep::io::h5
