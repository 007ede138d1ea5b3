// cache: in memory, or in a file that later runs reuse.
//
// File format (little endian, native sizes):
//   header  "LSDSCACH" | u32 version | u64 fingerprint
//   element u32 parts, then per part: u8 kind;
//           tensor: u8 dtype, u8 rank, i64 dims[rank], raw bytes
//           string: u64 length, bytes;   strings: u64 count, then (u64 length, bytes) each
//   footer  "LSDSEND1" | u64 elements | u64 payload bytes | u64 payload hash
// A file is reused only if the header's fingerprint matches the pipeline, the footer is present
// and the sizes agree; it is written to a temporary name and renamed when the pass completes,
// so an interrupted pass never leaves a file that looks complete.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "data/dataset_node.h"

namespace lockstep::data {

namespace {

constexpr char kMagic[8] = {'L', 'S', 'D', 'S', 'C', 'A', 'C', 'H'};
constexpr char kEndMagic[8] = {'L', 'S', 'D', 'S', 'E', 'N', 'D', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 8;
constexpr size_t kFooterBytes = 8 + 8 + 8 + 8;

// ----- file I/O ----------------------------------------------------------------------------

class Writer {
 public:
  Writer(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "wb");
    LS_CHECK(f_, "cache: cannot create '", path, "': ", std::strerror(errno),
             "; check that the directory exists and is writable");
  }
  ~Writer() {
    if (f_) std::fclose(f_);
  }
  void raw(const void* p, size_t n, bool hashed = true) {
    if (n && std::fwrite(p, 1, n, f_) != n)
      LS_FAIL("cache: writing '", path_, "' failed: ", std::strerror(errno), " (disk full?)");
    if (hashed) {
      hash_.bytes(p, n);
      payload_ += n;
    }
  }
  template <typename T>
  void pod(T v, bool hashed = true) {
    raw(&v, sizeof v, hashed);
  }
  void close() {
    LS_CHECK(std::fflush(f_) == 0, "cache: flushing '", path_, "' failed: ", std::strerror(errno));
    ::fsync(fileno(f_));
    std::fclose(f_);
    f_ = nullptr;
  }
  uint64_t payload() const { return payload_; }
  uint64_t hash() const { return hash_.digest(); }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  Hasher hash_;
  uint64_t payload_ = 0;
};

class Reader {
 public:
  Reader(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    LS_CHECK(f_, "cache: cannot open '", path, "': ", std::strerror(errno));
  }
  ~Reader() {
    if (f_) std::fclose(f_);
  }
  void raw(void* p, size_t n, bool hashed = true) {
    if (n && std::fread(p, 1, n, f_) != n)
      LS_FAIL("cache: '", path_,
              "' ended early (truncated or changed while reading); delete it "
              "to rebuild");
    if (hashed) hash_.bytes(p, n);
  }
  template <typename T>
  T pod(bool hashed = true) {
    T v;
    raw(&v, sizeof v, hashed);
    return v;
  }
  void seek(long off) { std::fseek(f_, off, SEEK_SET); }
  uint64_t hash() const { return hash_.digest(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  Hasher hash_;
};

void write_element(Writer& w, const Element& e) {
  w.pod<uint32_t>(uint32_t(e.size()));
  for (const Component& c : e.parts) {
    if (auto* t = std::get_if<Tensor>(&c)) {
      w.pod<uint8_t>(0);
      w.pod<uint8_t>(uint8_t(t->dtype()));
      w.pod<uint8_t>(uint8_t(t->rank()));
      for (int64_t d : t->shape()) w.pod<int64_t>(d);
      Tensor ct = t->contiguous();
      w.raw(ct.raw(), ct.nbytes());
    } else if (auto* s = std::get_if<std::string>(&c)) {
      w.pod<uint8_t>(1);
      w.pod<uint64_t>(s->size());
      w.raw(s->data(), s->size());
    } else {
      const Strings& ss = std::get<Strings>(c);
      w.pod<uint8_t>(2);
      w.pod<uint64_t>(ss.size());
      for (const auto& s : ss) {
        w.pod<uint64_t>(s.size());
        w.raw(s.data(), s.size());
      }
    }
  }
}

Element read_element(Reader& r) {
  Element e;
  const uint32_t n = r.pod<uint32_t>();
  LS_CHECK(n < (1u << 20), "cache: '", r.path(), "' is corrupt (bad element); delete it");
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t kind = r.pod<uint8_t>();
    if (kind == 0) {
      const uint8_t dt = r.pod<uint8_t>();
      const uint8_t rank = r.pod<uint8_t>();
      LS_CHECK(rank <= Shape::kMaxRank && dt <= uint8_t(DType::u8), "cache: '", r.path(),
               "' is corrupt (bad tensor header); delete it");
      Shape shape;
      for (int d = 0; d < rank; ++d) shape.push_back(r.pod<int64_t>());
      Tensor t = Tensor::empty(shape, DType(dt));
      r.raw(t.raw(), t.nbytes());
      e.parts.emplace_back(std::move(t));
    } else if (kind == 1) {
      std::string s(r.pod<uint64_t>(), '\0');
      r.raw(s.data(), s.size());
      e.parts.emplace_back(std::move(s));
    } else {
      LS_CHECK(kind == 2, "cache: '", r.path(), "' is corrupt (bad component kind); delete it");
      Strings ss(r.pod<uint64_t>());
      for (auto& s : ss) {
        s.assign(r.pod<uint64_t>(), '\0');
        r.raw(s.data(), s.size());
      }
      e.parts.emplace_back(std::move(ss));
    }
  }
  return e;
}

// Why the file at `path` cannot be reused, or "" if it can.
std::string check_cache_file(const std::string& path, uint64_t fingerprint, uint64_t* elements) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return "missing";
  if (size < kHeaderBytes + kFooterBytes) return "incomplete (truncated)";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::string("unreadable (") + std::strerror(errno) + ")";
  char magic[8], end_magic[8];
  uint32_t version = 0;
  uint64_t fp = 0, count = 0, payload = 0;
  bool ok = std::fread(magic, 1, 8, f) == 8 && std::fread(&version, 4, 1, f) == 1 &&
            std::fread(&fp, 8, 1, f) == 1;
  ok = ok && std::fseek(f, long(size - kFooterBytes), SEEK_SET) == 0 &&
       std::fread(end_magic, 1, 8, f) == 8 && std::fread(&count, 8, 1, f) == 1 &&
       std::fread(&payload, 8, 1, f) == 1;
  std::fclose(f);
  if (!ok || std::memcmp(magic, kMagic, 8) != 0) return "not a Lockstep cache file";
  if (version != kVersion) return "from another cache format version";
  if (fp != fingerprint) return "stale (built from a different pipeline or input files)";
  if (std::memcmp(end_magic, kEndMagic, 8) != 0 || payload != size - kHeaderBytes - kFooterBytes)
    return "incomplete (truncated or interrupted)";
  *elements = count;
  return "";
}

// ----- nodes -------------------------------------------------------------------------------

struct MemoryCache {
  std::mutex mu;
  bool complete = false;
  std::shared_ptr<const std::vector<Element>> elements;
};

class CacheNode : public DatasetNode {
 public:
  NodePtr with_inputs(std::vector<NodePtr> in, const std::string& variant) const override {
    std::string file = file_;  // its own memory cache / cache file: it caches other elements
    if (!file.empty()) file.append(".").append(variant);
    return std::make_shared<CacheNode>(in.at(0), std::move(file));
  }
  CacheNode(NodePtr in, std::string filename) : input_(std::move(in)), file_(std::move(filename)) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  std::string label() const override {
    return file_.empty() ? "cache(memory)" : "cache(" + file_ + ")";
  }
  std::vector<NodePtr> inputs() const override { return {input_}; }

  NodePtr input_;
  std::string file_;
  std::shared_ptr<MemoryCache> memory_ = std::make_shared<MemoryCache>();
};

// Replays a completed in-memory cache.
struct MemoryReplayIt : IteratorNode {
  std::shared_ptr<const std::vector<Element>> elements;
  size_t i = 0;
  bool next(Element& out) override {
    if (i >= elements->size()) return false;
    out = (*elements)[i++];
    return true;
  }
};

// Passes the input through while recording; publishes the recording if the pass completes
// without an error.
struct MemoryFillIt : IteratorNode {
  std::unique_ptr<IteratorNode> in;
  std::shared_ptr<MemoryCache> cache;
  std::vector<Element> recorded;
  bool failed = false, done = false;
  bool next(Element& out) override {
    if (done) return false;
    bool got;
    try {
      got = in->next(out);
    } catch (...) {
      failed = true;  // a pass with a dropped element must not become the cache
      throw;
    }
    if (got) {
      recorded.push_back(out);
      return true;
    }
    done = true;
    if (!failed) {
      std::lock_guard<std::mutex> lock(cache->mu);
      if (!cache->complete) {
        cache->elements = std::make_shared<const std::vector<Element>>(std::move(recorded));
        cache->complete = true;
      }
    }
    return false;
  }
  void report(std::vector<std::string>& lines) const override { in->report(lines); }
};

struct FileReplayIt : IteratorNode {
  std::unique_ptr<Reader> reader;
  uint64_t left = 0;
  uint64_t expected_hash = 0;
  bool next(Element& out) override {
    if (left == 0) return false;
    out = read_element(*reader);
    if (--left == 0) {
      // The footer's hash covers the whole payload: catches a file altered after writing.
      const uint64_t got = reader->hash();
      LS_CHECK(got == expected_hash, "cache: '", reader->path(),
               "' is corrupt (payload hash mismatch); delete it to rebuild");
    }
    return true;
  }
};

std::atomic<uint64_t> g_tmp_counter{0};

struct FileFillIt : IteratorNode {
  std::unique_ptr<IteratorNode> in;
  std::string path, tmp;
  std::unique_ptr<Writer> writer;
  uint64_t count = 0;
  bool failed = false, done = false;
  ~FileFillIt() override {
    if (writer) {
      writer.reset();
      std::remove(tmp.c_str());  // abandoned pass: never leave a partial file behind
    }
  }
  bool next(Element& out) override {
    if (done) return false;
    bool got;
    try {
      got = in->next(out);
    } catch (...) {
      failed = true;
      throw;
    }
    if (got) {
      if (writer) {
        write_element(*writer, out);
        ++count;
      }
      return true;
    }
    done = true;
    if (writer && !failed) {
      const uint64_t payload = writer->payload(), hash = writer->hash();
      writer->raw(kEndMagic, 8, false);
      writer->pod<uint64_t>(count, false);
      writer->pod<uint64_t>(payload, false);
      writer->pod<uint64_t>(hash, false);
      writer->close();
      writer.reset();
      std::error_code ec;
      std::filesystem::rename(tmp, path, ec);
      if (ec) {
        std::remove(tmp.c_str());
        LS_FAIL("cache: cannot rename '", tmp, "' to '", path, "': ", ec.message());
      }
    } else if (writer) {
      std::fprintf(stderr,
                   "lockstep.data warning: cache '%s' not written: elements failed during the "
                   "pass\n",
                   path.c_str());
      writer.reset();
      std::remove(tmp.c_str());
    }
    return false;
  }
  void report(std::vector<std::string>& lines) const override { in->report(lines); }
};

std::unique_ptr<IteratorNode> CacheNode::make_iterator(std::shared_ptr<IteratorContext> ctx,
                                                       uint64_t stream) const {
  if (file_.empty()) {
    {
      std::lock_guard<std::mutex> lock(memory_->mu);
      if (memory_->complete) {
        auto it = std::make_unique<MemoryReplayIt>();
        it->elements = memory_->elements;
        return it;
      }
    }
    auto it = std::make_unique<MemoryFillIt>();
    it->in = input_->make_iterator(ctx, stream);
    it->cache = memory_;
    return it;
  }
  // The input's fingerprint, not this node's: moving the cache file does not invalidate it.
  const uint64_t fp = input_->fingerprint();
  uint64_t elements = 0;
  const std::string why = check_cache_file(file_, fp, &elements);
  if (why.empty()) {
    auto it = std::make_unique<FileReplayIt>();
    it->reader = std::make_unique<Reader>(file_);
    uint64_t file_size = std::filesystem::file_size(file_);
    // Read the expected payload hash from the footer, then position after the header.
    it->reader->seek(long(file_size - 8));
    it->expected_hash = it->reader->pod<uint64_t>(false);
    it->reader->seek(long(kHeaderBytes));
    it->left = elements;
    return it;
  }
  if (why != "missing")
    std::fprintf(stderr, "lockstep.data: cache file '%s' is %s; rebuilding it\n", file_.c_str(),
                 why.c_str());
  auto it = std::make_unique<FileFillIt>();
  it->in = input_->make_iterator(ctx, stream);
  it->path = file_;
  it->tmp = file_ + ".tmp-" + std::to_string(::getpid()) + "-" +
            std::to_string(g_tmp_counter.fetch_add(1));
  it->writer = std::make_unique<Writer>(it->tmp);
  it->writer->raw(kMagic, 8, false);
  it->writer->pod<uint32_t>(kVersion, false);
  it->writer->pod<uint64_t>(fp, false);
  return it;
}

}  // namespace

Dataset Dataset::cache(const std::string& filename) const {
  node();
  return wrap(std::make_shared<CacheNode>(node_, filename));
}

}  // namespace lockstep::data
