// Keras's text and categorical preprocessing layers: TextVectorization, StringLookup,
// IntegerLookup, Hashing and CategoryEncoding, with Keras 3's semantics and configs.
//
// They run on the host, before the compiled step, as Keras runs TextVectorization in tf.data
// (strings have no place in a compiled graph): apply one to a batch and feed the result to the
// model, typically in the input pipeline.
//
//   auto vectorize = layers::TextVectorization({.max_tokens = 10000,
//                                               .output_sequence_length = 200});
//   vectorize->adapt(train.map(data::first_component));   // a Dataset of Strings batches
//   Tensor ids = vectorize->apply(data::Strings{"The cat sat.", "A dog"});  // i64 [2, 200]
//   auto ids_ds = train.map(vectorize->map_fn());  // Keras: text_ds.map(lambda x, y: (v(x), y))
//
// Each is a Layer (class_name, config both ways, load_model and model_from_json know it), but
// its call() adds nothing to a graph: calling one on a symbolic tensor in a compiled model is an
// error that says to apply it in the input pipeline instead.
//
// Differences from Keras, each an error naming the layer and the option: sparse=True, ragged=True,
// invert=True, a salt (SipHash) on Hashing or the lookups, a callable standardize or split
// (Keras saves those as registered functions).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/data/dataset.h"
#include "lockstep/nn/layer.h"

namespace lockstep {

/// Base of the host-side preprocessing layers: apply() on a batch instead of a graph call().
class HostPreprocessingLayer : public Layer {
 public:
  using Layer::Layer;
  /// Refused: these layers run on the host (apply()), before the compiled step.
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& inputs) override;
  /// The layer on a batch of strings (TextVectorization, StringLookup, Hashing); throws for a
  /// layer that takes integers.
  virtual Tensor apply(const data::Strings& batch) const;
  /// The layer on an integer (i32 / i64) or float tensor of ids (IntegerLookup, Hashing,
  /// CategoryEncoding); throws for a layer that takes strings.
  virtual Tensor apply(const Tensor& batch) const;
  /// For Dataset::map: replaces component `component` of each element (Strings or a Tensor)
  /// with apply()'s result, leaving the others (Keras's `ds.map(lambda x, y: (layer(x), y))`).
  data::MapFn map_fn(size_t component = 0) const;
  /// Whether apply() takes strings (true) or numbers.
  virtual bool takes_strings() const = 0;
  /// The output's shape and dtype for an input of `in` (without the batch; in = {} for one
  /// string per sample); an error when it is not static.
  virtual TensorType output_type(const Shape& in) const = 0;
  /// The vocabulary.txt Keras writes in the .keras file's assets for this layer ("" when the
  /// vocabulary is in the config, or the layer has none).
  virtual std::string vocabulary_asset() const { return ""; }
  /// Loads vocabulary.txt from the .keras assets (Keras's load_assets).
  virtual void load_vocabulary_asset(const std::string& text) {}
};

/// A lookup's vocabulary as Keras's IndexLookup keeps it (shared by TextVectorization,
/// StringLookup and IntegerLookup; defined in the .cpp).
struct IndexLookupState;

namespace layers {

/// keras.layers.TextVectorization's arguments and defaults.
struct TextVectorizationOptions {
  int64_t max_tokens = -1;  ///< vocabulary size cap, special tokens included; -1: None
  /// "lower_and_strip_punctuation" | "lower" | "strip_punctuation" | "" (None)
  std::string standardize = "lower_and_strip_punctuation";
  std::string split = "whitespace";  ///< "whitespace" | "character" | "" (None)
  /// n-grams: empty = None; {n} alone with ngrams_up_to = true is Keras's `ngrams=n` (widths
  /// 1..n); otherwise the tuple of widths.
  std::vector<int> ngrams;
  bool ngrams_up_to = true;             ///< `ngrams=n` (true) or `ngrams=(…)` (false)
  std::string output_mode = "int";      ///< "int" | "multi_hot" | "count" | "tf_idf" | "one_hot"
  int64_t output_sequence_length = -1;  ///< int mode: pad/truncate to this; -1: longest
  bool pad_to_max_tokens = false;       ///< non-int modes: width max_tokens
  std::vector<std::string> vocabulary;  ///< a fixed vocabulary (empty: adapt())
  std::vector<float> idf_weights;       ///< tf_idf with a fixed vocabulary
  std::string name;                     ///< "" = "text_vectorization", ...
  DType int_dtype = DType::i64;         ///< Lockstep: the dtype of "int" outputs (Keras int64)
};

/// keras.layers.StringLookup / IntegerLookup's arguments and defaults (IntegerLookup's tokens
/// are the decimal strings of its integers; its mask_token / oov_token defaults are None / -1).
struct LookupOptions {
  int64_t max_tokens = -1;                         ///< -1: None
  int64_t num_oov_indices = 1;                     ///< OOV buckets (>1: hashed as Keras does)
  std::optional<std::string> mask_token;           ///< None by default
  std::optional<std::string> oov_token = "[UNK]";  ///< IntegerLookup: "-1"
  std::vector<std::string> vocabulary;             ///< fixed vocabulary (empty: adapt())
  std::vector<float> idf_weights;                  ///< tf_idf with a fixed vocabulary
  std::string output_mode = "int";  ///< "int" | "one_hot" | "multi_hot" | "count" | "tf_idf"
  bool pad_to_max_tokens = false;   ///< non-int modes: width max_tokens
  std::string name;                 ///< "" = "string_lookup", ...
  DType int_dtype = DType::i64;     ///< Lockstep: the dtype of "int" outputs
};

/// keras.layers.Hashing's arguments.
struct HashingOptions {
  /// A string or an integer that goes to bin 0 (the others to 1..num_bins-1); null: none.
  json mask_value = nullptr;
  std::string output_mode = "int";  ///< "int" | "one_hot" | "multi_hot" | "count"
  std::string name;                 ///< "" = "hashing", ...
  DType int_dtype = DType::i64;     ///< the dtype of "int" outputs
};

/// keras.layers.CategoryEncoding's arguments.
struct CategoryEncodingOptions {
  std::string output_mode = "multi_hot";  ///< "one_hot" | "multi_hot" | "count"
  std::string name;                       ///< "" = "category_encoding", ...
};

}  // namespace layers

/// The lookups: StringLookup, IntegerLookup and TextVectorization's vocabulary.
class IndexLookupLayer : public HostPreprocessingLayer {
 public:
  /// A lookup of class `cls` ("StringLookup" | "IntegerLookup").
  IndexLookupLayer(std::string cls, layers::LookupOptions o);
  std::string class_name() const override { return cls_; }
  json layer_config() const override;
  bool takes_strings() const override { return cls_ == "StringLookup"; }
  Tensor apply(const data::Strings& batch) const override;
  Tensor apply(const Tensor& batch) const override;
  /// Builds the vocabulary from the data (a Dataset whose first component is Strings / a tensor).
  void adapt(const data::Dataset& ds, int64_t steps = -1);
  /// adapt() over one batch.
  void adapt(const data::Strings& batch);
  /// Keras's get_vocabulary (special tokens first when include_special_tokens).
  std::vector<std::string> get_vocabulary(bool include_special_tokens = true) const;
  /// Keras's set_vocabulary (special tokens at the front are recognised and dropped).
  void set_vocabulary(const std::vector<std::string>& vocabulary,
                      const std::vector<float>& idf_weights = {});
  int64_t vocabulary_size() const;  ///< including the mask and OOV indices
  /// The lookup itself (for TextVectorization): token rows -> ids or encoded counts.
  const IndexLookupState& state() const { return *state_; }
  /// The idf weights in use (tf_idf), one per vocabulary index.
  std::vector<float> idf_weights() const;
  TensorType output_type(const Shape& in) const override;
  std::string vocabulary_asset() const override;
  void load_vocabulary_asset(const std::string& text) override;
  /// The vocabulary size a Keras config states (before its assets are loaded).
  void set_config_vocabulary_size(int64_t n);

 private:
  std::string cls_;
  std::shared_ptr<IndexLookupState> state_;
};

/// keras.layers.TextVectorization (see the top of this file).
class TextVectorizationLayer : public HostPreprocessingLayer {
 public:
  /// keras.layers.TextVectorization(...) (layers::TextVectorization makes one).
  explicit TextVectorizationLayer(layers::TextVectorizationOptions o);
  std::string class_name() const override { return "TextVectorization"; }
  json layer_config() const override;
  bool takes_strings() const override { return true; }
  /// Strings [N] -> i64 [N, L] (int) or f32 [N, V] (multi_hot, count, tf_idf).
  Tensor apply(const data::Strings& batch) const override;
  /// Keras's adapt: the vocabulary (and document frequencies) of the texts in the first
  /// component of each element (Strings batches or single strings), over `steps` elements (-1:
  /// all).
  void adapt(const data::Dataset& ds, int64_t steps = -1);
  /// adapt() over one batch of texts.
  void adapt(const data::Strings& texts);
  /// The tokens of one text after standardize, split and ngrams (Keras's _preprocess).
  std::vector<std::string> tokens(const std::string& text) const;
  /// The vocabulary index of each of tokens(text) (apply()'s rows, before padding).
  std::vector<int64_t> ids(const std::string& text) const;
  /// Keras's get_vocabulary: "" and "[UNK]" first (int mode; "[UNK]" alone otherwise) when
  /// include_special_tokens.
  std::vector<std::string> get_vocabulary(bool include_special_tokens = true) const;
  /// Keras's set_vocabulary (and idf weights for tf_idf), special tokens at the front recognised.
  void set_vocabulary(const std::vector<std::string>& vocabulary,
                      const std::vector<float>& idf_weights = {});
  int64_t vocabulary_size() const;  ///< including "" and "[UNK]"
  /// The options it was made with.
  const layers::TextVectorizationOptions& options() const { return o_; }
  /// The lookup inside (Keras's _lookup_layer).
  const IndexLookupLayer& lookup() const { return *lookup_; }
  IndexLookupLayer& lookup() { return *lookup_; }  ///< the same, to change
  TensorType output_type(const Shape& in) const override;
  std::string vocabulary_asset() const override;
  void load_vocabulary_asset(const std::string& text) override;
  /// Whether the vocabulary was given (config "vocabulary") rather than adapted: Keras then
  /// keeps it in the config, otherwise in assets/vocabulary.txt of the .keras file.
  bool has_input_vocabulary() const { return has_input_vocabulary_; }

 private:
  layers::TextVectorizationOptions o_;
  std::shared_ptr<IndexLookupLayer> lookup_;
  bool has_input_vocabulary_ = false;
};

/// keras.layers.Hashing(num_bins): FarmHash Fingerprint64 of each string (integers: of their
/// decimal form), modulo num_bins (tf.strings.to_hash_bucket_fast, bit for bit).
class HashingLayer : public HostPreprocessingLayer {
 public:
  /// keras.layers.Hashing(num_bins, ...) (layers::Hashing makes one).
  HashingLayer(int64_t num_bins, layers::HashingOptions o);
  std::string class_name() const override { return "Hashing"; }
  json layer_config() const override;
  bool takes_strings() const override { return true; }
  Tensor apply(const data::Strings& batch) const override;
  Tensor apply(const Tensor& batch) const override;
  /// The bin of one string.
  int64_t bin(const std::string& s) const;
  TensorType output_type(const Shape& in) const override;

 private:
  int64_t num_bins_;
  layers::HashingOptions o_;
};

/// keras.layers.CategoryEncoding(num_tokens): integer ids [N] or [N, k] -> f32 [N, num_tokens];
/// an id outside [0, num_tokens) is an error naming the layer, the id and the range.
class CategoryEncodingLayer : public HostPreprocessingLayer {
 public:
  /// keras.layers.CategoryEncoding(num_tokens, ...) (layers::CategoryEncoding makes one).
  CategoryEncodingLayer(int64_t num_tokens, layers::CategoryEncodingOptions o);
  std::string class_name() const override { return "CategoryEncoding"; }
  json layer_config() const override;
  bool takes_strings() const override { return false; }
  Tensor apply(const Tensor& batch) const override;
  TensorType output_type(const Shape& in) const override;

 private:
  int64_t num_tokens_;
  layers::CategoryEncodingOptions o_;
};

namespace layers {
/// keras.layers.TextVectorization.
std::shared_ptr<TextVectorizationLayer> TextVectorization(TextVectorizationOptions o = {});
/// keras.layers.StringLookup.
std::shared_ptr<IndexLookupLayer> StringLookup(LookupOptions o = {});
/// keras.layers.IntegerLookup (mask_token None, oov_token -1 unless given).
std::shared_ptr<IndexLookupLayer> IntegerLookup(LookupOptions o = {.oov_token = "-1"});
/// keras.layers.Hashing.
std::shared_ptr<HashingLayer> Hashing(int64_t num_bins, HashingOptions o = {});
/// keras.layers.CategoryEncoding.
std::shared_ptr<CategoryEncodingLayer> CategoryEncoding(int64_t num_tokens,
                                                        CategoryEncodingOptions o = {});
}  // namespace layers

/// The string-taking head of a Keras model (Network::host_preprocessing()): for each model input
/// of dtype "string", the chain of host layers after it (Input(dtype="string") ->
/// TextVectorization -> ...). network_from_config cuts the chain off: the compiled network's
/// input takes the last host layer's output (its name, shape and dtype), and fit / evaluate /
/// predict on a Dataset run the chain on the host first; get_config() puts it back.
struct HostPreprocessing {
  /// One string input and its host layers.
  struct Head {
    json input_entry;                 ///< the InputLayer's entry in the Keras config, as read
    std::vector<json> layer_entries;  ///< the host layers' entries (inbound_nodes kept)
    std::vector<std::shared_ptr<HostPreprocessingLayer>> layers;  ///< in call order
    std::string body_input;  ///< the compiled network's input that replaces them
  };
  std::vector<Head> heads;  ///< in the order of the compiled network's inputs that replace them
  std::vector<size_t> input_index;  ///< heads[i] feeds the compiled network's input input_index[i]
  /// Runs each head on its input component (Strings) of a batched element {x_1..x_I, ...}.
  data::Element apply(data::Element e) const;
  /// Dataset::map of apply (what fit / evaluate / predict run on a Dataset).
  data::Dataset map(const data::Dataset& ds) const;
  /// The compiled network's config with the heads put back in front (Keras's layout).
  json wrap_config(json body) const;
  /// The host layers, in order (for saving and loading their vocabularies).
  std::vector<std::shared_ptr<HostPreprocessingLayer>> all_layers() const;
  /// Each layer's .keras asset path as Keras's saving_lib names it
  /// ("assets/layers/text_vectorization", "..._1" for the second of a class).
  std::vector<std::string> asset_dirs() const;
  /// The assets Keras writes for the adapted vocabularies: "<dir>/vocabulary.txt" (and, for
  /// TextVectorization, "<dir>/_lookup_layer/vocabulary.txt" too), name -> text.
  std::vector<std::pair<std::string, std::string>> assets() const;
  /// Loads the vocabularies from a .keras file's assets; a layer whose vocabulary is in neither
  /// the config nor the assets is an error naming it and the member.
  void load_assets(const std::vector<std::pair<std::string, std::string>>& assets,
                   const std::string& path) const;
};
/// Cuts the string heads off a Keras model config (see HostPreprocessing): the config of the
/// compiled rest, and the heads (nullptr when no input has dtype "string"). A string input
/// followed by anything but host layers, or a host layer whose output shape is not static
/// (TextVectorization int mode without output_sequence_length), is an error naming it.
std::pair<json, std::shared_ptr<HostPreprocessing>> split_host_preprocessing(const json& config);

/// Builds one of these layers from its Keras config (class_name: TextVectorization,
/// StringLookup, IntegerLookup, Hashing, CategoryEncoding); layer_configs.cpp registers it.
LayerPtr text_layer_from_config(const std::string& class_name, const json& config);
/// The class names text_layer_from_config takes.
const std::vector<std::string>& text_layer_classes();

}  // namespace lockstep
