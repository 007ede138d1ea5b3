// Keras 3 files (.weights.h5, .keras) as named tensors + JSON, through HDF5's C library and
// libzip. No model knowledge here: lockstep/train/saving.h maps Models onto these.
#include "lockstep/io/keras_file.h"

#include <hdf5.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace lockstep::io {
namespace {

// Closes an HDF5 handle on scope exit.
struct H5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H5Handle() {
    if (id >= 0 && close) close(id);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  operator hid_t() const { return id; }  // NOLINT
};

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

struct VisitState {
  std::string file_path;
  std::vector<NamedTensor>* out;
  std::string error;
};

herr_t visit_object(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  auto* st = static_cast<VisitState*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  try {
    H5Handle ds(H5Dopen2(root, name, H5P_DEFAULT), H5Dclose);
    LS_CHECK(ds.id >= 0, "'", st->file_path, "': cannot open dataset '", name, "'");
    H5Handle type(H5Dget_type(ds), H5Tclose);
    DType dt = dtype_of_h5(type, st->file_path, name);
    H5Handle space(H5Dget_space(ds), H5Sclose);
    int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(std::max(rank, 0));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    Shape shape;
    for (auto d : dims) shape.push_back(int64_t(d));
    Tensor t = Tensor::zeros(shape, dt);
    LS_CHECK(H5Dread(ds, h5_type(dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) >= 0, "'",
             st->file_path, "': cannot read dataset '", name, "'");
    st->out->push_back({name, t});
  } catch (const std::exception& e) {
    st->error = e.what();
    return -1;
  }
  return 0;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LS_CHECK(f.good(), "cannot read '", path, "'");
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string temp_path(const std::string& base, const std::string& what) {
  static int counter = 0;
  return base + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + what;
}

// One member of an open zip archive as bytes.
std::string zip_member(zip_t* z, const std::string& path, const std::string& member) {
  zip_stat_t st;
  zip_stat_init(&st);
  LS_CHECK(zip_stat(z, member.c_str(), 0, &st) == 0, "'", path,
           "': not a .keras file: the zip has no '", member, "'");
  zip_file_t* f = zip_fopen(z, member.c_str(), 0);
  LS_CHECK(f, "'", path, "': cannot open '", member, "' in the zip");
  std::string bytes(st.size, '\0');
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

}  // namespace

void write_h5_tensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::vector<std::string>& groups) {
  std::string tmp = temp_path(path, ".h5");
  {
    H5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    LS_CHECK(file.id >= 0, "cannot create HDF5 file '", path, "'");
    try {
      for (auto& g : groups) make_groups(file, g, path);
      for (auto& t : tensors) write_dataset(file, t, path);
    } catch (...) {
      std::remove(tmp.c_str());
      throw;
    }
  }
  std::filesystem::rename(tmp, path);
}

std::vector<NamedTensor> read_h5_tensors(const std::string& path) {
  LS_CHECK(std::filesystem::exists(path), "cannot read '", path, "': no such file");
  LS_CHECK(H5Fis_hdf5(path.c_str()) > 0, "'", path, "' is not an HDF5 file");
  H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  LS_CHECK(file.id >= 0, "cannot open HDF5 file '", path, "'");
  std::vector<NamedTensor> out;
  VisitState st{path, &out, ""};
  herr_t rc = H5Ovisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, visit_object, &st);
  if (!st.error.empty()) LS_FAIL(st.error);
  LS_CHECK(rc >= 0, "'", path, "': cannot walk the HDF5 file");
  return out;
}

void write_keras_archive(const std::string& path, const KerasArchive& archive) {
  std::string h5 = temp_path(path, ".weights.h5");
  write_h5_tensors(h5, archive.weights, archive.groups);
  std::string weights = read_file_bytes(h5);
  std::remove(h5.c_str());
  std::string tmp = temp_path(path, ".zip");
  int err = 0;
  zip_t* z = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  LS_CHECK(z, "cannot create '", path, "' (libzip error ", err, ")");
  try {
    zip_add(z, path, "metadata.json", archive.metadata.dump());
    zip_add(z, path, "config.json", archive.config.dump());
    zip_add(z, path, "model.weights.h5", weights);
  } catch (...) {
    zip_discard(z);
    throw;
  }
  LS_CHECK(zip_close(z) == 0, "cannot write '", path, "': ", zip_strerror(z));
  std::filesystem::rename(tmp, path);
}

KerasArchive read_keras_archive(const std::string& path) {
  LS_CHECK(std::filesystem::exists(path), "cannot read '", path, "': no such file");
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
  LS_CHECK(z, "'", path, "' is not a .keras file: not a readable zip (libzip error ", err, ")");
  KerasArchive a;
  std::string weights;
  const char* member = "config.json";
  try {
    a.config = json::parse(zip_member(z, path, member));
    member = "metadata.json";
    a.metadata = json::parse(zip_member(z, path, member));
    weights = zip_member(z, path, "model.weights.h5");
  } catch (const json::exception& e) {
    zip_discard(z);
    LS_FAIL("'", path, "': ", member, ": bad JSON in the zip: ", e.what());
  } catch (...) {
    zip_discard(z);
    throw;
  }
  zip_discard(z);
  std::string h5 = temp_path(path, ".weights.h5");
  {
    std::ofstream f(h5, std::ios::binary);
    f.write(weights.data(), std::streamsize(weights.size()));
  }
  try {
    a.weights = read_h5_tensors(h5);
  } catch (const Error& e) {
    std::remove(h5.c_str());
    LS_FAIL("'", path, "': model.weights.h5: ", e.what());
  }
  std::remove(h5.c_str());
  return a;
}

}  // namespace lockstep::io
