// Fuzzes the node and tensor indices of functional configs (issue 25, item 2), structure-aware:
// the bytes decide, for a fixed set of layers (two inputs, two Dense layers, an Add, an output
// Dense), how many inbound nodes each has (0 to 2: a layer called twice is shared), what each
// [layer, node, tensor] reference names (the real layers, a missing one, ""), and its indices
// from a table of edge values (negative, one past the end, 2^32 - 1, 2^63 - 1, non-integers,
// strings, null), written in Keras 2's list form or Keras 3's keras_history form; and the
// input_layers / output_layers references. The model is built and summarised as
// `lockstep summary` does. The JSON fuzzer (keras_config) reaches such configs only rarely:
// here the structure is always right and the indices are always hostile.
#include <sstream>

#include "fuzz_util.h"
#include "lockstep/core/json.h"
#include "lockstep/nn/config.h"

namespace {

using lockstep::json;

struct Bytes {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  uint8_t next() { return at < size ? data[at++] : 0; }
};

// Mostly valid small indices, with every edge value the config loader must refuse.
json index_value(uint8_t b) {
  static const json kValues[] = {0,
                                 0,
                                 0,
                                 0,
                                 1,
                                 1,
                                 2,
                                 3,
                                 -1,
                                 -2,
                                 json(uint64_t(4294967295u)),
                                 json(int64_t(4294967296)),
                                 json(INT64_MAX),
                                 json(INT64_MIN),
                                 json(UINT64_MAX),
                                 0.5,
                                 -0.0,
                                 1e300,
                                 "0",
                                 nullptr,
                                 json::array(),
                                 json::object()};
  return kValues[b % (sizeof kValues / sizeof kValues[0])];
}

const char* const kLayerNames[] = {"x", "y", "a", "b", "add", "out", "missing", ""};

json reference(Bytes& in) {
  json r =
      json::array({kLayerNames[in.next() % 8], index_value(in.next()), index_value(in.next())});
  if (in.next() % 4 == 0) r.push_back(json::object());  // Keras 2's kwargs
  return r;
}

// One call of a layer: 1 to 3 input references, Keras 2 or Keras 3 style.
json inbound_node(Bytes& in, bool takes_list) {
  const int args = takes_list ? 1 + in.next() % 3 : 1;
  json refs = json::array();
  for (int i = 0; i < args; ++i) refs.push_back(reference(in));
  if (in.next() % 2 == 0) return refs;  // Keras 2: [[name, node, tensor, {}], ...]
  json tensors = json::array();
  for (auto& r : refs)
    tensors.push_back(
        {{"class_name", "__keras_tensor__"},
         {"config", {{"shape", {nullptr, 4}}, {"dtype", "float32"}, {"keras_history", r}}}});
  return {{"args", takes_list ? json::array({tensors}) : tensors}, {"kwargs", json::object()}};
}

json layer(const std::string& cls, const std::string& name, json config, Bytes& in) {
  config["name"] = name;
  json nodes = json::array();
  if (cls != "InputLayer")
    for (int n = in.next() % 3; n > 0; --n) nodes.push_back(inbound_node(in, cls == "Add"));
  return {{"class_name", cls}, {"name", name}, {"config", config}, {"inbound_nodes", nodes}};
}

json model_config(Bytes& in) {
  json layers = json::array();
  layers.push_back(layer("InputLayer", "x", {{"batch_shape", {nullptr, 4}}}, in));
  layers.push_back(layer("InputLayer", "y", {{"batch_shape", {nullptr, 4}}}, in));
  layers.push_back(layer("Dense", "a", {{"units", 4}}, in));
  layers.push_back(layer("Dense", "b", {{"units", 4}}, in));
  layers.push_back(layer("Add", "add", json::object(), in));
  layers.push_back(layer("Dense", "out", {{"units", 2}}, in));
  json inputs = json::array(), outputs = json::array();
  for (int n = 1 + in.next() % 2; n > 0; --n) inputs.push_back(reference(in));
  for (int n = 1 + in.next() % 2; n > 0; --n) outputs.push_back(reference(in));
  // A single reference may also be given bare ([name, node, tensor]), as Keras writes it.
  if (in.next() % 4 == 0) outputs = outputs[0];
  return {
      {"class_name", "Functional"},
      {"config",
       {{"name", "f"}, {"layers", layers}, {"input_layers", inputs}, {"output_layers", outputs}}}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  const json config = model_config(in);
  lockstep::fuzz::expect_clean([&] {
    lockstep::Network net = lockstep::network_from_config(config);
    std::ostringstream summary;
    net.summary(summary);
    (void)net.count_params();
    net.get_config().dump();
  });
  return 0;
}
