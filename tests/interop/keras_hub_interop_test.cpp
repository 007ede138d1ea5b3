// KerasHub's layers and backbones against real keras-hub (on JAX), both ways (issue 36):
// keras-hub builds one small model per case of tests/interop/keras_hub_interop.py
// (PositionEmbedding, TokenAndPositionEmbedding, ReversibleEmbedding with reverse=True,
// SinePositionEncoding, RotaryEmbedding, ...) with random weights and saves it; Lockstep loads
// each .keras file and predicts within 1e-4 of keras-hub on the same inputs, on the reference
// and cpu backends, then saves it again, and keras-hub loads Lockstep's file and predicts
// within 1e-4 of Lockstep. Runs when LOCKSTEP_INTEROP_PYTHON names a python with keras-hub
// (ctest keras_hub_interop, label interop, through tests/interop/run_keras_interop.sh);
// skipped otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/lockstep.h"
#include "lockstep/nn/keras_hub.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

const char* const kLayerCases[] = {"position_embedding",   "position_embedding_start",
                                   "token_and_position",   "token_and_position_untied_mask",
                                   "reversible_tied",      "reversible_untied_cap",
                                   "keras_reversible",     "sine",
                                   "sine_wavelength",      "rotary",
                                   "rotary_heads",         "rotary_axes",
                                   "rotary_dynamic",       "encoder",
                                   "encoder_prenorm_relu", "encoder_attention_mask",
                                   "encoder_keras_mask",   "encoder_keras_mask_no_dropout",
                                   "decoder_causal",       "decoder_gelu_approximate",
                                   "decoder_no_causal",    "decoder_cross"};

void write_f32(const fs::path& p, const Tensor& t) {
  std::ofstream(p, std::ios::binary)
      .write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

Tensor read_raw(const fs::path& p, const Shape& s, DType dt) {
  Tensor t = Tensor::zeros(s, dt);
  std::ifstream f(p, std::ios::binary);
  f.read(static_cast<char*>(t.raw()), std::streamsize(t.nbytes()));
  EXPECT_TRUE(f.good()) << p;
  return t;
}

Shape shape_of(const json& j) { return Shape(j.at("shape").get<std::vector<int64_t>>()); }

// One case's files: its inputs by name and keras-hub's outputs, in the file's output order.
struct Case {
  TensorDict inputs;
  std::vector<Tensor> outputs;
};

Case read_case(const fs::path& dir, const std::string& name) {
  std::ifstream f(dir / (name + ".json"));
  std::stringstream ss;
  ss << f.rdbuf();
  const json spec = parse_json(ss.str(), name + ".json");
  Case c;
  int i = 0;
  for (const json& in : spec.at("inputs")) {
    const DType dt = in.at("dtype") == "int32" ? DType::i32 : DType::f32;
    c.inputs.tensors[in.at("name").get<std::string>()] =
        read_raw(dir / (name + ".in" + std::to_string(i++) + ".bin"), shape_of(in), dt);
  }
  i = 0;
  for (const json& out : spec.at("outputs"))
    c.outputs.push_back(
        read_raw(dir / (name + ".out" + std::to_string(i++) + ".f32"), shape_of(out), DType::f32));
  return c;
}

std::string script(const char* py) {
  return std::string(py) + " " + LOCKSTEP_SOURCE_DIR + "/tests/interop/keras_hub_interop.py ";
}

// Loads each case's .keras file, predicts on the reference and cpu backends against keras-hub's
// outputs, and saves it back (with Lockstep's outputs) for the python side's check.
void load_predict_save(const fs::path& dir, const std::string& name) {
  SCOPED_TRACE(name);
  const Case c = read_case(dir, name);
  Model m = load_model((dir / (name + ".keras")).string(), /*compile=*/false);
  for (const char* backend : {"reference", "cpu"}) {
    m.compile(
        {.optimizer = optimizers::get("sgd"), .loss = losses::get("mse"), .backend = backend});
    const Prediction p = m.predict(ModelData(c.inputs));
    const float d = test_util::max_abs_diff(p.outputs(), c.outputs);
    std::printf("%s (%s): lockstep loads keras-hub's file, max abs diff %.3g\n", name.c_str(),
                backend, d);
    EXPECT_LE(d, 1e-4f) << backend;
  }
  const Prediction p = m.predict(ModelData(c.inputs));
  for (size_t i = 0; i < p.size(); ++i)
    write_f32(dir / (name + ".lockstep.out" + std::to_string(i) + ".f32"), p[i]);
  m.save((dir / (name + ".lockstep.keras")).string());
}

}  // namespace

TEST(KerasHubInterop, LayersBothWaysAgainstRealKerasHub) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py)
    GTEST_SKIP() << "needs keras-hub: run `ctest -R keras_hub_interop` "
                    "(tests/interop/run_keras_interop.sh)";
  fs::path dir = test_util::temp_dir("keras_hub_interop", /*fresh=*/true);
  ASSERT_EQ(std::system((script(py) + "make " + dir.string()).c_str()), 0)
      << "keras-hub failed (above)";
  std::string names;
  for (const char* name : kLayerCases) {
    load_predict_save(dir, name);
    names += std::string(" ") + name;
  }
  EXPECT_EQ(std::system((script(py) + "check " + dir.string() + names).c_str()), 0)
      << "keras-hub did not load Lockstep's files or predicted differently (above)";
}

// keras-hub's BertBackbone and GPT2Backbone (vocabulary 100, 2 layers, 2 heads, hidden 32,
// intermediate 64, max sequence 32, random weights) load in Lockstep and match keras-hub's
// outputs on the same token ids, segment ids and padding masks; Lockstep saves them back under
// their KerasHub class and keras-hub loads them.
TEST(KerasHubInterop, BertAndGpt2BackbonesBothWays) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "needs keras-hub: run `ctest -R keras_hub_interop`";
  fs::path dir = test_util::temp_dir("keras_hub_backbones", /*fresh=*/true);
  ASSERT_EQ(std::system((script(py) + "make_backbones " + dir.string()).c_str()), 0)
      << "keras-hub failed (above)";
  for (const char* name : {"bert_backbone", "gpt2_backbone"}) load_predict_save(dir, name);
  EXPECT_EQ(
      std::system((script(py) + "check " + dir.string() + " bert_backbone gpt2_backbone").c_str()),
      0)
      << "keras-hub did not load Lockstep's files or predicted differently (above)";
}

// A model Lockstep builds with KerasHub's layers (a shared ReversibleEmbedding for ids and
// logits, positions, rotary, an encoder with a padding mask, a decoder with cross-attention):
// keras-hub loads Lockstep's file and predicts what Lockstep predicts.
TEST(KerasHubInterop, LockstepBuiltModelLoadsInKerasHub) {
  const char* py = std::getenv("LOCKSTEP_INTEROP_PYTHON");
  if (!py || !*py) GTEST_SKIP() << "needs keras-hub: run `ctest -R keras_hub_interop`";
  fs::path dir = test_util::temp_dir("keras_hub_built", /*fresh=*/true);
  namespace H = keras_hub;
  reset_layer_names();
  const uint64_t seed = random_seed();
  set_random_seed(3);
  KTensor ids = layers::Input({6}, "token_ids", DType::i32);
  KTensor pad = layers::Input({6}, "padding_mask", DType::i32);
  LayerHandle rev = H::ReversibleEmbedding(20, 8, {.name = "rev"});
  KTensor e = rev(ids);
  KTensor x = layers::Add("add")({e, H::PositionEmbedding(10, "glorot_uniform", "pos")(e)});
  x = H::RotaryEmbedding({.max_wavelength = 100, .name = "rope"})(x);
  KTensor enc = H::TransformerEncoder(16, 2, {.name = "enc"})({x, pad});
  KTensor dec = H::TransformerDecoder(16, 2, {.normalize_first = true, .name = "dec"})({x, enc});
  Model m({ids, pad}, {rev(dec)}, "built");
  set_random_seed(seed);
  std::vector<Tensor> w;  // weights of a useful size (the initializers' are small)
  for (const Tensor& t : m.get_weights())
    w.push_back(test_util::lcg_inputs(t.shape(), 17 + w.size()));
  m.set_weights(w);
  const Tensor in_ids = Tensor::from_vector_i32({2, 6}, {1, 5, 9, 13, 17, 19, 2, 4, 6, 0, 0, 0});
  const Tensor in_pad = Tensor::from_vector_i32({2, 6}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0});
  const Prediction p =
      m.predict(ModelData(TensorDict{{"token_ids", in_ids}, {"padding_mask", in_pad}}));
  write_f32(dir / "built.lockstep.out0.f32", p[0]);
  std::ofstream(dir / "built.in0.bin", std::ios::binary)
      .write(static_cast<const char*>(in_ids.raw()), std::streamsize(in_ids.nbytes()));
  std::ofstream(dir / "built.in1.bin", std::ios::binary)
      .write(static_cast<const char*>(in_pad.raw()), std::streamsize(in_pad.nbytes()));
  const json spec = {{"inputs",
                      {{{"name", "token_ids"}, {"dtype", "int32"}, {"shape", {2, 6}}},
                       {{"name", "padding_mask"}, {"dtype", "int32"}, {"shape", {2, 6}}}}},
                     {"outputs", {{{"name", "rev"}, {"shape", {2, 6, 20}}}}}};
  std::ofstream(dir / "built.json") << spec.dump();
  m.save((dir / "built.lockstep.keras").string());
  EXPECT_EQ(std::system((script(py) + "check " + dir.string() + " built").c_str()), 0)
      << "keras-hub did not load Lockstep's file or predicted differently (above)";
}
