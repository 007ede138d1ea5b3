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
  uint64_t file_bytes = 0;     // the HDF5 file's size
  uint64_t stored_bytes = 0;   // bytes the datasets read so far occupy (must fit in the file)
  uint64_t budget = 0;         // decoded bytes allowed in all (0: no budget beyond the file's)
  uint64_t decoded_bytes = 0;  // decoded so far
  uint64_t text_bytes = 0;     // names read from attributes so far (legacy .h5)
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
// Refuses `name` (a/b/c relative to loc) unless every link on it is a hard link: an external
// link would open another file.
void check_hard_links(hid_t loc, const std::string& name, const std::string& file_path);
// The bytes of an HDF5 file that `fill` builds in memory (HDF5's core driver); errors name
// `path`.
std::string file_image(const std::string& path, const std::function<void(hid_t file)>& fill);
// Opens `path` read-only after checking it is a regular HDF5 file; *bytes = its size.
hid_t open_read_only(const std::string& path, uint64_t* bytes);

// What a read in the reader process sends back (read_isolated): strings, counts and tensors,
// each in the order the reader added them.
struct IsolatedResult {
  std::vector<std::string> strings;
  std::vector<int64_t> counts;
  std::vector<NamedTensor> tensors;
};

// The reads the reader process runs (its first argument names one).
enum class ReadKind { tensors, keras_weights, legacy_probe, legacy };
struct ReadRequest {
  ReadKind kind = ReadKind::tensors;
  std::string path;     // the file the user named (.weights.h5, .h5 or .keras)
  uint64_t budget = 0;  // decoded bytes allowed in all (0: only the file's own limits)
};
// The reads themselves, as they run in the reader process (keras_file.cpp, legacy_h5.cpp).
void read_tensors_here(const ReadRequest& request, IsolatedResult& out);
void read_keras_weights_here(const ReadRequest& request, IsolatedResult& out);
void probe_legacy_here(const ReadRequest& request, IsolatedResult& out);
void read_legacy_here(const ReadRequest& request, IsolatedResult& out);

// Held by every Lockstep call into libhdf5 that runs in this process (the writers).
std::mutex& hdf5_lock();
// Runs `request` in a separate process, the program lockstep_h5_reader (started with
// posix_spawn, so it inherits no lock another thread of this process holds), and returns what
// it sent back. libhdf5 1.10 can crash on crafted files (an allocation sized from the file
// fails and it reads through NULL); here such a crash is a lockstep::Error naming the file and
// `what` ("weights file") as damaged, and the reader's own errors come back unchanged.
IsolatedResult read_isolated(const ReadRequest& request, const std::string& what);
// The reader program's main (src/io/h5_reader_main.cpp): lockstep_h5_reader KIND PATH BUDGET
// writes its records to standard output.
int reader_main(int argc, char** argv);

}  // namespace lockstep::io::h5
