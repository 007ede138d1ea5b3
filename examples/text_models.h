// The two text classifiers of the text job (shared by examples/text_classification.cpp and
// bench/train_bench.cpp, and mirrored by bench/peers.py's Keras and PyTorch models, so all
// measure the same network): token ids (batch, seq_len) -> class logits.
//   conv1d: Embedding -> Conv1D(128, 5, relu) -> GlobalMaxPooling1D -> Dense(64, relu) -> Dense
//   bilstm: Embedding -> Bidirectional(LSTM(64)) -> Dense
// mask_zero: the Embedding marks id 0 (padding) so the pooling / the LSTM skip padded steps
// (the example pads short texts; the benchmark's ids have no padding and no mask, as PyTorch's
// nn.LSTM has none without packing).
#pragma once
#include <string>

#include "lockstep/lockstep.h"

inline lockstep::Model text_classifier(const std::string& kind, int64_t vocab, int64_t seq_len,
                                       int64_t classes, bool mask_zero = false,
                                       double dropout = 0.0, int64_t embed_dim = 64) {
  using namespace lockstep::layers;
  auto ids = Input({seq_len}, "ids", lockstep::DType::i32);
  auto x = Embedding(vocab, embed_dim, {.mask_zero = mask_zero})(ids);
  if (kind == "conv1d") {
    x = Conv1D(128, 5, {.activation = "relu"})(x);
    x = GlobalMaxPooling1D()(x);
    if (dropout > 0) x = Dropout(dropout)(x);
    x = Dense(64, {.activation = "relu"})(x);
  } else if (kind == "bilstm") {
    x = Bidirectional(LSTM(64))(x);
    if (dropout > 0) x = Dropout(dropout)(x);
  } else {
    throw lockstep::Error("text_classifier: the model must be conv1d or bilstm, got '" + kind +
                          "'");
  }
  auto logits = Dense(classes)(x);
  return lockstep::Model({ids}, {logits}, "text_" + kind);
}
