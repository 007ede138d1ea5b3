// Whole-file reads and writes that a hostile path or a full disk cannot turn into a hang, an
// unbounded allocation or a destroyed file.
//
// read_regular_file: opens without blocking (a FIFO never hangs the open), refuses anything
// that is not a regular file (FIFO, device, socket, folder: the error names the kind), and
// refuses a file larger than `max_bytes` before reading it; the read is capped at the size
// fstat reported, so a file that grows while it is read cannot grow the buffer.
//
// write_file_atomic: replaces a regular file (or creates one) so that a failure at any step
// leaves the previous file byte-identical: the bytes go to a temporary created with O_EXCL and
// O_NOFOLLOW in the target's folder ("<path>.tmp-<pid>-<n>", never a link someone planted), are
// fsync'ed, and the temporary is renamed over the target, then the folder is fsync'ed. Every
// write, fsync, close and rename is checked; on failure the temporary is removed and the error
// names the file and the system's reason. Before it writes, a save removes the temporaries of
// this target that killed saves left behind (their PID gone and no lock held on them; a live
// process's temporary is never touched). Targets that are not regular files are refused (a
// device such as /dev/full or /dev/null, a FIFO, a folder) — renaming over them would replace the
// device node — except the streams a user means to write to: /dev/stdout, /dev/stderr, /dev/fd/N
// and /proc/self/fd/N get a plain, checked write.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

/// The whole contents of the regular file at `path` (see above: no FIFO, device or folder, and
/// an error when it is larger than `max_bytes`). `what` names the file's role in errors ("model
/// file", "image file", "ONNX export").
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& what);

/// Fails (naming `what`, the path and the kind of file) unless `path` is a regular file (links
/// followed), opening it without blocking so that a FIFO cannot hang the check.
void check_regular_file(const std::string& path, const std::string& what);

/// Replaces (or creates) the file at `path` with `bytes` bytes from `data`, atomically (see
/// above: a failure leaves the previous file byte-identical); `what` names the file's role in
/// errors. Throws lockstep::Error naming the path and the system's reason.
void write_file_atomic(const std::string& path, const void* data, size_t bytes,
                       const std::string& what);
/// write_file_atomic of a string's bytes.
inline void write_file_atomic(const std::string& path, std::string_view bytes,
                              const std::string& what) {
  write_file_atomic(path, bytes.data(), bytes.size(), what);
}
/// write_file_atomic of a byte vector.
inline void write_file_atomic(const std::string& path, const std::vector<uint8_t>& bytes,
                              const std::string& what) {
  write_file_atomic(path, bytes.data(), bytes.size(), what);
}

/// Writes all `n` bytes to `fd`, retrying short writes and EINTR: the one write loop of the tree.
/// `socket`: send() with MSG_NOSIGNAL (a peer that hung up is an error, not SIGPIPE). Returns 0,
/// or the errno of the failure (EIO when a write made no progress). Does not throw: a forked
/// child or a network thread decides what a failure means.
int write_fully(int fd, const void* data, size_t n, bool socket = false);
/// write_fully, throwing on failure: an error naming `what` and `path`, the system's reason, and
/// on a full disk or a file-size limit that the previous file, if any, is unchanged.
void write_all(int fd, const void* data, size_t n, const std::string& what,
               const std::string& path);

/// The kind of file at `path` in words ("a FIFO", "a character device", "a folder"), following
/// links; "missing" when it does not exist.
std::string file_kind(const std::string& path);

/// Removes the temporaries that killed saves of `path` left beside it: the files named
/// "<path's file name>.tmp-REST" for which `pid_of(REST)` returns a process id (0: not one of
/// this save's temporaries) whose process is gone, and that no process holds locked (a save
/// holds an exclusive flock on its temporary until the rename, which also protects a save on
/// another host of a shared filesystem). Best effort: errors are ignored. write_file_atomic and
/// the .lsckpt writer call it with their own naming.
void remove_stale_temporaries(const std::string& path,
                              const std::function<long(const std::string& rest)>& pid_of);

}  // namespace lockstep
