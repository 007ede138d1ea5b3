// The small GPT of examples/gpt.cpp and its data, shared with the tests (tests/nn/generate_test,
// tests/backends/xla_gpt_test) and bench/gpt_bench.cpp, so all of them run the same network:
//   token ids [batch, T] (int32, bytes: vocabulary 256)
//   -> keras_hub::TokenAndPositionEmbedding(256, T, d_model)
//   -> keras_hub::TransformerDecoder(4 d_model, heads, pre-norm, gelu) x layers
//   -> LayerNormalization -> Dense(256): next-byte logits [batch, T, 256]
// and the byte corpus: every quote of Debian's fortunes package (/usr/share/games/fortunes),
// shuffled by quote with a fixed seed, the last tenth held out for validation.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "lockstep/core/file_io.h"
#include "lockstep/distribute/distribution.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/keras_hub.h"
#include "lockstep/tools/text_export.h"

/// The GPT's sizes.
struct GptConfig {
  int64_t layers = 2, d_model = 128, heads = 4, seq_len = 64;
  int64_t ff_dim = 0;  // 0: 4 * d_model
  int64_t vocab = 256;
  double dropout = 0.0;
};

/// "small" (the default: 0.47M parameters, T = 64), "10m" (the benchmark's: 6 layers of 384,
/// 6 heads, T = 256, 10.9M parameters) and "tiny" (the tests': 2 layers of 32, T = 16).
inline GptConfig gpt_preset(const std::string& name) {
  if (name == "small") return GptConfig{};
  if (name == "10m") return GptConfig{.layers = 6, .d_model = 384, .heads = 6, .seq_len = 256};
  if (name == "tiny") return GptConfig{.layers = 2, .d_model = 32, .heads = 2, .seq_len = 16};
  throw lockstep::Error("gpt: --preset must be small, 10m or tiny, got '" + name + "'");
}

inline lockstep::Model gpt_model(const GptConfig& c) {
  namespace ls = lockstep;
  namespace hub = lockstep::keras_hub;
  // docs: begin model
  auto ids = ls::layers::Input({c.seq_len}, "token_ids", ls::DType::i32);
  ls::KTensor x = hub::TokenAndPositionEmbedding(c.vocab, c.seq_len, c.d_model)(ids);
  for (int64_t i = 0; i < c.layers; ++i)
    x = hub::TransformerDecoder(c.ff_dim > 0 ? c.ff_dim : 4 * c.d_model, c.heads,
                                {.dropout = c.dropout,
                                 .activation = "gelu_approximate",
                                 .normalize_first = true})(x);
  x = ls::layers::LayerNormalization({.epsilon = 1e-5})(x);
  ls::KTensor logits = ls::layers::Dense(c.vocab)(x);  // next-byte logits [batch, T, 256]
  return ls::Model(ids, logits, "gpt");
  // docs: end model
}

/// The GPT's model-parallel layout over a mesh with a "model" axis (keras.distribution's
/// LayoutMap, as Keras's guides lay out a transformer): the attention's query, key and value
/// kernels [d_model, heads, head_dim] split on their heads, the output projection [heads,
/// head_dim, d_model] on its heads, the feed-forward kernels on the model axis (the first's
/// columns, the second's rows: each device computes its share of the hidden units), the
/// embeddings and the logits' kernel on their feature dim. The rules match Keras 3's paths too
/// (".../self_attention/query/kernel"; Lockstep's are ".../query_dense/kernel"). Needs heads,
/// d_model and 4 d_model to divide by the model axis.
inline lockstep::distribution::LayoutMap gpt_layout_map(
    const lockstep::distribution::DeviceMesh& mesh) {
  lockstep::distribution::LayoutMap map(mesh);
  const auto none = std::nullopt;
  map["embeddings$"] = {none, "model"};
  map["attention/(query|key|value)[a-z_]*/kernel$"] = {none, "model", none};
  map["attention/(query|key|value)[a-z_]*/bias$"] = {"model", none};
  map["attention/(attention_output|output_dense)/kernel$"] = {"model", none, none};
  map["feedforward_intermediate_dense/kernel$"] = {none, "model"};
  map["feedforward_intermediate_dense/bias$"] = {"model"};
  map["feedforward_output_dense/kernel$"] = {"model", none};
  map["^dense[_0-9]*/kernel$"] = {none, "model"};
  map["^dense[_0-9]*/bias$"] = {"model"};
  return map;
}

/// The fortunes as bytes: training and validation text.
struct ByteCorpus {
  std::string train, validation;
  int64_t quotes = 0, files = 0;
};

/// Every category file of `dir` (a file with a .dat index beside it; the ASCII-art ones left
/// out), split into quotes, shuffled with `seed`, joined with blank lines; the last
/// `validation_fraction` of the quotes is the validation text.
inline ByteCorpus load_fortunes_corpus(const std::string& dir = lockstep::tools::kFortunesDir,
                                       double validation_fraction = 0.1, uint64_t seed = 42) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw lockstep::Error("gpt: no fortunes at '" + dir +
                          "' (apt-get install fortunes; scripts/setup.sh does)");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path p = e.path();
    if (p.has_extension() || !fs::exists(p.string() + ".dat")) continue;
    const std::string n = p.filename().string();
    if (n == "art" || n == "ascii-art") continue;
    names.push_back(p.string());
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> quotes;
  for (const auto& f : names)
    for (auto& q : lockstep::tools::split_fortunes(lockstep::read_regular_file(f, uint64_t(64) << 20, "fortune file")))
      quotes.push_back(std::move(q));
  if (quotes.size() < 10) throw lockstep::Error("gpt: fewer than 10 quotes under '" + dir + "'");
  std::mt19937_64 rng(seed);  // Fisher-Yates with the standard's engine: the same on any libc++
  for (size_t i = quotes.size() - 1; i > 0; --i) std::swap(quotes[i], quotes[rng() % (i + 1)]);
  const size_t n_val = std::max<size_t>(1, size_t(double(quotes.size()) * validation_fraction));
  ByteCorpus c;
  c.files = int64_t(names.size());
  c.quotes = int64_t(quotes.size());
  for (size_t i = 0; i < quotes.size(); ++i)
    (i + n_val < quotes.size() ? c.train : c.validation) += quotes[i] + "\n\n";
  return c;
}

/// `count` windows of `text`: x [count, T] its bytes from an offset, y [count, T] the next byte
/// of each (int32). random: offsets drawn with `seed`; else consecutive windows from the start.
inline std::pair<lockstep::Tensor, lockstep::Tensor> byte_windows(const std::string& text,
                                                                  int64_t count, int64_t T,
                                                                  bool random, uint64_t seed = 0) {
  const int64_t span = int64_t(text.size()) - T - 1;
  if (span < 0) throw lockstep::Error("gpt: the text is shorter than one window");
  if (!random) count = std::min<int64_t>(count, span / T + 1);
  lockstep::Tensor x = lockstep::Tensor::zeros({count, T}, lockstep::DType::i32);
  lockstep::Tensor y = lockstep::Tensor::zeros({count, T}, lockstep::DType::i32);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t at = random ? int64_t(rng() % uint64_t(span + 1)) : i * T;
    for (int64_t t = 0; t < T; ++t) {
      x.data<int32_t>()[i * T + t] = int32_t(uint8_t(text[size_t(at + t)]));
      y.data<int32_t>()[i * T + t] = int32_t(uint8_t(text[size_t(at + t + 1)]));
    }
  }
  return {x, y};
}
