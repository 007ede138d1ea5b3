// TextVectorization on the host, the host-layer base and the text layers' Keras configs.
#include <algorithm>
#include <map>
#include <set>

#include "lockstep/core/error.h"
#include "lockstep/nn/config.h"
#include "nn/layers/text_lookup.h"

namespace lockstep {

// ---------------------------------------------------------------------------------------------
// HostPreprocessingLayer

std::vector<Value> HostPreprocessingLayer::call(CallContext&, const std::vector<Value>&) {
  LS_FAIL(class_name(), " '", name(), "' runs on the host, before the compiled step: apply it to ",
          "each batch in the input pipeline (ds.map(layer->map_fn()), or layer->apply(batch)) and ",
          "give the model its output, as Keras runs it in tf.data");
}

Tensor HostPreprocessingLayer::apply(const data::Strings&) const {
  LS_FAIL(class_name(), " '", name(), "' takes numbers (a Tensor), not strings");
}

Tensor HostPreprocessingLayer::apply(const Tensor&) const {
  LS_FAIL(class_name(), " '", name(), "' takes strings (data::Strings), not a tensor");
}

data::MapFn HostPreprocessingLayer::map_fn(size_t component) const {
  auto self = std::static_pointer_cast<const HostPreprocessingLayer>(shared_from_this());
  return [self, component](data::Element e) {
    LS_CHECK(component < e.size(), self->class_name(), " '", self->name(), "': map_fn(", component,
             ") but the element has ", e.size(), " component(s)");
    data::Component& c = e.parts[component];
    if (auto* strs = std::get_if<data::Strings>(&c)) {
      c = self->apply(*strs);
    } else if (auto* one = std::get_if<std::string>(&c)) {
      // An unbatched element: Keras's layer on a scalar string gives the unbatched result.
      Tensor t = self->apply(data::Strings{*one});
      std::vector<int64_t> dims = t.shape().vec();
      dims.erase(dims.begin());
      c = t.contiguous().reshape(Shape(dims)).clone();
    } else {
      c = self->apply(std::get<Tensor>(c));
    }
    return e;
  };
}

// ---------------------------------------------------------------------------------------------
// TextVectorizationLayer

namespace {

const std::set<std::string> kStandardize = {"lower_and_strip_punctuation", "lower",
                                            "strip_punctuation", ""};

void validate(const layers::TextVectorizationOptions& o, const std::string& who) {
  LS_CHECK(
      kStandardize.count(o.standardize), who, ": standardize must be ",
      "\"lower_and_strip_punctuation\", \"lower\", \"strip_punctuation\" or \"\" (None), got \"",
      o.standardize, "\" (a custom function is not supported)");
  LS_CHECK(o.split == "whitespace" || o.split == "character" || o.split.empty(), who,
           ": split must be \"whitespace\", \"character\" or \"\" (None), got \"", o.split, "\"");
  LS_CHECK(o.output_mode == "int" || o.output_mode == "multi_hot" || o.output_mode == "count" ||
               o.output_mode == "tf_idf",
           who, ": output_mode must be \"int\", \"multi_hot\", \"count\" or \"tf_idf\", got \"",
           o.output_mode, "\"");
  LS_CHECK(o.output_sequence_length == -1 || o.output_mode == "int", who,
           ": output_sequence_length goes only with output_mode \"int\"");
  LS_CHECK(o.output_sequence_length == -1 || o.output_sequence_length > 0, who,
           ": output_sequence_length must be positive, got ", o.output_sequence_length);
  for (int w : o.ngrams) LS_CHECK(w > 0, who, ": ngrams must be positive, got ", w);
  LS_CHECK(!(o.ngrams_up_to && o.ngrams.size() > 1), who,
           ": ngrams_up_to takes one width (Keras's ngrams=n)");
}

layers::LookupOptions lookup_options(const layers::TextVectorizationOptions& o,
                                     const std::string& name) {
  layers::LookupOptions l;
  l.max_tokens = o.max_tokens;
  l.mask_token = "";
  l.oov_token = "[UNK]";
  l.vocabulary = o.vocabulary;
  l.idf_weights = o.idf_weights;
  l.output_mode = o.output_mode;
  l.pad_to_max_tokens = o.pad_to_max_tokens;
  l.name = name + "/_lookup_layer";
  l.int_dtype = o.int_dtype;
  return l;
}

}  // namespace

TextVectorizationLayer::TextVectorizationLayer(layers::TextVectorizationOptions o)
    : HostPreprocessingLayer(o.name.empty() ? unique_layer_name("text_vectorization") : o.name),
      o_(std::move(o)) {
  if (o_.output_mode == "binary") o_.output_mode = "multi_hot";
  if (o_.output_mode == "tf-idf") o_.output_mode = "tf_idf";
  validate(o_, "TextVectorization '" + name() + "'");
  has_input_vocabulary_ = !o_.vocabulary.empty();
  lookup_ = std::make_shared<IndexLookupLayer>("StringLookup", lookup_options(o_, name()));
}

std::vector<std::string> TextVectorizationLayer::tokens(const std::string& text_in) const {
  std::string text = data::is_valid_utf8(text_in) ? text_in : data::sanitize_utf8(text_in);
  if (o_.standardize == "lower" || o_.standardize == "lower_and_strip_punctuation")
    text = data::lower_ascii(std::move(text));
  if (o_.standardize == "strip_punctuation" || o_.standardize == "lower_and_strip_punctuation")
    text = data::strip_punctuation(text);
  std::vector<std::string> toks;
  if (o_.split == "whitespace")
    toks = data::split_whitespace(text);
  else if (o_.split == "character")
    toks = data::split_characters(text);
  else
    toks = {text};
  if (o_.ngrams.empty()) return toks;
  std::vector<int> widths = o_.ngrams;
  if (o_.ngrams_up_to) {
    widths.clear();
    for (int w = 1; w <= o_.ngrams.front(); ++w) widths.push_back(w);
  }
  return data::ngrams(toks, widths, " ");
}

namespace {

// Splits `t` (valid UTF-8) as `split` says, into views of `t`.
void split_views(const std::string& t, const std::string& split,
                 std::vector<std::string_view>& out) {
  out.clear();
  const std::string_view v(t);
  if (split.empty()) {
    out.push_back(v);
  } else if (split == "character") {
    for (size_t i = 0; i < v.size();) {
      size_t n = 1;
      while (i + n < v.size() && (static_cast<unsigned char>(v[i + n]) & 0xC0) == 0x80) ++n;
      out.push_back(v.substr(i, n));
      i += n;
    }
  } else {
    auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    for (size_t i = 0; i < v.size();) {
      while (i < v.size() && space(v[i])) ++i;
      size_t j = i;
      while (j < v.size() && !space(v[j])) ++j;
      if (j > i) out.push_back(v.substr(i, j - i));
      i = j;
    }
  }
}

}  // namespace

// The ids of one text: tokens (and n-grams) looked up as views, without building a string per
// token (apply()'s hot path; tokens() is the same for adapt()).
std::vector<int64_t> TextVectorizationLayer::ids(const std::string& text_in) const {
  const IndexLookupState& s = lookup_->state();
  std::string text = data::is_valid_utf8(text_in) ? text_in : data::sanitize_utf8(text_in);
  if (o_.standardize == "lower" || o_.standardize == "lower_and_strip_punctuation")
    text = data::lower_ascii(std::move(text));
  if (o_.standardize == "strip_punctuation" || o_.standardize == "lower_and_strip_punctuation")
    text = data::strip_punctuation(text);
  thread_local std::vector<std::string_view> toks;
  thread_local std::string gram;
  split_views(text, o_.split, toks);
  std::vector<int64_t> out;
  if (o_.ngrams.empty()) {
    out.reserve(toks.size());
    for (auto t : toks) out.push_back(s.lookup(t));
    return out;
  }
  const int first = o_.ngrams_up_to ? 1 : 0;
  const size_t count = o_.ngrams_up_to ? size_t(o_.ngrams.front()) : o_.ngrams.size();
  for (size_t k = 0; k < count; ++k) {
    const size_t w = first ? k + 1 : size_t(o_.ngrams[k]);
    if (w == 0 || w > toks.size()) continue;
    for (size_t i = 0; i + w <= toks.size(); ++i) {
      if (w == 1) {
        out.push_back(s.lookup(toks[i]));
        continue;
      }
      gram.assign(toks[i]);
      for (size_t j = 1; j < w; ++j) gram.append(" ").append(toks[i + j]);
      out.push_back(s.lookup(gram));
    }
  }
  return out;
}

Tensor TextVectorizationLayer::apply(const data::Strings& batch) const {
  const IndexLookupState& s = lookup_->state();
  LS_CHECK(!s.tokens.empty() || has_input_vocabulary_, "TextVectorization '", name(),
           "': no vocabulary yet; pass `vocabulary` or call adapt() first");
  std::vector<std::vector<int64_t>> rows(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) rows[i] = ids(batch[i]);
  if (o_.output_mode == "int") return pad_rows(rows, o_.output_sequence_length, o_.int_dtype);
  return encode_categorical(rows, false, s.depth(), o_.output_mode, &s.idf, s.who(), false);
}

void TextVectorizationLayer::adapt(const data::Strings& texts) {
  LS_CHECK(!has_input_vocabulary_, "TextVectorization '", name(),
           "': cannot adapt a layer whose vocabulary was given");
  auto& s = const_cast<IndexLookupState&>(lookup_->state());
  s.counter.clear();
  for (const auto& t : texts) s.counter.add_document(tokens(t));
  s.finalize();
}

void TextVectorizationLayer::adapt(const data::Dataset& ds, int64_t steps) {
  LS_CHECK(!has_input_vocabulary_, "TextVectorization '", name(),
           "': cannot adapt a layer whose vocabulary was given");
  auto& s = const_cast<IndexLookupState&>(lookup_->state());
  s.counter.clear();
  data::Iterator it = ds.iterator();
  for (int64_t i = 0; steps < 0 || i < steps; ++i) {
    auto e = it.next();
    if (!e) break;
    LS_CHECK(e->size() >= 1 && !e->is_tensor(0), "TextVectorization '", name(),
             "': adapt() takes a dataset of strings (its first component), got ", e->str());
    const data::Component& c = e->parts[0];
    if (const auto* strs = std::get_if<data::Strings>(&c))
      for (const auto& t : *strs) s.counter.add_document(tokens(t));
    else
      s.counter.add_document(tokens(std::get<std::string>(c)));
  }
  s.finalize();
}

std::vector<std::string> TextVectorizationLayer::get_vocabulary(bool include_special_tokens) const {
  return lookup_->get_vocabulary(include_special_tokens);
}

void TextVectorizationLayer::set_vocabulary(const std::vector<std::string>& vocabulary,
                                            const std::vector<float>& idf_weights) {
  lookup_->set_vocabulary(vocabulary, idf_weights);
}

int64_t TextVectorizationLayer::vocabulary_size() const { return lookup_->vocabulary_size(); }

json TextVectorizationLayer::layer_config() const {
  json c;
  c["max_tokens"] = o_.max_tokens < 0 ? json(nullptr) : json(o_.max_tokens);
  c["standardize"] = o_.standardize.empty() ? json(nullptr) : json(o_.standardize);
  c["split"] = o_.split.empty() ? json(nullptr) : json(o_.split);
  if (o_.ngrams.empty())
    c["ngrams"] = nullptr;
  else if (o_.ngrams_up_to)
    c["ngrams"] = o_.ngrams.front();
  else
    c["ngrams"] = o_.ngrams;
  c["output_mode"] = o_.output_mode;
  c["output_sequence_length"] =
      o_.output_sequence_length < 0 ? json(nullptr) : json(o_.output_sequence_length);
  c["pad_to_max_tokens"] = o_.pad_to_max_tokens;
  c["sparse"] = false;
  c["ragged"] = false;
  c["vocabulary"] = o_.vocabulary.empty() ? json(nullptr) : json(o_.vocabulary);
  c["idf_weights"] = o_.idf_weights.empty() ? json(nullptr) : json(o_.idf_weights);
  c["encoding"] = "utf-8";
  c["vocabulary_size"] = vocabulary_size();
  return c;
}

// ---------------------------------------------------------------------------------------------
// Factories

namespace layers {

std::shared_ptr<TextVectorizationLayer> TextVectorization(TextVectorizationOptions o) {
  return std::make_shared<TextVectorizationLayer>(std::move(o));
}
std::shared_ptr<IndexLookupLayer> StringLookup(LookupOptions o) {
  return std::make_shared<IndexLookupLayer>("StringLookup", std::move(o));
}
std::shared_ptr<IndexLookupLayer> IntegerLookup(LookupOptions o) {
  return std::make_shared<IndexLookupLayer>("IntegerLookup", std::move(o));
}
std::shared_ptr<HashingLayer> Hashing(int64_t num_bins, HashingOptions o) {
  return std::make_shared<HashingLayer>(num_bins, std::move(o));
}
std::shared_ptr<CategoryEncodingLayer> CategoryEncoding(int64_t num_tokens,
                                                        CategoryEncodingOptions o) {
  return std::make_shared<CategoryEncodingLayer>(num_tokens, std::move(o));
}

}  // namespace layers

// ---------------------------------------------------------------------------------------------
// From Keras configs

namespace {

// The config without a non-float dtype (Keras gives Hashing and the lookups "int64"), which
// KerasConfigReader would refuse: these layers' outputs are not under a float policy.
json without_int_dtype(json c) {
  if (c.is_object() && c.contains("dtype")) {
    const json& d = c["dtype"];
    const std::string n = d.is_string()   ? d.get<std::string>()
                          : d.is_object() ? d.value("config", json::object()).value("name", "")
                                          : "";
    if (n != "float32" && n != "mixed_bfloat16") c.erase("dtype");
  }
  return c;
}

std::vector<std::string> string_list(KerasConfigReader& r, const std::string& key, bool integer) {
  const json& v = r.get(key);
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array())
    r.fail(key,
           "is " + v.dump().substr(0, 80) + "; expected a list (a file path is not supported)");
  for (const auto& x : v) {
    if (integer && x.is_number_integer())
      out.push_back(std::to_string(x.get<int64_t>()));
    else if (!integer && x.is_string())
      out.push_back(x.get<std::string>());
    else
      r.fail(key, "holds " + x.dump() + (integer ? "; expected integers" : "; expected strings"));
  }
  return out;
}

std::optional<std::string> token(KerasConfigReader& r, const std::string& key, bool integer,
                                 std::optional<std::string> fallback) {
  if (!r.has(key)) return fallback;
  const json& v = r.get(key);
  if (v.is_null()) return std::nullopt;
  if (integer && v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (!integer && v.is_string()) return v.get<std::string>();
  r.fail(key, "is " + v.dump() + (integer ? "; expected an integer" : "; expected a string"));
}

void refuse_unsupported(KerasConfigReader& r) {
  for (const char* k : {"sparse", "ragged", "invert"})
    if (r.get<bool>(k, false))
      r.fail(k,
             "is true; Lockstep's host preprocessing layers give dense outputs and do not "
             "invert");
  if (!r.get("salt").is_null())
    r.fail("salt", "is set; Lockstep hashes with FarmHash Fingerprint64 only (no SipHash salt)");
  r.expect("encoding", {"utf-8", "UTF-8"});
  r.get("vocabulary_size");  // the vocabulary's, read where it matters
  r.get("has_input_vocabulary");
}

int64_t optional_int(KerasConfigReader& r, const std::string& key) {
  return r.get<int64_t>(key, -1);
}

LayerPtr lookup_from_config(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, without_int_dtype(c));
  const bool integer = cls == "IntegerLookup";
  layers::LookupOptions o;
  o.name = r.name();
  o.max_tokens = optional_int(r, "max_tokens");
  o.num_oov_indices = r.get<int64_t>("num_oov_indices", 1);
  o.mask_token = token(r, "mask_token", integer, std::nullopt);
  o.oov_token = token(r, "oov_token", integer, integer ? "-1" : "[UNK]");
  o.vocabulary = string_list(r, "vocabulary", integer);
  o.idf_weights = r.get<std::vector<float>>("idf_weights", {});
  o.output_mode = r.get<std::string>("output_mode", "int");
  o.pad_to_max_tokens = r.get<bool>("pad_to_max_tokens", false);
  r.expect("vocabulary_dtype", {"int64", "string"});
  r.expect("oov_method", {"floormod", "farmhash"});
  const int64_t size = r.get<int64_t>("vocabulary_size", -1);
  refuse_unsupported(r);
  r.finish();
  auto layer = std::make_shared<IndexLookupLayer>(cls, o);
  layer->set_config_vocabulary_size(size);
  return layer;
}

LayerPtr text_vectorization_from_config(const json& c) {
  KerasConfigReader r("TextVectorization", without_int_dtype(c));
  layers::TextVectorizationOptions o;
  o.name = r.name();
  o.max_tokens = optional_int(r, "max_tokens");
  for (auto [key, out] : {std::pair{"standardize", &o.standardize}, {"split", &o.split}}) {
    const json& v = r.get(key);
    if (v.is_null())
      *out = "";
    else if (v.is_string())
      *out = v.get<std::string>();
    else
      r.fail(key, "is " + v.dump().substr(0, 80) + "; a custom function is not supported");
  }
  const json& ng = r.get("ngrams");
  if (ng.is_number_integer()) {
    o.ngrams = {ng.get<int>()};
  } else if (ng.is_array()) {
    o.ngrams = ng.get<std::vector<int>>();
    o.ngrams_up_to = false;
  } else if (!ng.is_null()) {
    r.fail("ngrams", "is " + ng.dump() + "; expected null, an integer or a list of integers");
  }
  o.output_mode = r.get<std::string>("output_mode", "int");
  o.output_sequence_length = optional_int(r, "output_sequence_length");
  o.pad_to_max_tokens = r.get<bool>("pad_to_max_tokens", false);
  o.vocabulary = string_list(r, "vocabulary", false);
  o.idf_weights = r.get<std::vector<float>>("idf_weights", {});
  const int64_t size = r.get<int64_t>("vocabulary_size", -1);
  refuse_unsupported(r);
  r.finish();
  auto layer = std::make_shared<TextVectorizationLayer>(o);
  layer->lookup().set_config_vocabulary_size(size);
  return layer;
}

LayerPtr hashing_from_config(const json& c) {
  KerasConfigReader r("Hashing", without_int_dtype(c));
  layers::HashingOptions o;
  o.name = r.name();
  const int64_t bins = r.get<int64_t>("num_bins", 0);
  o.mask_value = r.get("mask_value");
  o.output_mode = r.get<std::string>("output_mode", "int");
  refuse_unsupported(r);
  r.finish();
  return std::make_shared<HashingLayer>(bins, o);
}

LayerPtr category_encoding_from_config(const json& c) {
  KerasConfigReader r("CategoryEncoding", without_int_dtype(c));
  layers::CategoryEncodingOptions o;
  o.name = r.name();
  const int64_t n = r.get<int64_t>("num_tokens", 0);
  o.output_mode = r.get<std::string>("output_mode", "multi_hot");
  refuse_unsupported(r);
  r.finish();
  return std::make_shared<CategoryEncodingLayer>(n, o);
}

}  // namespace

const std::vector<std::string>& text_layer_classes() {
  static const std::vector<std::string> k = {"TextVectorization", "StringLookup", "IntegerLookup",
                                             "Hashing", "CategoryEncoding"};
  return k;
}

LayerPtr text_layer_from_config(const std::string& cls, const json& config) {
  if (cls == "TextVectorization") return text_vectorization_from_config(config);
  if (cls == "StringLookup" || cls == "IntegerLookup") return lookup_from_config(cls, config);
  if (cls == "Hashing") return hashing_from_config(config);
  if (cls == "CategoryEncoding") return category_encoding_from_config(config);
  LS_FAIL("text_layer_from_config: '", cls, "' is not a text preprocessing layer");
}

}  // namespace lockstep

namespace lockstep {

// ---------------------------------------------------------------------------------------------
// TextVectorization's output type and vocabulary asset

TensorType TextVectorizationLayer::output_type(const Shape&) const {
  if (o_.output_mode == "int") {
    LS_CHECK(o_.output_sequence_length > 0, "TextVectorization '", name(),
             "': output_sequence_length is None, so the length of its output changes from batch "
             "to batch; a compiled Lockstep model after it needs a fixed one (set "
             "output_sequence_length)");
    return {o_.int_dtype, Shape{o_.output_sequence_length}};
  }
  return {DType::f32, Shape{lookup_->state().depth()}};
}

std::string TextVectorizationLayer::vocabulary_asset() const { return lookup_->vocabulary_asset(); }

void TextVectorizationLayer::load_vocabulary_asset(const std::string& text) {
  lookup_->load_vocabulary_asset(text);
}

// ---------------------------------------------------------------------------------------------
// HostPreprocessing

data::Element HostPreprocessing::apply(data::Element e) const {
  for (size_t h = 0; h < heads.size(); ++h) {
    const size_t k = input_index[h];
    LS_CHECK(k < e.size(), "host preprocessing: the element has ", e.size(),
             " component(s), the model's string input is number ", k + 1);
    const auto& layers = heads[h].layers;
    Tensor t;
    if (const auto* strs = std::get_if<data::Strings>(&e.parts[k])) {
      t = layers.front()->apply(*strs);
    } else if (const auto* one = std::get_if<std::string>(&e.parts[k])) {
      t = layers.front()->apply(data::Strings{*one});
    } else {
      t = layers.front()->apply(std::get<Tensor>(e.parts[k]));
    }
    for (size_t i = 1; i < layers.size(); ++i) t = layers[i]->apply(t);
    if (t.dtype() != DType::f32) {  // the compiled input is float32, as Keras's Dense casts
      std::vector<float> v = t.to_vector();
      t = Tensor::from_vector(t.shape(), v);
    }
    e.parts[k] = t;
  }
  return e;
}

data::Dataset HostPreprocessing::map(const data::Dataset& ds) const {
  auto self = std::make_shared<HostPreprocessing>(*this);
  data::MapOptions mo;
  mo.name = "host_preprocessing";
  return ds.map([self](data::Element e) { return self->apply(std::move(e)); }, mo);
}

std::vector<std::shared_ptr<HostPreprocessingLayer>> HostPreprocessing::all_layers() const {
  std::vector<std::shared_ptr<HostPreprocessingLayer>> out;
  for (const auto& h : heads) out.insert(out.end(), h.layers.begin(), h.layers.end());
  return out;
}

namespace {

bool is_host_class(const json& entry) {
  const auto& k = text_layer_classes();
  return entry.is_object() && entry.contains("class_name") && entry["class_name"].is_string() &&
         std::find(k.begin(), k.end(), entry["class_name"].get<std::string>()) != k.end();
}

std::string entry_name(const json& entry) {
  if (entry.contains("name") && entry["name"].is_string()) return entry["name"];
  return entry.value("config", json::object()).value("name", "");
}

bool is_string_input(const json& entry) {
  if (!entry.is_object() || entry.value("class_name", "") != "InputLayer") return false;
  const json c = entry.value("config", json::object());
  return c.contains("dtype") && c["dtype"].is_string() && c["dtype"] == "string";
}

// Whether an entry's inbound_nodes refer to layer `name`.
bool refers_to(const json& a, const std::string& name) {
  if (a.is_object()) {
    if (a.value("class_name", "") == "__keras_tensor__") {
      const json h = a.value("config", json::object()).value("keras_history", json::array());
      return h.is_array() && !h.empty() && h[0] == name;
    }
    for (const auto& [k, v] : a.items())
      if (refers_to(v, name)) return true;
    return false;
  }
  if (a.is_array()) {
    if (a.size() >= 3 && a[0].is_string() && a[1].is_number() && a[0] == name) return true;
    for (const auto& x : a)
      if (refers_to(x, name)) return true;
  }
  return false;
}

Shape input_shape_of(const json& entry) {
  const json c = entry.value("config", json::object());
  json bs = c.contains("batch_shape") ? c["batch_shape"] : c.value("batch_input_shape", json());
  std::vector<int64_t> dims;
  if (bs.is_array())
    for (size_t i = 1; i < bs.size(); ++i)
      dims.push_back(bs[i].is_number() ? bs[i].get<int64_t>() : -1);
  if (dims.size() == 1 && dims[0] == 1) dims.clear();  // (None, 1) strings: one per sample
  return Shape(dims);
}

json replacement_input(const std::string& name, const Shape& shape, bool functional) {
  json bs = json::array({nullptr});
  for (int64_t d : shape) bs.push_back(d);
  json e = {{"module", "keras.layers"},
            {"class_name", "InputLayer"},
            {"config", {{"batch_shape", bs}, {"sparse", false}, {"ragged", false}, {"name", name}}},
            {"registered_name", nullptr}};
  if (functional) e["name"] = name, e["inbound_nodes"] = json::array();
  return e;
}

// The host layers after the string input at layers[at]; erases them and the input, inserts the
// replacement input, and returns the head.
HostPreprocessing::Head cut_head(json& layers, size_t at, bool functional) {
  HostPreprocessing::Head head;
  head.input_entry = layers[at];
  std::string cur = entry_name(layers[at]);
  std::vector<size_t> taken;
  for (size_t next = at + 1;;) {
    std::vector<size_t> users;
    if (functional) {
      for (size_t j = 0; j < layers.size(); ++j)
        if (j != at && refers_to(layers[j].value("inbound_nodes", json()), cur)) users.push_back(j);
    } else if (next < layers.size()) {
      users.push_back(next++);
    }
    if (users.size() != 1 || !is_host_class(layers[users[0]])) {
      LS_CHECK(!taken.empty(), "model config: the string input '", cur, "' feeds ",
               users.empty() ? std::string("no layer") : entry_name(layers[users[0]]),
               "; Lockstep takes strings only into TextVectorization, StringLookup or Hashing, "
               "which run on the host before the compiled model");
      break;
    }
    taken.push_back(users[0]);
    head.layer_entries.push_back(layers[users[0]]);
    head.layers.push_back(std::static_pointer_cast<HostPreprocessingLayer>(
        layer_from_config({{"class_name", layers[users[0]]["class_name"]},
                           {"config", layers[users[0]].value("config", json::object())}})));
    cur = entry_name(layers[users[0]]);
  }
  Shape shape = input_shape_of(head.input_entry);
  for (const auto& l : head.layers) shape = l->output_type(shape).shape;
  head.body_input = cur;
  taken.push_back(at);
  std::sort(taken.begin(), taken.end());
  for (size_t i = taken.size(); i-- > 0;) layers.erase(layers.begin() + long(taken[i]));
  layers.insert(layers.begin() + long(std::min(at, layers.size())),
                replacement_input(cur, shape, functional));
  return head;
}

// [name, 0, 0] triples in input_layers (one triple or a list of them).
void rename_input(json& input_layers, const std::string& from, const std::string& to) {
  if (input_layers.is_array() && input_layers.size() == 3 && input_layers[0].is_string()) {
    if (input_layers[0] == from) input_layers[0] = to;
    return;
  }
  if (input_layers.is_array())
    for (auto& t : input_layers) rename_input(t, from, to);
}

size_t input_position(const json& input_layers, const std::string& name) {
  if (input_layers.is_array() && input_layers.size() == 3 && input_layers[0].is_string()) return 0;
  for (size_t i = 0; i < input_layers.size(); ++i)
    if (input_layers[i].is_array() && !input_layers[i].empty() && input_layers[i][0] == name)
      return i;
  return 0;
}

}  // namespace

std::pair<json, std::shared_ptr<HostPreprocessing>> split_host_preprocessing(const json& config) {
  json cfg = config;
  const bool wrapped = cfg.is_object() && cfg.contains("config") && cfg["config"].is_object();
  json& inner = wrapped ? cfg["config"] : cfg;
  if (!inner.is_object() || !inner.contains("layers") || !inner["layers"].is_array())
    return {config, nullptr};
  const bool functional = inner.contains("input_layers");
  auto host = std::make_shared<HostPreprocessing>();
  json& layers = inner["layers"];
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!is_string_input(layers[i])) continue;
    LS_CHECK(functional || i == 0, "model config: a Sequential's string input must come first");
    const std::string in_name = entry_name(layers[i]);
    HostPreprocessing::Head head = cut_head(layers, i, functional);
    if (functional) {
      rename_input(inner["input_layers"], in_name, head.body_input);
      host->input_index.push_back(input_position(inner["input_layers"], head.body_input));
    } else {
      host->input_index.push_back(0);
    }
    host->heads.push_back(std::move(head));
  }
  if (host->heads.empty()) return {config, nullptr};
  return {cfg, host};
}

json HostPreprocessing::wrap_config(json body) const {
  const bool wrapped = body.is_object() && body.contains("config") && body["config"].is_object();
  json& inner = wrapped ? body["config"] : body;
  if (!inner.is_object() || !inner.contains("layers")) return body;
  json& layers = inner["layers"];
  for (const Head& h : heads) {
    for (size_t i = 0; i < layers.size(); ++i) {
      if (layers[i].value("class_name", "") != "InputLayer" ||
          entry_name(layers[i]) != h.body_input)
        continue;
      json entries = json::array({h.input_entry});
      for (size_t j = 0; j < h.layers.size(); ++j) {
        json e = h.layer_entries[j];
        e["config"] = h.layers[j]->config();
        entries.push_back(e);
      }
      layers.erase(layers.begin() + long(i));
      layers.insert(layers.begin() + long(i), entries.begin(), entries.end());
      break;
    }
    if (inner.contains("input_layers"))
      rename_input(inner["input_layers"], h.body_input, entry_name(h.input_entry));
  }
  return body;
}

std::vector<std::string> HostPreprocessing::asset_dirs() const {
  std::map<std::string, int> seen;
  std::vector<std::string> out;
  for (const auto& l : all_layers()) {
    const std::string base = keras_snake_case(l->class_name());
    const int k = seen[base]++;
    out.push_back("assets/layers/" + base + (k ? "_" + std::to_string(k) : ""));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> HostPreprocessing::assets() const {
  std::vector<std::pair<std::string, std::string>> out;
  const auto layers = all_layers();
  const auto dirs = asset_dirs();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string v = layers[i]->vocabulary_asset();
    if (v.empty()) continue;
    out.emplace_back(dirs[i] + "/vocabulary.txt", v);
    if (layers[i]->class_name() == "TextVectorization")
      out.emplace_back(dirs[i] + "/_lookup_layer/vocabulary.txt", v);
  }
  return out;
}

void HostPreprocessing::load_assets(const std::vector<std::pair<std::string, std::string>>& assets,
                                    const std::string& path) const {
  const auto layers = all_layers();
  const auto dirs = asset_dirs();
  auto find = [&](const std::string& name) -> const std::string* {
    for (const auto& [n, bytes] : assets)
      if (n == name) return &bytes;
    return nullptr;
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    const json c = layers[i]->config();
    const bool needs = c.contains("vocabulary") && c["vocabulary"].is_null();
    if (!needs) continue;
    const std::string* v = find(dirs[i] + "/vocabulary.txt");
    if (!v) v = find(dirs[i] + "/_lookup_layer/vocabulary.txt");
    LS_CHECK(v, "'", path, "': ", layers[i]->class_name(), " '", layers[i]->name(),
             "' has no vocabulary in its config and the file has no ", dirs[i],
             "/vocabulary.txt (was it adapted before saving?)");
    layers[i]->load_vocabulary_asset(*v);
  }
}

}  // namespace lockstep
