// Fuzzes network_from_json, the config parser behind model_from_json and load_model's
// config.json: the JSON (behind parse_json's depth limit), the Sequential / Functional structure
// (layer lists, inbound nodes, keras_history references and their node / tensor indices,
// duplicate names, nested models), every registered layer's factory and the shape checks of
// building the graph; then what `lockstep summary` does with the model (summary, parameter
// count) and get_config of what was built.
#include <sstream>

#include "keras_fuzz_util.h"
#include "lockstep/nn/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!lockstep::fuzz::small_model_config(text)) return 0;
  lockstep::fuzz::expect_clean([&] {
    lockstep::Network net = lockstep::network_from_json(text);
    std::ostringstream summary;
    net.summary(summary);
    (void)net.count_params();
    net.get_config().dump();
  });
  return 0;
}
