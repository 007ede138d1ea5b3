// Weight and model files from the fourth probe (issue 39, sections 1b and 6), each refused with
// an error naming the file, or read as Keras reads it:
//  - the HDF5 reader is a program of its own (lockstep_h5_reader, started with posix_spawn): a
//    lock another thread holds (here libhdf5's own, held inside a callback) does not hang it,
//    and its crash or a missing program is an error naming the file;
//  - HDF5 features that reach outside the file (external storage, virtual datasets, external
//    links) are refused, naming the dataset; /etc/passwd's bytes never come back;
//  - one compressed dataset referenced many times (hard links, a repeated weight name) is not
//    decoded over and over, and variable-length names sharing one stored string are counted
//    before they are decoded;
//  - legacy files that would load nothing, non-object JSON, metadata of the wrong type, an empty
//    keras_version, a NaN learning rate: errors naming the file and the field;
//  - a Keras 3 file saved after compile() but before fit() (optimizer/vars: iteration and
//    learning rate only) loads with a fresh optimizer state;
//  - a layer name that a legacy .h5 cannot hold (a trailing space) is refused at save time.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "io/hostile_files_util.h"
#include "lockstep/io/keras_file.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
using test_util::error_of;
namespace fs = std::filesystem;

using lockstep::test_util::expect_has;

namespace {

std::string tmp(const std::string& file) {
  return (test_util::temp_dir("h5_hardening") / file).string();
}

// Opens `path` (an HDF5 file Lockstep wrote) read-write, runs `edit` on it, closes it.
void edit_h5(const std::string& path, const std::function<void(hid_t)>& edit) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  edit(f);
  ASSERT_GE(H5Fclose(f), 0);
}

// Replaces attribute `name` of `loc` by a fixed-length string list.
void set_names(hid_t loc, const char* name, const std::vector<std::string>& values) {
  if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
  size_t len = 1;
  for (auto& v : values) len = std::max(len, v.size());
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, len);
  const hsize_t n = values.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  std::string buf(len * n, '\0');
  for (size_t i = 0; i < n; ++i) std::memcpy(&buf[i * len], values[i].data(), values[i].size());
  H5Awrite(attr, type, buf.data());
  H5Aclose(attr), H5Sclose(space), H5Tclose(type);
}

// A float dataset `name` of `n` zeros, deflated in one chunk (a few KB in the file).
void compressed_zeros(hid_t loc, const char* name, hsize_t n) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &n);
  H5Pset_deflate(dcpl, 9);
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t ds = H5Dcreate2(loc, name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  std::vector<float> zeros(n, 0.f);
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
  H5Dclose(ds), H5Sclose(space), H5Pclose(dcpl);
}

// A dataset `name` of 8 floats stored in the external file `ext_secret1` (written under `dir`);
// the test then patches that name (11 bytes) to /etc/passwd in the file's bytes.
void external_dataset(hid_t loc, const char* name, const std::string& dir) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_external(dcpl, "ext_secret1", 0, 32);
  hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
  H5Pset_efile_prefix(dapl, dir.c_str());
  const hsize_t n = 8;
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t ds = H5Dcreate2(loc, name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, dapl);
  ASSERT_GE(ds, 0);
  std::vector<float> v(8, 1.f);
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(ds), H5Sclose(space), H5Pclose(dapl), H5Pclose(dcpl);
}

// A virtual dataset `name` of 8 floats mapped from /x of the file `source`.
void virtual_dataset(hid_t loc, const char* name, const std::string& source = "other.h5") {
  const hsize_t n = 8;
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_virtual(dcpl, space, source.c_str(), "/x", space);
  hid_t ds = H5Dcreate2(loc, name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  H5Dclose(ds), H5Pclose(dcpl), H5Sclose(space);
}

void patch_to_passwd(const std::string& path) {
  std::string bytes = test_util::read_text_file(path);
  const size_t at = bytes.find("ext_secret1");
  ASSERT_NE(at, std::string::npos) << "the external file's name was not found in " << path;
  bytes.replace(at, 11, "/etc/passwd");
  test_util::write_binary(path, bytes);
}

std::string passwd_head() {
  std::ifstream f("/etc/passwd", std::ios::binary);
  std::string s(16, '\0');
  f.read(s.data(), 16);
  s.resize(size_t(f.gcount()));
  return s;
}

io::LegacyWeightsFile one_dense_legacy() {
  return {
      {{"dense", {{"dense/kernel:0", Tensor::full(Shape{4, 2}, 1.f)}}}}, "2.15.0", "tensorflow"};
}

Model small_model() {
  KTensor in = Input({4}, "x");
  return Model(in, Dense(2, {.use_bias = false, .name = "dense"})(in), "small");
}

}  // namespace

// libhdf5 (Debian builds it thread-safe) holds its global lock while it runs a callback. A
// read started then must not wait for it: before, read_isolated fork()ed, and the child's copy
// of that lock was held forever (keras_file_fuzz hung so beside libFuzzer's threads).
TEST(H5Hardening, ReadsDoNotInheritALockAnotherThreadHolds) {
  const std::string path = tmp("lock.weights.h5");
  io::write_h5_tensors(path, {{"a", Tensor::full(Shape{3}, 2.f)}, {"b", Tensor::full({2}, 1.f)}});
  hbool_t threadsafe = 0;
  H5is_library_threadsafe(&threadsafe);
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, release = false;
  std::thread holder([&] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hsize_t idx = 0;
    struct Ctx {
      std::mutex* mu;
      std::condition_variable* cv;
      bool *inside, *release;
    } ctx{&mu, &cv, &inside, &release};
    H5Literate(
        f, H5_INDEX_NAME, H5_ITER_INC, &idx,
        [](hid_t, const char*, const H5L_info_t*, void* p) -> herr_t {
          auto* c = static_cast<Ctx*>(p);
          std::unique_lock<std::mutex> lock(*c->mu);
          *c->inside = true;
          c->cv->notify_all();
          c->cv->wait(lock, [&] { return *c->release; });
          return 1;  // stop after the first link
        },
        &ctx);
    H5Fclose(f);
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
  // The check runs in a forked copy of this process (where the holder thread is gone, its lock
  // held for good), with a deadline: a hang is a failure, not a stuck suite.
  const std::string verdict = test_util::in_child(
      [&] {
        const auto t = io::read_h5_tensors(path);
        return t.size() == 2 && t[0].value.data<float>()[2] == 2.f ? "" : "wrong tensors";
      },
      60);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  holder.join();
  EXPECT_EQ(verdict, "") << (threadsafe ? "" : "(libhdf5 is not thread-safe here)");
}

// Reads from many threads at once, each starting its own reader (as the fuzzers' and the input
// pipeline's threads do beside a load): every one comes back whole.
TEST(H5Hardening, ReadsFromManyThreadsAtOnceComeBackWhole) {
  const std::string weights = tmp("threads.weights.h5");
  io::write_h5_tensors(weights, {{"a", Tensor::full(Shape{64}, 3.f)}});
  const std::string legacy = tmp("threads.h5");
  io::write_legacy_h5(legacy, one_dense_legacy());
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 6; ++i) {
        if (t % 2 == 0) {
          const auto r = io::read_h5_tensors(weights);
          good += r.size() == 1 && r[0].value.data<float>()[63] == 3.f;
        } else {
          const auto f = io::read_legacy_h5(legacy);
          good += f.layers.size() == 1 && f.layers[0].weights.size() == 1;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 48);
}

// The reader's own death (here a stand-in program that kills itself) is an error naming the
// file; a LOCKSTEP_H5_READER that is not a program is one too.
TEST(H5Hardening, AReaderThatDiesOrIsMissingIsAnErrorNamingTheFile) {
  const std::string path = tmp("fine.weights.h5");
  io::write_h5_tensors(path, {{"a", Tensor::full(Shape{3}, 2.f)}});
  const std::string script = tmp("crashing_reader.sh");
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nkill -SEGV $$\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  const std::string e = test_util::in_child([&] {
    ::setenv("LOCKSTEP_H5_READER", script.c_str(), 1);
    return error_of([&] { io::read_h5_tensors(path); });
  });
  expect_has(e, {path, "is damaged", "SIGSEGV"});
  const std::string missing = test_util::in_child([&] {
    ::setenv("LOCKSTEP_H5_READER", "/nonexistent/lockstep_h5_reader", 1);
    return error_of([&] { io::read_h5_tensors(path); });
  });
  expect_has(missing, {path, "LOCKSTEP_H5_READER", "/nonexistent/lockstep_h5_reader"});
  // An exception other than lockstep::Error in the reader (std::bad_alloc: variable-length
  // strings sharing one heap object) named no file; now the file is named.
  const std::string bad_alloc = tmp("bad_alloc_reader.sh");
  {
    std::ofstream f(bad_alloc);
    f << "#!/bin/sh\nprintf 'X\\016\\000\\000\\000\\000\\000\\000\\000std::bad_alloc'\n";
  }
  fs::permissions(bad_alloc, fs::perms::owner_all);
  const std::string oom = test_util::in_child([&] {
    ::setenv("LOCKSTEP_H5_READER", bad_alloc.c_str(), 1);
    return error_of([&] { io::read_h5_tensors(path); });
  });
  expect_has(oom, {path, "could not be read: std::bad_alloc"});
  // Unset, the reader is found (beside the library) and reads the file.
  EXPECT_EQ(io::read_h5_tensors(path).size(), 1u);
}

// A reader that sends nothing (libhdf5 busy for minutes on a crafted file: keras_weights_fuzz
// found a 10 KB one) is stopped after LOCKSTEP_H5_READER_SILENCE seconds, with an error naming
// the file; and the reader refuses to run for a parent that is not its own (it dies with the
// caller through PR_SET_PDEATHSIG, and checks that the caller is still there).
TEST(H5Hardening, ASilentReaderIsStoppedAndAReaderWithoutItsCallerEnds) {
  const std::string path = tmp("fine_silent.weights.h5");
  io::write_h5_tensors(path, {{"a", Tensor::full(Shape{3}, 2.f)}});
  const std::string script = tmp("silent_reader.sh");
  {
    std::ofstream f(script);
    f << "#!/bin/sh\nexec sleep 60\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  const std::string e = test_util::in_child([&] {
    ::setenv("LOCKSTEP_H5_READER", script.c_str(), 1);
    ::setenv("LOCKSTEP_H5_READER_SILENCE", "1", 1);
    return error_of([&] { io::read_h5_tensors(path); });
  });
  expect_has(e, {path, "made no progress for 1 s", "LOCKSTEP_H5_READER_SILENCE"});
  const std::string bad = test_util::in_child([&] {
    ::setenv("LOCKSTEP_H5_READER_SILENCE", "0", 1);
    return error_of([&] { io::read_h5_tensors(path); });
  });
  expect_has(bad, {"LOCKSTEP_H5_READER_SILENCE"});
  const std::string reader = std::string(LOCKSTEP_BINARY_DIR) + "/lib/lockstep/lockstep_h5_reader";
  if (!fs::exists(reader)) GTEST_SKIP() << reader << " is not built";
  // PARENT_PID 1 is not this shell: the reader ends at once with status 4, reading nothing.
  const std::string cmd = reader + " tensors " + path + " 0 1 >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 4);
}

// External storage made `lockstep convert` copy /etc/passwd into a model's kernel.
TEST(H5Hardening, ExternalStorageIsRefusedNamingTheDataset) {
  const std::string dir = test_util::temp_dir("h5_hardening").string();
  const std::string head = passwd_head();
  // Keras 3's layout.
  const std::string weights = tmp("external.weights.h5");
  io::write_h5_tensors(weights, {{"layers/dense/vars/1", Tensor::full(Shape{2}, 0.f)}});
  edit_h5(weights, [&](hid_t f) { external_dataset(f, "layers/dense/vars/0", dir); });
  patch_to_passwd(weights);
  std::string e = error_of([&] { io::read_h5_tensors(weights); });
  expect_has(e, {weights, "dataset 'layers/dense/vars/0'", "external files"});
  if (!head.empty()) EXPECT_EQ(e.find(head), std::string::npos) << e;
  // Keras 2's legacy layout, through load_weights.
  const std::string legacy = tmp("external.h5");
  io::write_legacy_h5(legacy, one_dense_legacy());
  edit_h5(legacy, [&](hid_t f) {
    H5Ldelete(f, "dense/dense/kernel:0", H5P_DEFAULT);
    external_dataset(f, "dense/dense/kernel:0", dir);
  });
  patch_to_passwd(legacy);
  Model m = Sequential({Input({4}), Dense(8, {.use_bias = false, .name = "dense"})});
  e = error_of([&] { m.load_weights(legacy); });
  expect_has(e, {legacy, "dense/kernel:0", "external files"});
  if (!head.empty()) EXPECT_EQ(e.find(head), std::string::npos) << e;
  for (float v : m.get_weights()[0].to_vector()) EXPECT_TRUE(std::isfinite(v));
  // Inside a .keras file.
  const std::string keras = tmp("external.keras");
  test_util::write_binary(
      keras, test_util::make_zip({{"config.json", "{}"},
                                  {"metadata.json", "{}"},
                                  {"model.weights.h5", test_util::read_text_file(weights)}}));
  expect_has(error_of([&] { io::read_keras_archive(keras); }),
             {keras, "'layers/dense/vars/0'", "external files"});
}

TEST(H5Hardening, VirtualDatasetsAndExternalLinksAreRefused) {
  const std::string vds = tmp("virtual.weights.h5");
  io::write_h5_tensors(vds, {{"layers/dense/vars/1", Tensor::full(Shape{2}, 0.f)}});
  edit_h5(vds, [&](hid_t f) { virtual_dataset(f, "layers/dense/vars/0"); });
  expect_has(error_of([&] { io::read_h5_tensors(vds); }),
             {vds, "dataset 'layers/dense/vars/0'", "virtual dataset"});

  // Mapped from a FIFO: refused before anything opens it (before, the read hung for 300 s).
  const std::string fifo = tmp("vds_source.fifo");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string vds_fifo = tmp("virtual_fifo.weights.h5");
  io::write_h5_tensors(vds_fifo, {{"layers/dense/vars/1", Tensor::full(Shape{2}, 0.f)}});
  edit_h5(vds_fifo, [&](hid_t f) { virtual_dataset(f, "layers/dense/vars/0", fifo); });
  const std::string e =
      test_util::in_child([&] { return error_of([&] { io::read_h5_tensors(vds_fifo); }); }, 30);
  expect_has(e, {vds_fifo, "virtual dataset"});

  const std::string link = tmp("extlink.weights.h5");
  io::write_h5_tensors(link, {{"layers/dense/vars/1", Tensor::full(Shape{2}, 0.f)}});
  edit_h5(link, [&](hid_t f) {
    H5Lcreate_external("/etc/passwd", "/x", f, "layers/dense/vars/0", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_has(error_of([&] { io::read_h5_tensors(link); }),
             {link, "'layers/dense/vars/0'", "external link"});

  // Legacy: a layer group, and a weight, that are external links.
  const std::string legacy = tmp("extlink.h5");
  io::write_legacy_h5(legacy, one_dense_legacy());
  edit_h5(legacy, [&](hid_t f) {
    H5Ldelete(f, "dense/dense/kernel:0", H5P_DEFAULT);
    H5Lcreate_external("/etc/passwd", "/x", f, "dense/dense/kernel:0", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_has(error_of([&] { io::read_legacy_h5(legacy); }),
             {legacy, "dense/kernel:0", "external link"});
  io::write_legacy_h5(legacy, one_dense_legacy());
  edit_h5(legacy, [&](hid_t f) {
    H5Ldelete(f, "dense", H5P_DEFAULT);
    H5Lcreate_external("/etc/passwd", "/x", f, "dense", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_has(error_of([&] { io::read_legacy_h5(legacy); }), {legacy, "'dense'", "external link"});
}

// 2.0-3.0 GB from 165-318 KB files: one deflated dataset read again and again.
TEST(H5Hardening, OneCompressedDatasetReferencedManyTimesIsNotDecodedOverAndOver) {
  const hsize_t n = 1 << 20;  // 4 MB of zeros, a few KB deflated
  // Hard links in Keras 3's layout.
  const std::string weights = tmp("hardlinks.weights.h5");
  io::write_h5_tensors(weights, {}, {"layers/dense/vars"});
  edit_h5(weights, [&](hid_t f) {
    compressed_zeros(f, "layers/dense/vars/0", n);
    for (int i = 1; i <= 12; ++i)
      H5Lcreate_hard(f, "layers/dense/vars/0", f,
                     ("layers/dense/vars/" + std::to_string(i)).c_str(), H5P_DEFAULT, H5P_DEFAULT);
  });
  ASSERT_LT(fs::file_size(weights), 100000u);
  expect_has(error_of([&] { io::read_h5_tensors(weights); }),
             {weights, "references one dataset many times"});
  // A legacy weight_names list repeating one name.
  const std::string legacy = tmp("repeated.h5");
  io::write_legacy_h5(legacy, one_dense_legacy());
  edit_h5(legacy, [&](hid_t f) {
    H5Ldelete(f, "dense/dense/kernel:0", H5P_DEFAULT);
    compressed_zeros(f, "dense/dense/kernel:0", n);
    hid_t g = H5Gopen2(f, "dense", H5P_DEFAULT);
    set_names(g, "weight_names", std::vector<std::string>(12, "dense/kernel:0"));
    H5Gclose(g);
  });
  expect_has(error_of([&] { io::read_legacy_h5(legacy); }),
             {legacy, "references one dataset many times"});
  // Listed once, the same dataset reads.
  edit_h5(legacy, [&](hid_t f) {
    hid_t g = H5Gopen2(f, "dense", H5P_DEFAULT);
    set_names(g, "weight_names", {"dense/kernel:0"});
    H5Gclose(g);
  });
  const auto file = io::read_legacy_h5(legacy);
  ASSERT_EQ(file.layers.size(), 1u);
  ASSERT_EQ(file.layers[0].weights.size(), 1u);
  EXPECT_EQ(file.layers[0].weights[0].value.numel(), int64_t(n));
}

// Before, such files "loaded" with every weight left at its random initial value.
TEST(H5Hardening, LegacyFilesThatMatchNoWeightedLayerAreRefused) {
  const std::string empty = tmp("empty_layers.h5");
  io::write_legacy_h5(empty, {{}, "2.15.0", "tensorflow"});
  const std::string weightless = tmp("weightless_layers.h5");
  io::write_legacy_h5(weightless, {{{"flatten", {}}, {"dropout", {}}}, "2.15.0", "tensorflow"});
  for (const auto& path : {empty, weightless})
    for (bool by_name : {false, true}) {
      Model m = small_model();
      expect_has(error_of([&] { m.load_weights(path, {.by_name = by_name}); }),
                 {path, "no weighted layer matched", "(dense)"});
    }
  // A model without weights loads either file (nothing to match).
  Model none = Sequential({Input({4}), Flatten()});
  EXPECT_EQ(error_of([&] { none.load_weights(weightless); }), "");
}

TEST(H5Hardening, LegacyFileWithAnEmptyKerasVersionIsAnErrorNamingTheAttribute) {
  const std::string path = tmp("empty_version.h5");
  io::write_legacy_h5(path, one_dense_legacy());
  edit_h5(path, [&](hid_t f) {
    H5Adelete(f, "keras_version");
    const hsize_t zero = 0;
    hid_t space = H5Screate_simple(1, &zero, nullptr);
    hid_t attr = H5Acreate2(f, "keras_version", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Aclose(attr), H5Sclose(space);
  });
  const std::string e = error_of([&] { io::read_legacy_h5(path); });
  expect_has(e, {path, "'keras_version'", "0 strings"});
  EXPECT_EQ(e.find("_M_range_check"), std::string::npos) << e;
}

// A variable-length string list whose records all name one stored string: 3,500 names of one
// 20 KB string are 70 MB of text from a 100 KB file (and 4,000 of one 1 MB string, 4 GB:
// std::bad_alloc, with no file named). The names' bytes are counted from the records before any
// is decoded, against one budget for the file, and the error names the file.
TEST(H5Hardening, VariableLengthNamesSharingOneStoredStringAreCountedBeforeDecoding) {
  const std::string path = tmp("shared_vlen_names.h5");
  io::write_legacy_h5(path, one_dense_legacy());
  constexpr uint32_t kBig = 20011;  // bytes of the one stored string
  constexpr size_t kNames = 3500;
  edit_h5(path, [&](hid_t f) {
    H5Adelete(f, "layer_names");
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hsize_t n = kNames;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t attr = H5Acreate2(f, "layer_names", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const std::string big(kBig, 'L');
    std::vector<const char*> names(kNames, "d");
    names[0] = big.c_str();
    H5Awrite(attr, type, names.data());
    H5Aclose(attr), H5Sclose(space), H5Tclose(type);
  });
  // Every record (length u32, heap collection address u64, object index u32) now names the
  // first one's string.
  std::string bytes = test_util::read_text_file(path);
  const std::string first_len(reinterpret_cast<const char*>(&kBig), 4);
  size_t at = bytes.find(first_len);
  while (at != std::string::npos && bytes.compare(at + 16, 4, std::string("\1\0\0\0", 4)) != 0)
    at = bytes.find(first_len, at + 1);
  ASSERT_NE(at, std::string::npos) << "the records of layer_names were not found";
  for (size_t i = 1; i < kNames; ++i) bytes.replace(at + 16 * i, 16, bytes.substr(at, 16));
  test_util::write_binary(path, bytes);
  const std::string e = error_of([&] { io::read_legacy_h5(path); });
  expect_has(e, {path, "'layer_names'", "brings the names read to 7004", "bytes of text",
                 "more than the limit of 67108864", "damaged or crafted"});
}

TEST(H5Hardening, JsonMembersOfTheWrongShapeNameTheFileAndTheField) {
  Model m = small_model();
  const std::string good = tmp("good.keras");
  m.save(good);
  const io::KerasArchive a = io::read_keras_archive(good);
  const std::string weights_member = [&] {
    // The good file's weights member, as bytes (the zip's third member).
    const std::string w = tmp("good.weights.h5");
    io::write_h5_tensors(w, a.weights, a.groups);
    return test_util::read_text_file(w);
  }();
  auto keras_with = [&](const std::string& name, const std::string& config,
                        const std::string& metadata) {
    const std::string path = tmp(name);
    test_util::write_binary(path, test_util::make_zip({{"config.json", config},
                                                       {"metadata.json", metadata},
                                                       {"model.weights.h5", weights_member}}));
    return path;
  };
  std::string p = keras_with("array_config.keras", "[1, 2]", "{}");
  std::string e = error_of([&] { load_model(p); });
  expect_has(e, {p, "config.json", "JSON array, not an object"});
  EXPECT_EQ(e.find("type_error"), std::string::npos) << e;
  p = keras_with("array_metadata.keras", a.config.dump(), "[\"x\"]");
  e = error_of([&] { load_model_metadata(p); });
  expect_has(e, {p, "metadata.json", "JSON array, not an object"});
  p = keras_with("int_version.keras", a.config.dump(), "{\"keras_version\": 3}");
  expect_has(error_of([&] { load_model_metadata(p); }),
             {p, "metadata.json", "'keras_version'", "not a string"});
  p = keras_with("string_classes.keras", a.config.dump(), "{\"class_names\": \"cat\"}");
  expect_has(error_of([&] { load_model_metadata(p); }),
             {p, "metadata.json", "'class_names'", "not a list of strings"});
  p = keras_with("number_classes.keras", a.config.dump(), "{\"class_names\": [\"cat\", 7]}");
  expect_has(error_of([&] { load_model_metadata(p); }), {p, "'class_names'[1]", "not a string"});
}

namespace {

Model compiled_model(float lr) {
  Model m = Sequential({Input({6}), Dense(5, {.activation = "relu"}), Dense(3)});
  m.compile({.optimizer = optimizers::Adam(lr),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  return m;
}

// The archive of `m` with its optimizer/vars cut to the first `keep` (Keras's file of a
// compiled, never fitted model holds 2: iteration and learning rate).
io::KerasArchive with_optimizer_vars(const std::string& path, size_t keep) {
  io::KerasArchive a = io::read_keras_archive(path);
  std::vector<io::NamedTensor> kept;
  for (auto& t : a.weights) {
    const bool opt = t.name.rfind("optimizer/vars/", 0) == 0;
    if (!opt || std::stoul(t.name.substr(15)) < keep) kept.push_back(t);
  }
  a.weights = kept;
  return a;
}

}  // namespace

TEST(H5Hardening, KerasFileOfACompiledUnfittedModelLoadsWithAFreshOptimizer) {
  Model m = compiled_model(0.0025f);
  const std::string full = tmp("compiled.keras");
  m.save(full);
  const std::string unbuilt = tmp("unbuilt.keras");
  io::write_keras_archive(unbuilt, with_optimizer_vars(full, 2));
  Model loaded = load_model(unbuilt);
  ASSERT_TRUE(loaded.compile_config().optimizer);
  EXPECT_FLOAT_EQ(loaded.compile_config().optimizer->learning_rate_variable()->value.item(),
                  0.0025f);
  EXPECT_EQ(loaded.compile_config().optimizer->iterations()->value.item(), 0.f);
  // It trains from there.
  Tensor x = Tensor::full(Shape{8, 6}, 0.5f);
  Tensor y = Tensor::zeros(Shape{8}, DType::i32);
  const auto h = loaded.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0});
  EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
  // Three variables are neither layout: still an error naming the file.
  const std::string three = tmp("three.keras");
  io::write_keras_archive(three, with_optimizer_vars(full, 3));
  expect_has(error_of([&] { load_model(three); }), {three, "optimizer/vars holds 3 variables"});
}

TEST(H5Hardening, ANaNLearningRateInTheFileIsAnErrorNamingIt) {
  Model m = compiled_model(0.01f);
  const std::string full = tmp("lr.keras");
  m.save(full);
  for (float bad : {std::nanf(""), -1.f}) {
    io::KerasArchive a = io::read_keras_archive(full);
    for (auto& t : a.weights)
      if (t.name == "optimizer/vars/1") t.value = Tensor::full(t.value.shape(), bad);
    const std::string path = tmp("nan_lr.keras");
    io::write_keras_archive(path, a);
    expect_has(error_of([&] { load_model(path); }), {path, "optimizer/vars/1 (the learning rate)"});
  }
}

// Before, save_weights wrote the name; the reader stripped the space and called the file
// damaged (its layer group 'dense' was missing).
TEST(H5Hardening, NamesALegacyFileCannotHoldAreRefusedAtSaveTime) {
  KTensor in = Input({4});
  Model m(in, Dense(2, {.name = "dense "})(in), "spaces");
  const std::string path = tmp("spaces.h5");
  const std::string e = error_of([&] { m.save_weights(path); });
  expect_has(e, {path, "layer 'dense '", "ends in a space"});
  EXPECT_FALSE(fs::exists(path));
}

// An 827 KB .keras reached 1.5 GB: its weights member inflated to far more than the model in
// its config.json can use. load_model builds the model first and bounds the decoding by it.
TEST(H5Hardening, KerasWeightsBeyondWhatTheConfigImpliesAreRefused) {
  Model m = small_model();
  const std::string good = tmp("budget_good.keras");
  m.save(good);
  const io::KerasArchive a = io::read_keras_archive(good);
  const std::string w = tmp("budget.weights.h5");
  io::write_h5_tensors(w, a.weights, a.groups);
  edit_h5(w, [&](hid_t f) { compressed_zeros(f, "junk", hsize_t(1) << 24); });  // 64 MB
  ASSERT_LT(fs::file_size(w), 1000000u);
  const std::string path = tmp("budget.keras");
  test_util::write_binary(path, test_util::make_zip({
                                    {"config.json", a.config.dump()},
                                    {"metadata.json", a.metadata.dump()},
                                    {"model.weights.h5", test_util::read_text_file(w)},
                                }));
  expect_has(error_of([&] { load_model(path); }),
             {path, "dataset 'junk'", "the model's config implies"});
  // The model's own file loads.
  EXPECT_EQ(error_of([&] { load_model(good); }), "");
}
