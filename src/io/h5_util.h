// HDF5 helpers shared by the Keras 3 files (keras_file.cpp) and Keras 2's legacy .h5 weights
// (legacy_h5.cpp): handles closed on scope exit, checked dataset reads, groups on demand, and
// files built in memory.
#pragma once
#include <hdf5.h>

#include <functional>
#include <mutex>
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

// What a read in a child process sends back (read_isolated): strings, counts and tensors, each
// in the order the reader added them.
struct IsolatedResult {
  std::vector<std::string> strings;
  std::vector<int64_t> counts;
  std::vector<NamedTensor> tensors;
};
// Held by every Lockstep call into libhdf5 that runs in this process (the writers), and across
// read_isolated's fork, so that no other thread is inside libhdf5 when the child is made.
std::mutex& hdf5_lock();
// Runs `read` (which parses a file with libhdf5) in a fork()ed child and returns what it filled
// in. libhdf5 1.10 can crash on crafted files (an allocation sized from the file fails and it
// reads through NULL); here such a crash is a lockstep::Error naming `path` and `what` ("weights
// file") as damaged, and the reader's own errors come back unchanged. `read` must not take
// hdf5_lock() (h5_isolated.cpp says what else the child may do).
IsolatedResult read_isolated(const std::string& path, const std::string& what,
                             const std::function<void(IsolatedResult&)>& read);

}  // namespace lockstep::io::h5
