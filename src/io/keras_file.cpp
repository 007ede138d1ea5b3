// Keras 3 files (.weights.h5, .keras) as named tensors + JSON, through HDF5's C library and
// libzip. No model knowledge here: lockstep/saving/saving.h maps Models onto these.
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
  // Each dataset's data lies in the file, once: the stored bytes of all datasets read fit in
  // it. A dataset read twice (hard links to it, a weight name listed twice) counts twice, so
  // one compressed dataset cannot be decoded over and over.
  const uint64_t stored = filters > 0 ? H5Dget_storage_size(ds) : bytes;
  if (filters > 0)
    LS_CHECK(stored <= st->file_bytes && bytes <= stored * kMaxDeflateRatio + kRatioSlackBytes,
             what, " of shape ", shape.str(), " claims ", bytes, " bytes from ", stored,
             " compressed bytes in a ", st->file_bytes, "-byte file (the file is damaged)");
  LS_CHECK(stored <= st->file_bytes, what, " of shape ", shape.str(), " needs ", stored,
           " bytes, but the whole file is ", st->file_bytes,
           " bytes (the file is damaged or truncated)");
  LS_CHECK(stored <= st->file_bytes - st->stored_bytes, what, " of shape ", shape.str(), " needs ",
           stored, " bytes of the file, but the datasets read so far already take ",
           st->stored_bytes, " of its ", st->file_bytes,
           " bytes (the file is damaged, or it references one dataset many times)");
  st->stored_bytes += stored;
  st->decoded_bytes += bytes;
  LS_CHECK(st->budget == 0 || st->decoded_bytes <= st->budget, what, " of shape ", shape.str(),
           " brings the weights read to ", st->decoded_bytes, " bytes, more than the ", st->budget,
           " bytes the model's config implies (the file references data many times, or it is "
           "not this model's)");
  return shape;
}

// Refuses data from outside the file: external storage (raw bytes of another file, such as
// /etc/passwd) and virtual datasets (mapped from other files).
void check_data_is_inside(hid_t ds, const char* name, VisitState* st) {
  H5Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  LS_CHECK(dcpl.id >= 0, "'", st->file_path, "': cannot read dataset '", name,
           "' (the file is damaged)");
  LS_CHECK(H5Pget_external_count(dcpl) == 0, "'", st->file_path, "': dataset '", name,
           "' keeps its data in external files; Lockstep reads no data from outside the file "
           "it is given (a weights file holds its data itself)");
  LS_CHECK(H5Pget_layout(dcpl) != H5D_VIRTUAL, "'", st->file_path, "': dataset '", name,
           "' is a virtual dataset mapped from other files; Lockstep reads no data from outside "
           "the file it is given (a weights file holds its data itself)");
}

// Every link on `name` (a/b/c, relative to loc) must be a hard link: an external link would
// open another file, a soft one could lead through an external link.
void check_hard_links(hid_t loc, const std::string& name, const std::string& file_path) {
  for (size_t end = name.find('/');; end = name.find('/', end + 1)) {
    const std::string prefix = name.substr(0, end);
    if (!prefix.empty()) {
      H5L_info_t info;
      LS_CHECK(H5Lget_info(loc, prefix.c_str(), &info, H5P_DEFAULT) >= 0, "'", file_path,
               "': cannot find '", prefix, "' (the file is damaged)");
      LS_CHECK(info.type != H5L_TYPE_EXTERNAL, "'", file_path, "': '", prefix,
               "' is an external link to another file; Lockstep reads nothing from outside the "
               "file it is given");
      LS_CHECK(info.type == H5L_TYPE_HARD, "'", file_path, "': '", prefix,
               "' is a soft link; a weights file holds its groups and datasets themselves");
    }
    if (end == std::string::npos) return;
  }
}

Tensor read_dataset(hid_t loc, const char* name, VisitState* st) {
  check_hard_links(loc, name, st->file_path);
  H5Handle ds(H5Dopen2(loc, name, H5P_DEFAULT), H5Dclose);
  LS_CHECK(ds.id >= 0, "'", st->file_path, "': cannot open dataset '", name, "'");
  check_data_is_inside(ds, name, st);
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
    LS_CHECK(link->type != H5L_TYPE_EXTERNAL, "'", w.st->file_path, "': '", w.prefix, name,
             "' is an external link to another file; Lockstep reads nothing from outside the "
             "file it is given");
    if (link->type != H5L_TYPE_HARD) return 0;  // soft links lead nowhere we read
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
std::vector<NamedTensor> read_open_h5(hid_t file, const std::string& path, uint64_t file_bytes,
                                      uint64_t budget) {
  std::vector<NamedTensor> out;
  VisitState st{path, &out, "", file_bytes};
  st.budget = budget;
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
std::vector<NamedTensor> read_h5_image(const std::string& image, const std::string& path,
                                       uint64_t budget) {
  LS_CHECK(has_hdf5_signature(image), "'", path, "' is not an HDF5 file");
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  LS_CHECK(fapl.id >= 0 && H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0 &&
               H5Pset_file_image(fapl, const_cast<char*>(image.data()), image.size()) >= 0,
           "'", path, "': cannot set up an in-memory HDF5 file");
  H5Handle file(H5Fopen(memory_file_name("read").c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  LS_CHECK(file.id >= 0, "'", path, "': cannot open the HDF5 file (it is damaged)");
  return read_open_h5(file, path, image.size(), budget);
}

// The HDF5 file image of `tensors`, built in memory (HDF5's core driver, no backing store).
std::string h5_image(const std::vector<NamedTensor>& tensors,
                     const std::vector<std::string>& groups, const std::string& path) {
  return file_image(path, [&](hid_t file) {
    for (auto& g : groups) make_groups(file, g, path);
    for (auto& t : tensors) write_dataset(file, t, path);
  });
}

// The zip's directory entry of `member`, its sizes checked against `max_bytes` and deflate's
// ratio.
zip_stat_t zip_member_size(zip_t* z, const std::string& path, const std::string& member,
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
  return st;
}

// One member of an open zip archive as bytes.
std::string zip_member(zip_t* z, const std::string& path, const std::string& member,
                       uint64_t max_bytes) {
  const zip_stat_t st = zip_member_size(z, path, member, max_bytes);
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

zip_t* open_keras_zip(const std::string& path) {
  check_regular_file(path, "model file");  // libzip's open of a FIFO would hang
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  LS_CHECK(z, "'", path, "' is not a .keras file: not a readable zip (libzip error ", err, ")");
  return z;
}

// The members under assets/ (Keras's save_assets), bounded in count and size.
void read_assets(zip_t* z, const std::string& path,
                 std::vector<std::pair<std::string, std::string>>& out) {
  const zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(z, zip_uint64_t(i), 0);
    if (!name) continue;
    const std::string member = name;
    if (member.rfind("assets/", 0) != 0 || member.back() == '/') continue;
    LS_CHECK(out.size() < kMaxKerasAssets, "'", path, "': more than ", kMaxKerasAssets,
             " members under assets/");
    out.emplace_back(member, zip_member(z, path, member, kMaxKerasAssetBytes));
  }
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

// Parsed in the reader process (read_isolated): a crafted file can crash libhdf5 itself.
std::vector<NamedTensor> read_h5_tensors(const std::string& path) {
  return read_isolated({ReadKind::tensors, path, 0}, "weights file").tensors;
}

void write_keras_archive(const std::string& path, const KerasArchive& archive) {
  std::string weights;
  {
    std::lock_guard<std::mutex> lock(hdf5_lock());
    silence_hdf5();
    weights = h5_image(archive.weights, archive.groups, path + ": model.weights.h5");
  }
  std::vector<std::pair<std::string, std::string>> members = {
      {"metadata.json", archive.metadata.dump()},
      {"config.json", archive.config.dump()},
      {"model.weights.h5", std::move(weights)}};
  for (const auto& [name, bytes] : archive.assets) {
    LS_CHECK(name.rfind("assets/", 0) == 0 && name.find("..") == std::string::npos, "'", path,
             "': asset member '", name, "' must be under assets/");
    members.emplace_back(name, bytes);
  }
  const std::string zip = zip_image(path, members);
  write_file_atomic(path, zip, "model file");
}

KerasArchive read_keras_archive(const std::string& path,
                                const std::function<uint64_t(const json&)>& weight_budget) {
  zip_t* z = open_keras_zip(path);
  KerasArchive a;
  uint64_t member_bytes = 0;
  try {
    a.config = parse_json(zip_member(z, path, "config.json", kMaxKerasJsonBytes),
                          "'" + path + "': config.json");
    a.metadata = parse_json(zip_member(z, path, "metadata.json", kMaxKerasJsonBytes),
                            "'" + path + "': metadata.json");
    // There, and its size plausible (the reader process reads it).
    member_bytes = zip_member_size(z, path, "model.weights.h5", UINT64_MAX).size;
    read_assets(z, path, a.assets);
  } catch (...) {
    zip_discard(z);
    throw;
  }
  zip_discard(z);
  LS_CHECK(a.config.is_object(), "'", path, "': config.json holds a JSON ", a.config.type_name(),
           ", not an object (a Keras model config: {\"class_name\": ..., \"config\": ...})");
  LS_CHECK(a.metadata.is_object(), "'", path, "': metadata.json holds a JSON ",
           a.metadata.type_name(), ", not an object ({\"keras_version\": ..., ...})");
  const uint64_t budget = weight_budget ? std::max<uint64_t>(1, weight_budget(a.config)) : 0;
  // The HDF5 file holds the tensors and a little structure: far more than the budget is not a
  // weights file of this model (an inflating member).
  LS_CHECK(budget == 0 || member_bytes <= budget + budget / 2 + kRatioSlackBytes * 16, "'", path,
           "': model.weights.h5 is ", member_bytes, " bytes uncompressed, far more than the ",
           budget,
           " bytes of weights the model in config.json can use (the file is damaged or "
           "crafted)");
  try {
    // In the reader process (read_isolated): a crafted file can crash libhdf5 itself.
    a.weights =
        read_isolated({ReadKind::keras_weights, path, budget}, "weights member (model.weights.h5)")
            .tensors;
  } catch (const Error& e) {
    LS_FAIL("'", path, "': model.weights.h5: ", e.what());
  }
  return a;
}

namespace h5 {

void read_tensors_here(const ReadRequest& request, IsolatedResult& out) {
  uint64_t bytes = 0;
  H5Handle file(open_read_only(request.path, &bytes), H5Fclose);
  out.tensors = read_open_h5(file, request.path, bytes, request.budget);
}

void read_keras_weights_here(const ReadRequest& request, IsolatedResult& out) {
  const std::string& path = request.path;
  zip_t* z = open_keras_zip(path);
  std::string weights;
  try {
    weights = zip_member(z, path, "model.weights.h5", UINT64_MAX);
  } catch (...) {
    zip_discard(z);
    throw;
  }
  zip_discard(z);
  silence_hdf5();
  out.tensors = read_h5_image(weights, path + ": model.weights.h5", request.budget);
}

}  // namespace h5

}  // namespace lockstep::io
