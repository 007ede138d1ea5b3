// Checkpoint files: atomic write and verified read of named tensors plus JSON metadata.
#include "lockstep/io/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "lockstep/core/file_io.h"

namespace lockstep::io {

namespace {

constexpr char kMagic[8] = {'L', 'S', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr char kEnd[8] = {'L', 'S', 'C', 'K', 'E', 'N', 'D', '\0'};

class Writer {
 public:
  void bytes(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  template <typename T>
  void pod(T v) {
    bytes(&v, sizeof v);
  }
  std::vector<char>& buffer() { return buf_; }

 private:
  std::vector<char> buf_;
};

class Reader {
 public:
  Reader(const std::vector<char>& b, const std::string& path) : b_(b), path_(path) {}
  const char* bytes(size_t n, const char* what) {
    LS_CHECK(n <= b_.size() - pos_, "checkpoint '", path_, "': truncated while reading ", what,
             " (file has ", b_.size(), " bytes; it is damaged or incomplete)");
    const char* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T pod(const char* what) {
    T v;
    std::memcpy(&v, bytes(sizeof v, what), sizeof v);
    return v;
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<char>& b_;
  const std::string& path_;
  size_t pos_ = 0;
};

// The temporary a save writes before renaming it into place: "<path>.tmp-<pid>".
std::string temporary_name(const std::string& path, long pid) {
  return path + ".tmp-" + std::to_string(pid);
}

// The .lsckpt writer's temporaries: "<path>.tmp-<pid>" (removed by remove_stale_temporaries,
// core/file_io.h, when a killed save left one).
long checkpoint_temporary_pid(const std::string& rest) {
  if (rest.empty() || rest.size() > 9 || rest.find_first_not_of("0123456789") != std::string::npos)
    return 0;
  return std::stol(rest);
}

// Reads a whole file with POSIX calls (no stream exceptions); errors name the file.
std::vector<char> read_whole_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  LS_CHECK(fd >= 0, "checkpoint '", path, "': cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    LS_FAIL("checkpoint '", path,
            "': ", dir ? "is a directory, not a checkpoint file" : "is not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::vector<char> buf;
  try {
    buf.resize(size_t(st.st_size));
  } catch (const std::exception&) {
    ::close(fd);
    LS_FAIL("checkpoint '", path, "': cannot hold its ", st.st_size, " bytes in memory");
  }
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      LS_FAIL("checkpoint '", path, "': read failed: ", std::strerror(e));
    }
    if (n == 0) break;
    got += size_t(n);
  }
  ::close(fd);
  buf.resize(got);
  return buf;
}

}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointFile& file) {
  Writer w;
  w.bytes(kMagic, 8);
  std::string meta = file.metadata.dump();
  w.pod<uint64_t>(meta.size());
  w.bytes(meta.data(), meta.size());
  w.pod<uint64_t>(file.tensors.size());
  for (auto& t : file.tensors) {
    Tensor c = t.value.contiguous();
    w.pod<uint32_t>(uint32_t(t.name.size()));
    w.bytes(t.name.data(), t.name.size());
    w.pod<uint8_t>(uint8_t(c.dtype()));
    w.pod<uint8_t>(uint8_t(c.rank()));
    for (int d = 0; d < c.rank(); ++d) w.pod<int64_t>(c.dim(d));
    w.pod<uint64_t>(c.nbytes());
    w.bytes(c.raw(), c.nbytes());
  }
  auto& buf = w.buffer();
  uint32_t crc = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(buf.data()), uInt(buf.size())));
  w.pod<uint32_t>(crc);
  w.bytes(kEnd, 8);

  namespace fs = std::filesystem;
  fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
  }
  struct stat target_st {};
  LS_CHECK(::stat(path.c_str(), &target_st) != 0 || S_ISREG(target_st.st_mode), "checkpoint '",
           path, "': is ", file_kind(path), ", not a regular file (a checkpoint is saved by ",
           "renaming a temporary over it; name a file path)");
  remove_stale_temporaries(path, checkpoint_temporary_pid);
  std::string tmp = temporary_name(path, long(::getpid()));
  // Never written through a link planted at the temporary's name: the name is removed (it is
  // this process's own, by its PID) and created anew, exclusively, without following links.
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  LS_CHECK(fd >= 0, "checkpoint '", path, "': cannot create '", tmp, "': ", std::strerror(errno),
           " (does the folder exist and is it writable?)");
  ::flock(fd, LOCK_EX | LOCK_NB);  // marks the temporary as in use until it is closed
  try {
    write_all(fd, buf.data(), buf.size(), "checkpoint", path);
    LS_CHECK(::fsync(fd) == 0, "checkpoint '", path, "': fsync failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    LS_FAIL("checkpoint '", path, "': close failed: ", std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    LS_FAIL("checkpoint '", path,
            "': cannot rename the temporary file into place: ", std::strerror(e));
  }
  std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) ::fsync(dfd), ::close(dfd);  // make the rename durable
}

CheckpointFile read_checkpoint_file(const std::string& path) {
  const std::vector<char> buf = read_whole_file(path);
  LS_CHECK(buf.size() >= 8 + 8 + 8 + 4 + 8 && std::memcmp(buf.data(), kMagic, 7) == 0,
           "checkpoint '", path,
           "': not a Lockstep checkpoint (bad magic or too short: ", buf.size(), " bytes)");
  LS_CHECK(buf[7] == kMagic[7], "checkpoint '", path, "': format version ", int(buf[7]),
           " is not supported (this build reads version ", int(kMagic[7]), ")");
  LS_CHECK(std::memcmp(buf.data() + buf.size() - 8, kEnd, 8) == 0, "checkpoint '", path,
           "': the end marker is missing (the file is truncated or was not completely written)");
  const size_t body = buf.size() - 12;
  uint32_t stored;
  std::memcpy(&stored, buf.data() + body, 4);
  uint32_t crc = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(buf.data()), uInt(body)));
  LS_CHECK(crc == stored, "checkpoint '", path, "': checksum mismatch (the file is corrupted)");

  CheckpointFile f;
  Reader r(buf, path);
  r.bytes(8, "magic");
  uint64_t meta_bytes = r.pod<uint64_t>("metadata size");
  const char* meta = r.bytes(size_t(meta_bytes), "metadata");
  try {
    f.metadata = parse_json(std::string_view(meta, size_t(meta_bytes)), "metadata");
  } catch (const std::exception& e) {
    LS_FAIL("checkpoint '", path, "': metadata is not valid JSON: ", e.what());
  }
  uint64_t count = r.pod<uint64_t>("tensor count");
  for (uint64_t i = 0; i < count; ++i) {
    NamedTensor t;
    uint32_t nb = r.pod<uint32_t>("tensor name size");
    t.name.assign(r.bytes(nb, "tensor name"), nb);
    uint8_t dt = r.pod<uint8_t>("dtype");
    LS_CHECK(dt <= uint8_t(DType::u8), "checkpoint '", path, "': tensor '", t.name,
             "' has unknown dtype ", int(dt));
    uint8_t rank = r.pod<uint8_t>("rank");
    LS_CHECK(rank <= Shape::kMaxRank, "checkpoint '", path, "': tensor '", t.name, "' has rank ",
             int(rank), " (at most ", Shape::kMaxRank, "; the file is damaged)");
    std::vector<int64_t> dims;
    // Sizes are checked before anything is allocated: a valid checksum does not make them sane.
    for (int d = 0; d < rank; ++d) {
      const int64_t dim = r.pod<int64_t>("dims");
      LS_CHECK(dim >= 0, "checkpoint '", path, "': tensor '", t.name, "' has a negative dimension ",
               dim, " (the file is damaged)");
      dims.push_back(dim);
    }
    const Shape shape(dims);
    uint64_t nbytes = 0;
    try {
      nbytes = checked_bytes(shape, dtype_size(DType(dt)), "tensor '" + t.name + "'");
    } catch (const Error&) {
      LS_FAIL("checkpoint '", path, "': tensor '", t.name, "' has an impossible shape ",
              shape.str(), " (its size overflows; the file is damaged)");
    }
    uint64_t bytes = r.pod<uint64_t>("data size");
    LS_CHECK(bytes == nbytes, "checkpoint '", path, "': tensor '", t.name, "' has ", bytes,
             " data bytes for shape ", shape.str(), " (", nbytes, " expected)");
    LS_CHECK(bytes <= body - r.pos(), "checkpoint '", path, "': tensor '", t.name, "' of shape ",
             shape.str(), " needs ", bytes, " bytes but the file holds only ", body - r.pos(),
             " more (it is damaged)");
    t.value = Tensor::empty(shape, DType(dt));
    std::memcpy(t.value.raw(), r.bytes(size_t(bytes), "tensor data"), size_t(bytes));
    f.tensors.push_back(std::move(t));
  }
  LS_CHECK(r.pos() == body, "checkpoint '", path, "': ", body - r.pos(),
           " unexpected bytes after the tensors");
  return f;
}

}  // namespace lockstep::io
