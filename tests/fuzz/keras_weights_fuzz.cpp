// Fuzzes the .weights.h5 reader (model.load_weights of a Keras weights file; issue 25, item 1):
// the bytes as a file, parsed by libhdf5 in the reader process that sends the tensors back
// (read_h5_tensors, src/io/h5_isolated.cpp: every dataset's type, shape and size checked
// against the file before allocating; a crash of libhdf5 itself is an error naming the file;
// the crashes found are in tests/fuzz/regressions/keras_weights/hdf5_crash_*), then assigned by
// Keras's weight layout to a small fixed model (a Conv2D, a BatchNormalization and a Dense:
// keras_weight_slots), each tensor's shape and dtype checked as load_weights checks them. Seeds:
// that model's own file, and files whose dataspaces declare (2^31 - 1, 2^31 + 1) and
// (24576, 32768) floats over a few bytes of data (tests/fuzz/make_fuzz_corpus.cpp).
#include <map>

#include "fuzz_util.h"
#include "lockstep/io/keras_file.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"

namespace {

lockstep::Network small_model() {
  using namespace lockstep::layers;
  return lockstep::Network::sequential(
      {Input({4, 4, 1}), Conv2D(2, 3), BatchNormalization(), Flatten(), Dense(3)}, "small", true);
}

void load(const std::string& path) {
  using namespace lockstep;
  const std::vector<io::NamedTensor> tensors = io::read_h5_tensors(path);
  std::map<std::string, const Tensor*> by_name;
  for (auto& t : tensors) by_name[t.name] = &t.value;
  static Network net = small_model();
  for (auto& s : keras_weight_slots(net))
    for (size_t i = 0; i < s.weights.size(); ++i) {
      auto it = by_name.find(s.path + "/vars/" + std::to_string(i));
      LS_CHECK(it != by_name.end(), "no ", s.path);
      LS_CHECK(it->second->shape() == s.weights[i]->value.shape() &&
                   it->second->dtype() == s.weights[i]->value.dtype(),
               "mismatch");
      s.weights[i]->value.copy_from(*it->second);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lockstep::fuzz::write_scratch_file(data, size, ".weights.h5");
  lockstep::fuzz::expect_clean([&] { load(path); });
  return 0;
}
