// HDF5 helpers shared by the Keras 3 files (keras_file.cpp) and Keras 2's legacy .h5 weights
// (legacy_h5.cpp): handles closed on scope exit, checked dataset reads, groups on demand, and
// files built in memory.
#pragma once
#include <hdf5.h>

#include <functional>
#include <string>
#include <vector>

#include "lockstep/io/checkpoint.h"

namespace lockstep::io::h5 {

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

// What reading a file's datasets has seen (sizes are checked against the file's).
struct VisitState {
  std::string file_path;
  std::vector<NamedTensor>* out;
  std::string error;
  uint64_t file_bytes = 0;        // the HDF5 file's size
  uint64_t unfiltered_bytes = 0;  // data of unfiltered datasets so far (must fit in the file)
};

// HDF5's own error printing off (each failure becomes one lockstep::Error in our words).
void silence_hdf5();
// The HDF5 type of a dtype Lockstep stores (-1 for others).
hid_t h5_type(DType t);
// Creates every group on `path` (a/b/c) that does not exist yet.
void make_groups(hid_t file, const std::string& path, const std::string& file_path);
// Writes t at its name (a path under the root), creating its groups.
void write_dataset(hid_t file, const NamedTensor& t, const std::string& file_path);
// Reads dataset `name` (relative to `loc`), its size checked against the file before allocating.
Tensor read_dataset(hid_t loc, const char* name, VisitState* st);
// The bytes of an HDF5 file that `fill` builds in memory (HDF5's core driver); errors name
// `path`.
std::string file_image(const std::string& path, const std::function<void(hid_t file)>& fill);
// Opens `path` read-only after checking it is a regular HDF5 file; *bytes = its size.
hid_t open_read_only(const std::string& path, uint64_t* bytes);

}  // namespace lockstep::io::h5
