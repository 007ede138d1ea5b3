// Keras 3 files (.weights.h5, .keras) as named tensors + JSON, through HDF5's C library and
// libzip. No model knowledge here: lockstep/train/saving.h maps Models onto these.
#include "lockstep/io/keras_file.h"

#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include "io/h5_util.h"
#include "lockstep/core/file_io.h"

namespace lockstep::io {
namespace {

// The most a JSON member of a .keras file (config.json, metadata.json) may hold uncompressed;
// a 1,000-layer config is about 1 MB. Checked against the zip's declared size before reading.
constexpr uint64_t kMaxKerasJsonBytes = 64ull << 20;
// Deflate expands at most ~1032:1; a member that claims more than that over its compressed
// size (plus slack for tiny members) is a zip bomb or damage, refused before allocating.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kRatioSlackBytes = 1ull << 20;

}  // namespace

namespace h5 {

// HDF5 prints its whole error stack to stderr on every failed call unless told not to; each
// failure here becomes one lockstep::Error in our words instead. (Per thread in thread-safe
// builds, so every entry point calls it.)
void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// A name for an in-memory HDF5 file (HDF5 tells open files apart by name).
std::string memory_file_name(const char* what) {
  static std::atomic<unsigned> counter{0};
  return std::string("lockstep-memory-") + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++) + ".h5";
}

hid_t h5_type(DType t) {
  switch (t) {
    case DType::f32:
      return H5T_NATIVE_FLOAT;
    case DType::i32:
      return H5T_NATIVE_INT32;
    case DType::i64:
      return H5T_NATIVE_INT64;
    case DType::u8:
      return H5T_NATIVE_UINT8;
    default:
      return -1;
  }
}

// Creates every group on `path` (a/b/c) that does not exist yet.
void make_groups(hid_t file, const std::string& path, const std::string& file_path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += "/" + part;
    if (H5Lexists(file, cur.c_str(), H5P_DEFAULT) > 0) continue;
    H5Handle g(H5Gcreate2(file, cur.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    LS_CHECK(g.id >= 0, "'", file_path, "': cannot create HDF5 group '", cur, "'");
  }
}

void write_dataset(hid_t file, const NamedTensor& t, const std::string& file_path) {
  hid_t type = h5_type(t.value.dtype());
  LS_CHECK(type >= 0, "'", file_path, "': tensor '", t.name, "' has dtype ",
           dtype_name(t.value.dtype()), ", which .h5 files here do not store");
  auto slash = t.name.rfind('/');
  if (slash != std::string::npos) make_groups(file, t.name.substr(0, slash), file_path);
  std::vector<hsize_t> dims;
  for (int i = 0; i < t.value.rank(); ++i) dims.push_back(hsize_t(t.value.dim(i)));
  H5Handle space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  std::string name = "/" + t.name;
  H5Handle ds(H5Dcreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  LS_CHECK(ds.id >= 0, "'", file_path, "': cannot create HDF5 dataset '", t.name, "'");
  Tensor c = t.value.clone();
  LS_CHECK(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.raw()) >= 0, "'", file_path,
           "': cannot write HDF5 dataset '", t.name, "'");
}

DType dtype_of_h5(hid_t type, const std::string& file_path, const std::string& name) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT && size == 4) return DType::f32;
  if (cls == H5T_INTEGER && size == 4) return DType::i32;
  if (cls == H5T_INTEGER && size == 8) return DType::i64;
  if (cls == H5T_INTEGER && size == 1) return DType::u8;
  LS_FAIL("'", file_path, "': dataset '", name, "' has an HDF5 type (class ", int(cls), ", ", size,
          " bytes) that Lockstep does not read (float32, int32, int64, uint8)");
}

// The dataset's shape, checked: rank, int64 dims, and bytes that the file can actually hold
// (an uncompressed dataset's data lies in the file; a compressed one expands at most
// kMaxDeflateRatio times its stored size), all before anything is allocated.
Shape checked_dataset_shape(hid_t ds, DType dt, const char* name, VisitState* st) {
  const std::string what = "'" + st->file_path + "': dataset '" + name + "'";
  H5Handle space(H5Dget_space(ds), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space);
  LS_CHECK(rank >= 0 && rank <= Shape::kMaxRank, what, " has rank ", rank, " (Lockstep reads 0 to ",
           Shape::kMaxRank, "; the file is damaged or not a weights file)");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  LS_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr) == rank, what,
           ": cannot read its shape");
  Shape shape;
  for (hsize_t d : dims) {
    LS_CHECK(d <= hsize_t(INT64_MAX), what, " has a dimension of ", d, " (the file is damaged)");
    shape.push_back(int64_t(d));
  }
  const uint64_t bytes = checked_bytes(shape, dtype_size(dt), what);
  H5Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  const int filters = dcpl.id >= 0 ? H5Pget_nfilters(dcpl) : 0;
  if (filters > 0) {
    const uint64_t stored = H5Dget_storage_size(ds);
    LS_CHECK(stored <= st->file_bytes && bytes <= stored * kMaxDeflateRatio + kRatioSlackBytes,
             what, " of shape ", shape.str(), " claims ", bytes, " bytes from ", stored,
             " compressed bytes in a ", st->file_bytes, "-byte file (the file is damaged)");
  } else {
    st->unfiltered_bytes += bytes;
    LS_CHECK(st->unfiltered_bytes <= st->file_bytes, what, " of shape ", shape.str(), " needs ",
             bytes, " bytes, but the whole file is ", st->file_bytes,
             " bytes (the file is damaged or truncated)");
  }
  return shape;
}

Tensor read_dataset(hid_t loc, const char* name, VisitState* st) {
  H5Handle ds(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  LS_CHECK(ds.id >= 0, "'", st->file_path, "': cannot open dataset '", name, "'");
  H5Handle type(H5Dget_type(ds), H5Tclose);
  DType dt = dtype_of_h5(type, st->file_path, name);
  const Shape shape = checked_dataset_shape(ds, dt, name, st);
  Tensor t = Tensor::zeros(shape, dt);
  LS_CHECK(H5Dread(ds, h5_type(dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) >= 0, "'",
           st->file_path, "': cannot read dataset '", name, "' (the file is damaged)");
  return t;
}

std::string file_image(const std::string& path, const std::function<void(hid_t file)>& fill) {
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  LS_CHECK(fapl.id >= 0 && H5Pset_fapl_core(fapl, 1 << 20, 0) >= 0, "'", path,
           "': cannot set up an in-memory HDF5 file");
  hid_t id = H5Fcreate(memory_file_name("write").c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  LS_CHECK(id >= 0, "'", path, "': cannot create the HDF5 file (in memory)");
  H5Handle file(id, H5Fclose);
  fill(file);
  LS_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0, "'", path, "': HDF5 flush failed");
  const ssize_t n = H5Fget_file_image(file, nullptr, 0);
  LS_CHECK(n > 0, "'", path, "': HDF5 cannot produce the file's bytes");
  std::string image(size_t(n), '\0');
  LS_CHECK(H5Fget_file_image(file, image.data(), image.size()) == n, "'", path,
           "': HDF5 cannot produce the file's bytes");
  file.id = -1;
  LS_CHECK(H5Fclose(id) >= 0, "'", path, "': HDF5 close failed");
  return image;
}

hid_t open_read_only(const std::string& path, uint64_t* bytes) {
  silence_hdf5();
  check_regular_file(path, "weights file");  // a FIFO would hang HDF5's open
  struct stat st {};
  LS_CHECK(::stat(path.c_str(), &st) == 0, "weights file '", path, "': cannot stat it");
  LS_CHECK(H5Fis_hdf5(path.c_str()) > 0, "'", path, "' is not an HDF5 file");
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  LS_CHECK(file >= 0, "cannot open HDF5 file '", path, "' (it is damaged)");
  *bytes = uint64_t(st.st_size);
  return file;
}

}  // namespace h5

namespace {

using namespace h5;

// A walk over the file's groups in name order (pre-order, as H5Ovisit), bounded: a damaged or
// crafted file can link a group into itself, and HDF5's own H5Ovisit then recurses for minutes
// (found by keras_weights_fuzz). Each group is entered once (by object address), at most
// kMaxGroupDepth deep, and at most kMaxLinks links are looked at; Keras's files are trees a few
// levels deep with a handful of links per layer.
constexpr int kMaxGroupDepth = 64;
constexpr int64_t kMaxLinks = 1000000;

struct Walk {
  hid_t root;
  VisitState* st;
  std::set<haddr_t> entered;
  std::string prefix;  // the current group's path, "" or ending in '/'
  int depth = 0;
  int64_t links = 0;
};

herr_t walk_group(hid_t group, Walk& w);

herr_t walk_link(hid_t group, const char* name, const H5L_info_t* link, void* data) {
  auto& w = *static_cast<Walk*>(data);
  try {
    LS_CHECK(++w.links <= kMaxLinks, "'", w.st->file_path, "': more than ", kMaxLinks,
             " links in the HDF5 file (the limit; a weights file holds a few per layer)");
    if (link->type != H5L_TYPE_HARD) return 0;  // soft and external links lead nowhere we read
    H5O_info_t info;
    LS_CHECK(H5Oget_info_by_name(group, name, &info, H5P_DEFAULT) >= 0, "'", w.st->file_path,
             "': cannot read object '", w.prefix, name, "' (the file is damaged)");
    const std::string path = w.prefix + name;
    if (info.type == H5O_TYPE_DATASET) {
      w.st->out->push_back({path, read_dataset(w.root, path.c_str(), w.st)});
      return 0;
    }
    if (info.type != H5O_TYPE_GROUP || !w.entered.insert(info.addr).second) return 0;
    LS_CHECK(w.depth < kMaxGroupDepth, "'", w.st->file_path, "': groups nested more than ",
             kMaxGroupDepth, " levels deep at '", path, "' (the limit)");
    H5Handle sub(H5Gopen2(group, name, H5P_DEFAULT), H5Gclose);
    LS_CHECK(sub.id >= 0, "'", w.st->file_path, "': cannot open group '", path, "'");
    const std::string outer = w.prefix;
    w.prefix = path + "/";
    ++w.depth;
    const herr_t rc = walk_group(sub, w);
    --w.depth;
    w.prefix = outer;
    return rc;
  } catch (const std::exception& e) {
    w.st->error = e.what();
    return -1;
  }
}

herr_t walk_group(hid_t group, Walk& w) {
  hsize_t next = 0;
  return H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &next, walk_link, &w);
}

// Every dataset of an open HDF5 file of `file_bytes` bytes.
std::vector<NamedTensor> read_open_h5(hid_t file, const std::string& path, uint64_t file_bytes) {
  std::vector<NamedTensor> out;
  VisitState st{path, &out, "", file_bytes, 0};
  Walk w{file, &st, {}, "", 0, 0};
  const herr_t rc = walk_group(file, w);
  if (!st.error.empty()) LS_FAIL(st.error);
  LS_CHECK(rc >= 0, "'", path, "': cannot walk the HDF5 file (it is damaged)");
  return out;
}

bool has_hdf5_signature(const std::string& bytes) {
  static const char kSig[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  // The superblock sits at 0 or after a user block of 512, 1024, 2048, ... bytes.
  for (size_t at = 0; at + 8 <= bytes.size(); at = at ? at * 2 : 512)
    if (std::memcmp(bytes.data() + at, kSig, 8) == 0) return true;
  return false;
}

// The tensors of an HDF5 file image held in memory (no file is written).
std::vector<NamedTensor> read_h5_image(const std::string& image, const std::string& path) {
  LS_CHECK(has_hdf5_signature(image), "'", path, "' is not an HDF5 file");
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  LS_CHECK(fapl.id >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0 &&
               H5Pset_file_image(fapl, const_cast<char*>(image.data()), image.size()) >= 0,
           "'", path, "': cannot set up an in-memory HDF5 file");
  H5Handle file(H5Fopen(memory_file_name("read").c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  LS_CHECK(file.id >= 0, "'", path, "': cannot open the HDF5 file (it is damaged)");
  return read_open_h5(file, path, image.size());
}

// The HDF5 file image of `tensors`, built in memory (HDF5's core driver, no backing store).
std::string h5_image(const std::vector<NamedTensor>& tensors,
                     const std::vector<std::string>& groups, const std::string& path) {
  return file_image(path, [&](hid_t file) {
    for (auto& g : groups) make_groups(file, g, path);
    for (auto& t : tensors) write_dataset(file, t, path);
  });
}

// One member of an open zip archive as bytes.
std::string zip_member(zip_t* z, const std::string& path, const std::string& member,
                       uint64_t max_bytes) {
  zip_stat_t st;
  zip_stat_init(&st);
  LS_CHECK(zip_stat(z, member.c_str(), 0, &st) == 0, "'", path,
           "': not a .keras file: the zip has no '", member, "'");
  // Sizes come from the zip's directory: checked before the buffer is allocated.
  LS_CHECK((st.valid & ZIP_STAT_SIZE) && (st.valid & ZIP_STAT_COMP_SIZE), "'", path, "': '", member,
           "' has no size in the zip's directory (the file is damaged)");
  LS_CHECK(st.size <= max_bytes, "'", path, "': '", member, "' is ", st.size,
           " bytes uncompressed, more than the limit of ", max_bytes, " bytes for it");
  LS_CHECK(st.size <= st.comp_size * kMaxDeflateRatio + kRatioSlackBytes, "'", path, "': '", member,
           "' claims ", st.size, " bytes from ", st.comp_size,
           " compressed bytes, more than deflate can expand to (the file is damaged)");
  zip_file_t* f = zip_fopen(z, member.c_str(), 0);
  LS_CHECK(f, "'", path, "': cannot open '", member, "' in the zip");
  std::string bytes(size_t(st.size), '\0');
  zip_int64_t n = zip_fread(f, bytes.data(), st.size);
  zip_fclose(f);
  LS_CHECK(n == zip_int64_t(st.size), "'", path, "': '", member, "' is truncated in the zip");
  // libzip checks the CRC only when a read runs past the end; check it here, so that a corrupt
  // member is this error and not garbage handed to the JSON or HDF5 parsers (fuzz finding).
  if (st.valid & ZIP_STAT_CRC)
    LS_CHECK(uint32_t(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size()))) ==
                 uint32_t(st.crc),
             "'", path, "': '", member, "' is corrupt in the zip (CRC mismatch)");
  return bytes;
}

void zip_add(zip_t* z, const std::string& path, const std::string& member,
             const std::string& bytes) {
  void* copy = malloc(bytes.size() ? bytes.size() : 1);
  memcpy(copy, bytes.data(), bytes.size());
  zip_source_t* src = zip_source_buffer(z, copy, bytes.size(), 1);
  LS_CHECK(src, "'", path, "': cannot add '", member, "' to the zip");
  if (zip_file_add(z, member.c_str(), src, ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8) < 0) {
    zip_source_free(src);
    LS_FAIL("'", path, "': cannot add '", member, "' to the zip: ", zip_strerror(z));
  }
}

// The bytes of a zip (built in memory by libzip) holding `members` in order.
std::string zip_image(const std::string& path,
                      const std::vector<std::pair<std::string, std::string>>& members) {
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_buffer_create(nullptr, 0, 0, &ze);
  LS_CHECK(src, "'", path, "': cannot create the zip in memory");
  zip_source_keep(src);  // outlives zip_close, which writes into it
  zip_t* z = zip_open_from_source(src, ZIP_TRUNCATE, &ze);
  if (!z) {
    zip_source_free(src);
    LS_FAIL("'", path, "': cannot create the zip in memory: ", zip_error_strerror(&ze));
  }
  try {
    for (auto& [name, bytes] : members) zip_add(z, path, name, bytes);
  } catch (...) {
    zip_discard(z);
    zip_source_free(src);
    throw;
  }
  if (zip_close(z) != 0) {
    const std::string why = zip_strerror(z);
    zip_discard(z);
    zip_source_free(src);
    LS_FAIL("'", path, "': cannot write the zip: ", why);
  }
  zip_stat_t st;
  zip_stat_init(&st);
  std::string image;
  bool ok = zip_source_open(src) == 0;
  if (ok) {
    ok = zip_source_stat(src, &st) == 0 && (st.valid & ZIP_STAT_SIZE);
    if (ok) {
      image.resize(size_t(st.size));
      ok = zip_source_read(src, image.data(), st.size) == zip_int64_t(st.size);
    }
    zip_source_close(src);
  }
  zip_source_free(src);
  LS_CHECK(ok, "'", path, "': cannot read back the zip built in memory");
  return image;
}

}  // namespace

using namespace h5;

void write_h5_tensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::vector<std::string>& groups) {
  std::string image;
  {
    std::lock_guard<std::mutex> lock(hdf5_lock());
    silence_hdf5();
    image = h5_image(tensors, groups, path);
  }
  write_file_atomic(path, image, "weights file");
}

// Parsed in a child process (read_isolated): a crafted file can crash libhdf5 itself.
std::vector<NamedTensor> read_h5_tensors(const std::string& path) {
  return read_isolated(path, "weights file",
                       [&](IsolatedResult& r) {
                         uint64_t bytes = 0;
                         H5Handle file(open_read_only(path, &bytes), H5Fclose);
                         r.tensors = read_open_h5(file, path, bytes);
                       })
      .tensors;
}

void write_keras_archive(const std::string& path, const KerasArchive& archive) {
  std::string weights;
  {
    std::lock_guard<std::mutex> lock(hdf5_lock());
    silence_hdf5();
    weights = h5_image(archive.weights, archive.groups, path + ": model.weights.h5");
  }
  const std::string zip = zip_image(path, {{"metadata.json", archive.metadata.dump()},
                                           {"config.json", archive.config.dump()},
                                           {"model.weights.h5", std::move(weights)}});
  write_file_atomic(path, zip, "model file");
}

KerasArchive read_keras_archive(const std::string& path) {
  check_regular_file(path, "model file");  // libzip's open of a FIFO would hang
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  LS_CHECK(z, "'", path, "' is not a .keras file: not a readable zip (libzip error ", err, ")");
  KerasArchive a;
  std::string weights;
  try {
    a.config = parse_json(zip_member(z, path, "config.json", kMaxKerasJsonBytes),
                          "'" + path + "': config.json");
    a.metadata = parse_json(zip_member(z, path, "metadata.json", kMaxKerasJsonBytes),
                            "'" + path + "': metadata.json");
    weights = zip_member(z, path, "model.weights.h5", UINT64_MAX);
  } catch (...) {
    zip_discard(z);
    throw;
  }
  zip_discard(z);
  try {
    // In a child process (read_isolated): a crafted file can crash libhdf5 itself.
    a.weights = read_isolated(path, "weights member (model.weights.h5)", [&](IsolatedResult& r) {
                  silence_hdf5();
                  r.tensors = read_h5_image(weights, path + ": model.weights.h5");
                }).tensors;
  } catch (const Error& e) {
    LS_FAIL("'", path, "': model.weights.h5: ", e.what());
  }
  return a;
}

}  // namespace lockstep::io
