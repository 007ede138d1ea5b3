// Keras 2's legacy HDF5 weights layout (the published keras.applications files): layer groups
// listed by the attribute `layer_names`, each listing its datasets in `weight_names`. Read and
// written through HDF5's C library (io/h5_util.h); lockstep/saving/saving.h maps Models onto it.
#include <algorithm>
#include <cstring>

#include "io/h5_util.h"
#include "lockstep/core/file_io.h"
#include "lockstep/io/keras_file.h"

namespace lockstep::io {
namespace {

using namespace h5;

// Keras splits an attribute into chunks past HDF5's 64 KB object-header limit.
constexpr size_t kAttributeChunkBytes = 64000;
// No list attribute of a weights file comes near this (ResNet152: ~500 names).
constexpr hssize_t kMaxNames = 1 << 20;
// Nor this much text in all its names (bytes, counted before they are decoded).
constexpr uint64_t kMaxTextBytes = 64u << 20;

bool has_attribute(hid_t loc, const std::string& name) { return H5Aexists(loc, name.c_str()) > 0; }

// Variable-length strings are stored as (length, heap object) records, and many records can
// name one heap object: 4,000 records of one 1 MB object decode to 4 GB (std::bad_alloc, with
// no file named, before any check could run). HDF5 1.10 decodes an attribute whole, with no way
// to size it first, so a probe read converts it to a fixed-length type of kProbeSize through
// this conversion, which only adds up the records' lengths (the first 4 bytes of each record,
// little-endian, in HDF5's file format) and decodes nothing.
constexpr size_t kProbeSize = 61;  // a size no other conversion asks for
uint64_t g_probed_bytes = 0;       // the reader process reads one file at a time

herr_t sum_lengths(hid_t src, hid_t dst, H5T_cdata_t* cdata, size_t n, size_t stride, size_t,
                   void* buf, void*, hid_t) {
  if (cdata->command == H5T_CONV_INIT) {
    cdata->need_bkg = H5T_BKG_NO;
    const bool ours = H5Tis_variable_str(src) > 0 && H5Tget_class(dst) == H5T_STRING &&
                      H5Tis_variable_str(dst) <= 0 && H5Tget_size(dst) == kProbeSize;
    return ours ? 0 : -1;
  }
  if (cdata->command != H5T_CONV_CONV) return 0;
  const size_t record = stride ? stride : H5Tget_size(src);
  const auto* bytes = static_cast<const unsigned char*>(buf);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char* r = bytes + i * record;
    total += uint64_t(r[0]) | uint64_t(r[1]) << 8 | uint64_t(r[2]) << 16 | uint64_t(r[3]) << 24;
  }
  g_probed_bytes += total;
  std::memset(buf, 0, n * std::max(record, kProbeSize));
  return 0;
}

// The bytes the variable-length strings of `attr` decode to (terminators not counted), or -1
// when the probe cannot tell.
int64_t probe_text_bytes(hid_t attr, hssize_t n) {
  static const bool registered = [] {
    H5Handle vlen(H5Tcopy(H5T_C_S1), H5Tclose), fixed(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(vlen, H5T_VARIABLE);
    H5Tset_size(fixed, kProbeSize);
    return H5Tregister(H5T_PERS_SOFT, "lockstep_vlen_lengths", vlen, fixed, sum_lengths) >= 0;
  }();
  if (!registered) return -1;
  H5Handle probe(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(probe, kProbeSize);
  std::vector<char> sink(size_t(n) * kProbeSize);
  g_probed_bytes = 0;
  if (H5Aread(attr, probe, sink.data()) < 0) return -1;
  return int64_t(g_probed_bytes);
}

// Attribute `name` of `loc` as strings (fixed or variable length; an empty list of any type).
// Their bytes are added to *text and refused past kMaxTextBytes for the file, before decoding.
std::vector<std::string> read_strings(hid_t loc, const std::string& name, const std::string& where,
                                      uint64_t* text) {
  H5Handle attr(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose);
  LS_CHECK(attr.id >= 0, where, ": cannot open the attribute '", name, "'");
  H5Handle type(H5Aget_type(attr), H5Tclose);
  H5Handle space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  LS_CHECK(n >= 0 && n <= kMaxNames, where, ": attribute '", name, "' has ", n,
           " entries (the file is damaged)");
  if (n == 0) return {};  // Keras writes an empty list as an empty float array
  LS_CHECK(H5Tget_class(type) == H5T_STRING, where, ": attribute '", name,
           "' is not a list of strings (not a Keras weights file?)");
  std::vector<std::string> out;
  auto count = [&](uint64_t bytes) {
    *text += bytes;
    LS_CHECK(*text <= kMaxTextBytes, where, ": attribute '", name, "' brings the names read to ",
             *text, " bytes of text, more than the limit of ", kMaxTextBytes,
             " for a weights file (Keras's hold kilobytes; many names sharing one stored string "
             "can claim gigabytes: the file is damaged or crafted)");
  };
  if (H5Tis_variable_str(type) > 0) {
    const int64_t probed = probe_text_bytes(attr, n);
    if (probed >= 0) count(uint64_t(probed) + uint64_t(n));
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    H5Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    LS_CHECK(H5Aread(attr, mem, ptrs.data()) >= 0, where, ": cannot read the attribute '", name,
             "'");
    // Counted again as decoded when the probe could not tell (the strings are then in memory).
    uint64_t total = 0;
    for (char* p : ptrs) total += p ? std::strlen(p) + 1 : 1;
    if (probed >= 0 || *text + total <= kMaxTextBytes)
      for (char* p : ptrs) out.push_back(p ? p : "");
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, ptrs.data());
    if (probed < 0) count(total);
    return out;
  }
  const size_t len = H5Tget_size(type);
  LS_CHECK(len > 0 && len <= kMaxTextBytes, where, ": attribute '", name,
           "' is too large (the file is damaged)");
  count(uint64_t(len) * uint64_t(n));
  std::string buf(len * size_t(n), '\0');
  LS_CHECK(H5Aread(attr, type, buf.data()) >= 0, where, ": cannot read the attribute '", name, "'");
  for (hssize_t i = 0; i < n; ++i) {
    std::string s = buf.substr(size_t(i) * len, len);
    s.erase(std::find(s.begin(), s.end(), '\0'), s.end());  // null-padded (numpy's 'S')
    while (!s.empty() && s.back() == ' ') s.pop_back();     // or space-padded
    out.push_back(s);
  }
  return out;
}

// A list attribute, whole or in Keras's chunks (name0, name1, ...); [] when absent.
std::vector<std::string> read_list(hid_t loc, const std::string& name, const std::string& where,
                                   uint64_t* text) {
  if (has_attribute(loc, name)) return read_strings(loc, name, where, text);
  std::vector<std::string> out;
  for (int k = 0; has_attribute(loc, name + std::to_string(k)); ++k)
    for (auto& s : read_strings(loc, name + std::to_string(k), where, text)) out.push_back(s);
  return out;
}

bool has_list(hid_t loc, const std::string& name) {
  return has_attribute(loc, name) || has_attribute(loc, name + "0");
}

// The group holding layer_names: the root (save_weights) or model_weights/ (a whole-model
// save), as Keras's load_weights looks for it; -1 when neither has it.
hid_t layers_group(hid_t file, const std::string& path) {
  if (has_list(file, "layer_names")) return H5Gopen2(file, "/", H5P_DEFAULT);
  if (H5Lexists(file, "model_weights", H5P_DEFAULT) <= 0) return -1;
  check_hard_links(file, "model_weights", path);
  hid_t g = H5Gopen2(file, "model_weights", H5P_DEFAULT);
  if (g >= 0 && has_list(g, "layer_names")) return g;
  if (g >= 0) H5Gclose(g);
  return -1;
}

// Writes `values` as a fixed-length, null-padded string attribute (numpy's 'S', as h5py stores
// Keras's lists); an empty list as an empty float array, as Keras does.
void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                   const std::string& path, bool scalar = false) {
  const hsize_t n = values.size();
  size_t len = 1;
  for (auto& v : values) len = std::max(len, v.size());
  H5Handle type(n ? H5Tcopy(H5T_C_S1) : H5Tcopy(H5T_NATIVE_DOUBLE), H5Tclose);
  if (n) H5Tset_size(type, len), H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Handle space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Handle attr(H5Acreate2(loc, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  LS_CHECK(attr.id >= 0, "'", path, "': cannot create the attribute '", name, "'");
  if (!n) return;
  std::string buf(len * n, '\0');
  for (size_t i = 0; i < n; ++i) std::memcpy(&buf[i * len], values[i].data(), values[i].size());
  LS_CHECK(H5Awrite(attr, type, buf.data()) >= 0, "'", path, "': cannot write the attribute '",
           name, "'");
}

// A list attribute, in chunks when it would pass the object-header limit (Keras's rule).
void write_list(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                const std::string& path) {
  size_t len = 1;
  for (auto& v : values) len = std::max(len, v.size());
  const size_t per_chunk = std::max<size_t>(1, kAttributeChunkBytes / len);
  if (values.size() <= per_chunk) return write_strings(loc, name, values, path);
  for (size_t at = 0, k = 0; at < values.size(); at += per_chunk, ++k) {
    std::vector<std::string> chunk(values.begin() + long(at),
                                   values.begin() + long(std::min(values.size(), at + per_chunk)));
    write_strings(loc, name + std::to_string(k), chunk, path);
  }
}

LegacyLayerWeights read_layer(hid_t root, const std::string& layer, VisitState* st) {
  const std::string where = "'" + st->file_path + "': layer group '" + layer + "'";
  LS_CHECK(!layer.empty() && H5Lexists(root, layer.c_str(), H5P_DEFAULT) > 0, where,
           " is listed in layer_names but missing (the file is damaged)");
  check_hard_links(root, layer, st->file_path);
  H5Handle g(H5Gopen2(root, layer.c_str(), H5P_DEFAULT), H5Gclose);
  LS_CHECK(g.id >= 0, where, ": cannot open it");
  LegacyLayerWeights out{layer, {}};
  for (auto& w : read_list(g, "weight_names", where, &st->text_bytes)) {
    try {
      out.weights.push_back({w, read_dataset(g, w.c_str(), st)});
    } catch (const Error& e) {
      LS_FAIL(where, ": weight '", w, "' (listed in weight_names): ", e.what());
    }
  }
  return out;
}

}  // namespace

namespace {

// One string attribute (Keras writes keras_version and backend as one string); "" when absent.
std::string read_one_string(hid_t loc, const std::string& name, const std::string& path,
                            uint64_t* text) {
  if (!has_attribute(loc, name)) return "";
  const auto values = read_strings(loc, name, "'" + path + "'", text);
  LS_CHECK(values.size() == 1, "'", path, "': attribute '", name, "' holds ", values.size(),
           " strings; Keras writes it as one (the file is damaged)");
  return values[0];
}

LegacyWeightsFile read_legacy_h5_here(const std::string& path, uint64_t budget) {
  uint64_t bytes = 0;
  H5Handle file(open_read_only(path, &bytes), H5Fclose);
  H5Handle root(layers_group(file, path), H5Gclose);
  LS_CHECK(root.id >= 0, "'", path,
           "': not in Keras's legacy .h5 layout (no layer_names attribute at the root or under "
           "model_weights/)");
  LegacyWeightsFile out;
  std::vector<NamedTensor> sink;
  VisitState st{path, &sink, "", bytes};
  st.budget = budget;
  out.keras_version = read_one_string(root, "keras_version", path, &st.text_bytes);
  out.backend = read_one_string(root, "backend", path, &st.text_bytes);
  for (auto& layer : read_list(root, "layer_names", "'" + path + "'", &st.text_bytes))
    out.layers.push_back(read_layer(root, layer, &st));
  return out;
}

}  // namespace

namespace h5 {

void probe_legacy_here(const ReadRequest& request, IsolatedResult& out) {
  uint64_t bytes = 0;
  H5Handle file(open_read_only(request.path, &bytes), H5Fclose);
  H5Handle root(layers_group(file, request.path), H5Gclose);
  out.counts.push_back(root.id >= 0);
}

// Sends strings {keras_version, backend, layer names...}, counts (each layer's number of
// weights) and the weights in order.
void read_legacy_here(const ReadRequest& request, IsolatedResult& out) {
  LegacyWeightsFile f = read_legacy_h5_here(request.path, request.budget);
  out.strings = {f.keras_version, f.backend};
  for (auto& l : f.layers) {
    out.strings.push_back(l.layer);
    out.counts.push_back(int64_t(l.weights.size()));
    for (auto& w : l.weights) out.tensors.push_back(std::move(w));
  }
}

}  // namespace h5

// Both readers parse in the reader process (read_isolated): a crafted file can crash libhdf5.
bool is_legacy_h5(const std::string& path) {
  const IsolatedResult r = read_isolated({ReadKind::legacy_probe, path, 0}, "weights file");
  LS_CHECK(r.counts.size() == 1, "'", path, "': reading the weights file returned nothing");
  return r.counts[0] != 0;
}

LegacyWeightsFile read_legacy_h5(const std::string& path, uint64_t budget) {
  const IsolatedResult r = read_isolated({ReadKind::legacy, path, budget}, "weights file");
  LS_CHECK(r.strings.size() >= 2 && r.strings.size() - 2 == r.counts.size(), "'", path,
           "': reading the weights file returned an inconsistent result");
  LegacyWeightsFile f;
  f.keras_version = r.strings[0];
  f.backend = r.strings[1];
  size_t next = 0;
  for (size_t i = 0; i < r.counts.size(); ++i) {
    LegacyLayerWeights l{r.strings[i + 2], {}};
    for (int64_t k = 0; k < r.counts[i]; ++k) {
      LS_CHECK(next < r.tensors.size(), "'", path,
               "': reading the weights file returned an inconsistent result");
      l.weights.push_back(r.tensors[next++]);
    }
    f.layers.push_back(std::move(l));
  }
  return f;
}

namespace {

// A name the reader gets back as written: not empty, no NUL, no trailing space (fixed-length
// string attributes are space- or null-padded, and the reader strips the padding).
void check_round_trips(const std::string& name, const std::string& what, const std::string& path) {
  LS_CHECK(!name.empty() && name.find('\0') == std::string::npos && name.back() != ' ', "'", path,
           "': cannot save ", what, " '", name, "' in a legacy .h5 file: ",
           name.empty()                           ? "the name is empty"
           : name.find('\0') != std::string::npos ? "the name holds a NUL character"
                                                  : "the name ends in a space",
           ", which the file's fixed-length name lists cannot hold (rename it, or save a "
           ".weights.h5 or .keras file)");
}

}  // namespace

void write_legacy_h5(const std::string& path, const LegacyWeightsFile& f) {
  for (auto& l : f.layers) {
    check_round_trips(l.layer, "layer", path);
    for (auto& w : l.weights) check_round_trips(w.name, "weight of layer '" + l.layer + "'", path);
  }
  std::lock_guard<std::mutex> lock(hdf5_lock());
  silence_hdf5();
  std::vector<std::string> names;
  for (auto& l : f.layers) names.push_back(l.layer);
  std::vector<const LegacyLayerWeights*> sorted;  // Keras: groups in name order
  for (auto& l : f.layers) sorted.push_back(&l);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->layer < b->layer; });
  const std::string image = file_image(path, [&](hid_t file) {
    write_list(file, "layer_names", names, path);
    write_strings(file, "backend", {f.backend}, path, true);
    write_strings(file, "keras_version", {f.keras_version}, path, true);
    for (auto* l : sorted) {
      make_groups(file, l->layer, path);
      H5Handle g(H5Gopen2(file, l->layer.c_str(), H5P_DEFAULT), H5Gclose);
      std::vector<std::string> weight_names;
      for (auto& w : l->weights) weight_names.push_back(w.name);
      write_list(g, "weight_names", weight_names, path);
      for (auto& w : l->weights) write_dataset(file, {l->layer + "/" + w.name, w.value}, path);
    }
  });
  write_file_atomic(path, image, "weights file");
}

}  // namespace lockstep::io
