// Fuzzes the .keras loader: the bytes as a file, read as load_model reads it (libzip's archive,
// config.json and metadata.json, model.weights.h5 through HDF5), the model rebuilt from its
// config and the file's tensors checked and assigned by Keras's weight layout
// (keras_weight_slots). What load_model adds on top (Model, and a compile_config's optimizer)
// lives in the train module, which this target does not link.
#include <map>

#include "keras_fuzz_util.h"
#include "lockstep/io/keras_file.h"
#include "lockstep/nn/config.h"

namespace {

void load(const std::string& path) {
  using namespace lockstep;
  io::KerasArchive a = io::read_keras_archive(path);
  json config = a.config;
  if (config.is_object()) config.erase("compile_config");
  if (!fuzz::small_model_config(config.dump())) return;
  Network net = network_from_config(config);
  std::map<std::string, const Tensor*> by_name;
  for (auto& t : a.weights) by_name[t.name] = &t.value;
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
  const std::string path = lockstep::fuzz::write_scratch_file(data, size, ".keras");
  lockstep::fuzz::expect_clean([&] { load(path); });
  return 0;
}
