// StringLookup / IntegerLookup (Keras's IndexLookup), Hashing and CategoryEncoding on the host.
#include "nn/layers/text_lookup.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {

const std::set<std::string> kLookupModes = {"int", "one_hot", "multi_hot", "count", "tf_idf"};

// The values of an integer (or float, cast as Keras casts to int64) tensor, and its rows.
std::vector<int64_t> int_values(const Tensor& t_in, const std::string& who) {
  const Tensor t = t_in.contiguous();
  const int64_t n = t.numel();
  std::vector<int64_t> v(size_t(n), 0);
  switch (t.dtype()) {
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.data<int32_t>()[i];
      break;
    case DType::i64:
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.data<int64_t>()[i];
      break;
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int64_t(t.data<float>()[i]);
      break;
    default:
      LS_FAIL(who, ": takes int32, int64 or float32 ids, got ", dtype_name(t.dtype()));
  }
  return v;
}

void check_rank(const Tensor& t, const std::string& who) {
  LS_CHECK(t.rank() == 1 || t.rank() == 2, who, ": takes a batch [N] or [N, k], got shape ",
           t.shape().str());
}

std::vector<std::vector<int64_t>> as_rows(const std::vector<int64_t>& v, const Tensor& t) {
  const int64_t n = t.dim(0), k = t.rank() == 2 ? t.dim(1) : 1;
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    rows[size_t(i)].assign(v.begin() + i * k, v.begin() + (i + 1) * k);
  return rows;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Encoding

Tensor encode_categorical(const std::vector<std::vector<int64_t>>& rows, bool rank1, int64_t depth,
                          const std::string& mode, const std::vector<float>* idf,
                          const std::string& who, bool strict) {
  const bool one_hot = mode == "one_hot";
  if (one_hot && !rank1)
    for (const auto& r : rows)
      LS_CHECK(r.size() == 1, who, ": output_mode \"one_hot\" takes one id per sample ([N] or ",
               "[N, 1]); use \"multi_hot\" or \"count\" for [N, k]");
  const bool per_sample = one_hot || !rank1;  // rank-1 multi_hot/count: one row for the batch
  const int64_t out_rows = per_sample ? int64_t(rows.size()) : 1;
  Tensor out = per_sample ? Tensor::zeros({out_rows, depth}) : Tensor::zeros({depth});
  float* p = out.data<float>();
  const bool binary = mode == "multi_hot" || one_hot;
  for (size_t r = 0; r < rows.size(); ++r) {
    float* row = p + (per_sample ? int64_t(r) * depth : 0);
    for (int64_t id : rows[r]) {
      if (id < 0 || id >= depth) {
        LS_CHECK(!strict || id == kDropped, who, ": id ", id, " is outside [0, ", depth,
                 ") (num_tokens ", depth, ")");
        continue;
      }
      row[id] = binary ? 1.f : row[id] + 1.f;
    }
  }
  if (mode == "tf_idf" && idf) {
    for (int64_t r = 0; r < out_rows; ++r)
      for (int64_t j = 0; j < depth && j < int64_t(idf->size()); ++j)
        p[r * depth + j] *= (*idf)[size_t(j)];
  }
  return out;
}

Tensor pad_rows(const std::vector<std::vector<int64_t>>& rows, int64_t length, DType dtype) {
  if (length < 0) {
    length = 0;
    for (const auto& r : rows) length = std::max(length, int64_t(r.size()));
  }
  Tensor out = Tensor::zeros({int64_t(rows.size()), length}, dtype);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t n = std::min(length, int64_t(rows[i].size()));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = int64_t(i) * length + j;
      if (dtype == DType::i32)
        out.data<int32_t>()[at] = int32_t(rows[i][size_t(j)]);
      else
        out.data<int64_t>()[at] = rows[i][size_t(j)];
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// IndexLookupState

int64_t IndexLookupState::depth() const {
  if (o.pad_to_max_tokens && o.max_tokens > 0) return o.max_tokens;
  return tokens.empty() && frozen_size > 0 ? frozen_size : vocabulary_size();
}

int64_t IndexLookupState::lookup(std::string_view token) const {
  if (o.mask_token && token == *o.mask_token) return o.output_mode == "int" ? 0 : kDropped;
  auto it = table.find(token);
  if (it != table.end()) return it->second;
  LS_CHECK(o.num_oov_indices > 0, who(), ": \"", token,
           "\" is not in the vocabulary and num_oov_indices is 0 (Keras: \"all inputs should be "
           "in vocabulary\"); set num_oov_indices = 1");
  if (o.num_oov_indices == 1) return oov_start();
  const int64_t n = o.num_oov_indices;
  if (integer) {  // floormod, Keras's default oov_method for integers
    const int64_t v = std::stoll(std::string(token));
    return oov_start() + ((v % n) + n) % n;
  }
  return oov_start() + int64_t(data::farmhash_fingerprint64(token) % uint64_t(n));
}

void IndexLookupState::install(std::vector<std::string> vocabulary) {
  std::set<std::string> seen;
  std::vector<std::string> repeated;
  for (const auto& t : vocabulary)
    if (!seen.insert(t).second) repeated.push_back(t);
  LS_CHECK(repeated.empty(), who(), ": the vocabulary repeats \"", repeated.front(),
           "\"; each term must appear once");
  if (o.mask_token)
    LS_CHECK(!seen.count(*o.mask_token), who(), ": the mask token \"", *o.mask_token,
             "\" is in the vocabulary past the special tokens; leave it out, or put the special "
             "tokens first");
  const int64_t size = token_start() + int64_t(vocabulary.size());
  LS_CHECK(o.max_tokens < 0 || size <= o.max_tokens, who(), ": a vocabulary of ", size,
           " (special tokens included) is larger than max_tokens ", o.max_tokens);
  tokens = std::move(vocabulary);
  table.clear();
  for (size_t i = 0; i < tokens.size(); ++i) table[tokens[i]] = token_start() + int64_t(i);
}

void IndexLookupState::set_vocabulary(const std::vector<std::string>& vocabulary,
                                      const std::vector<float>& weights) {
  LS_CHECK(!vocabulary.empty(), who(), ": the vocabulary is empty");
  if (o.output_mode == "tf_idf")
    LS_CHECK(weights.size() == vocabulary.size(), who(), ": output_mode \"tf_idf\" needs one ",
             "idf weight per vocabulary term (", vocabulary.size(), " terms, ", weights.size(),
             " weights)");
  else
    LS_CHECK(weights.empty(), who(), ": idf_weights only go with output_mode \"tf_idf\"");
  std::vector<std::string> special(size_t(oov_start()), o.mask_token.value_or(""));
  for (int64_t i = 0; i < o.num_oov_indices; ++i) special.push_back(o.oov_token.value_or(""));
  const bool found = vocabulary.size() >= special.size() &&
                     std::equal(special.begin(), special.end(), vocabulary.begin());
  install(
      found ? std::vector<std::string>(vocabulary.begin() + long(special.size()), vocabulary.end())
            : vocabulary);
  idf.clear();
  if (o.output_mode != "tf_idf") return;
  const double mean = std::accumulate(weights.begin(), weights.end(), 0.0) / double(weights.size());
  if (!found) idf.assign(size_t(token_start()), float(mean));
  idf.insert(idf.end(), weights.begin(), weights.end());
  if (o.pad_to_max_tokens && o.max_tokens > int64_t(idf.size()))
    idf.resize(size_t(o.max_tokens), 0.f);
}

void IndexLookupState::finalize() {
  std::vector<std::string> exclude;
  if (o.mask_token) exclude.push_back(*o.mask_token);
  if (o.oov_token) exclude.push_back(*o.oov_token);
  const int64_t learned =
      o.max_tokens > 0 ? std::max<int64_t>(0, o.max_tokens - token_start()) : -1;
  std::vector<std::string> vocab = counter.vocabulary(learned, exclude);
  install(vocab);
  idf.clear();
  if (o.output_mode == "tf_idf") {
    const double docs = double(counter.num_documents());
    std::vector<float> w;
    for (const auto& t : tokens)
      w.push_back(float(std::log(1.0 + docs / (1.0 + double(counter.document_count(t))))));
    float mean = 0.f;
    for (float x : w) mean += x;
    mean = w.empty() ? 0.f : mean / float(w.size());
    idf.assign(size_t(token_start()), mean);
    idf.insert(idf.end(), w.begin(), w.end());
    if (o.pad_to_max_tokens && o.max_tokens > int64_t(idf.size()))
      idf.resize(size_t(o.max_tokens), 0.f);
  }
  counter.clear();
}

std::vector<std::string> IndexLookupState::vocabulary(bool include_special_tokens) const {
  std::vector<std::string> v;
  if (include_special_tokens) {
    if (oov_start() == 1) v.push_back(*o.mask_token);
    for (int64_t i = 0; i < o.num_oov_indices; ++i) v.push_back(o.oov_token.value_or(""));
  }
  v.insert(v.end(), tokens.begin(), tokens.end());
  return v;
}

// ---------------------------------------------------------------------------------------------
// IndexLookupLayer

IndexLookupLayer::IndexLookupLayer(std::string cls, layers::LookupOptions o)
    : HostPreprocessingLayer(
          o.name.empty()
              ? unique_layer_name(cls == "StringLookup" ? "string_lookup" : "integer_lookup")
              : o.name),
      cls_(std::move(cls)),
      state_(std::make_shared<IndexLookupState>()) {
  IndexLookupState& s = *state_;
  s.cls = cls_;
  s.name = name();
  s.integer = cls_ == "IntegerLookup";
  if (o.output_mode == "binary") o.output_mode = "multi_hot";  // Keras's deprecated names
  if (o.output_mode == "tf-idf") o.output_mode = "tf_idf";
  LS_CHECK(kLookupModes.count(o.output_mode), s.who(), ": output_mode must be \"int\", ",
           "\"one_hot\", \"multi_hot\", \"count\" or \"tf_idf\", got \"", o.output_mode, "\"");
  LS_CHECK(o.num_oov_indices >= 0, s.who(), ": num_oov_indices must be >= 0, got ",
           o.num_oov_indices);
  LS_CHECK(o.max_tokens < 0 || o.max_tokens > 1, s.who(),
           ": max_tokens must be > 1 (or None), got ", o.max_tokens);
  LS_CHECK(!o.pad_to_max_tokens || o.max_tokens > 0, s.who(),
           ": pad_to_max_tokens needs max_tokens");
  LS_CHECK(o.int_dtype == DType::i32 || o.int_dtype == DType::i64, s.who(),
           ": int_dtype must be int32 or int64");
  s.o = o;
  if (!o.vocabulary.empty()) {
    s.has_input_vocabulary = true;
    s.input_vocabulary = o.vocabulary;
    s.input_idf = o.idf_weights;
    s.set_vocabulary(o.vocabulary, o.idf_weights);
  } else {
    LS_CHECK(o.idf_weights.empty(), s.who(), ": idf_weights need a vocabulary");
  }
}

json IndexLookupLayer::layer_config() const {
  const IndexLookupState& s = *state_;
  auto token = [&](const std::optional<std::string>& t) -> json {
    if (!t) return nullptr;
    if (s.integer) return std::stoll(*t);
    return *t;
  };
  json c;
  c["invert"] = false;
  c["max_tokens"] = s.o.max_tokens < 0 ? json(nullptr) : json(s.o.max_tokens);
  c["num_oov_indices"] = s.o.num_oov_indices;
  c["oov_token"] = token(s.o.oov_token);
  c["mask_token"] = token(s.o.mask_token);
  c["output_mode"] = s.o.output_mode;
  c["sparse"] = false;
  c["pad_to_max_tokens"] = s.o.pad_to_max_tokens;
  if (s.integer) c["vocabulary_dtype"] = "int64";
  c["idf_weights"] = s.input_idf.empty() ? json(nullptr) : json(s.input_idf);
  if (s.input_vocabulary.empty()) {
    c["vocabulary"] = nullptr;
  } else if (s.integer) {
    json v = json::array();
    for (const auto& t : s.input_vocabulary) v.push_back(std::stoll(t));
    c["vocabulary"] = v;
  } else {
    c["vocabulary"] = s.input_vocabulary;
  }
  c["vocabulary_size"] = vocabulary_size();
  c["oov_method"] = "floormod";
  c["salt"] = nullptr;
  if (!s.integer) c["encoding"] = "utf-8";
  return c;
}

namespace {

std::vector<std::vector<int64_t>> lookup_rows(const IndexLookupState& s,
                                              const std::vector<std::string>& tokens, size_t k) {
  std::vector<std::vector<int64_t>> rows(tokens.size() / k);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < k; ++j) rows[i].push_back(s.lookup(tokens[i * k + j]));
  return rows;
}

Tensor lookup_output(const IndexLookupState& s, const std::vector<std::vector<int64_t>>& rows,
                     const Shape& in_shape) {
  if (s.o.output_mode == "int") {
    Tensor t = pad_rows(rows, in_shape.rank() == 2 ? in_shape[1] : 1, s.o.int_dtype);
    return in_shape.rank() == 2 ? t : t.reshape({in_shape[0]});
  }
  return encode_categorical(rows, in_shape.rank() == 1, s.depth(), s.o.output_mode, &s.idf, s.who(),
                            false);
}

}  // namespace

Tensor IndexLookupLayer::apply(const data::Strings& batch) const {
  LS_CHECK(!state_->integer, state_->who(), ": takes integer ids (a Tensor), not strings");
  LS_CHECK(!state_->tokens.empty() || state_->has_input_vocabulary, state_->who(),
           ": no vocabulary yet; pass `vocabulary` or call adapt() first");
  return lookup_output(*state_, lookup_rows(*state_, batch, 1), Shape{int64_t(batch.size())});
}

Tensor IndexLookupLayer::apply(const Tensor& batch) const {
  LS_CHECK(state_->integer, state_->who(), ": takes strings (data::Strings), not a tensor");
  check_rank(batch, state_->who());
  std::vector<std::string> tokens;
  for (int64_t v : int_values(batch, state_->who())) tokens.push_back(std::to_string(v));
  const size_t k = batch.rank() == 2 ? size_t(batch.dim(1)) : 1;
  return lookup_output(*state_, lookup_rows(*state_, tokens, k), batch.shape());
}

void IndexLookupLayer::adapt(const data::Strings& batch) {
  IndexLookupState& s = *state_;
  LS_CHECK(!s.has_input_vocabulary, s.who(), ": cannot adapt a layer whose vocabulary was given");
  s.counter.clear();
  s.counter.add_document(batch);  // Keras: a rank-1 batch is one document
  s.finalize();
}

void IndexLookupLayer::adapt(const data::Dataset& ds, int64_t steps) {
  IndexLookupState& s = *state_;
  LS_CHECK(!s.has_input_vocabulary, s.who(), ": cannot adapt a layer whose vocabulary was given");
  s.counter.clear();
  data::Iterator it = ds.iterator();
  for (int64_t i = 0; steps < 0 || i < steps; ++i) {
    auto e = it.next();
    if (!e) break;
    const data::Component& c = e->parts.at(0);
    if (const auto* strs = std::get_if<data::Strings>(&c)) {
      s.counter.add_document(*strs);
    } else if (const auto* one = std::get_if<std::string>(&c)) {
      s.counter.add_document({*one});
    } else {
      std::vector<std::string> toks;
      for (int64_t v : int_values(std::get<Tensor>(c), s.who())) toks.push_back(std::to_string(v));
      s.counter.add_document(toks);
    }
  }
  s.finalize();
}

std::vector<std::string> IndexLookupLayer::get_vocabulary(bool include_special_tokens) const {
  return state_->vocabulary(include_special_tokens);
}

void IndexLookupLayer::set_vocabulary(const std::vector<std::string>& vocabulary,
                                      const std::vector<float>& idf_weights) {
  state_->set_vocabulary(vocabulary, idf_weights);
}

int64_t IndexLookupLayer::vocabulary_size() const { return state_->vocabulary_size(); }

std::vector<float> IndexLookupLayer::idf_weights() const { return state_->idf; }

void IndexLookupLayer::set_config_vocabulary_size(int64_t n) { state_->frozen_size = n; }

TensorType IndexLookupLayer::output_type(const Shape& in) const {
  const IndexLookupState& s = *state_;
  if (s.o.output_mode == "int") return {s.o.int_dtype, in};
  Shape out = in;  // one_hot adds an axis (unless the last is 1); the others count over it
  if (in.rank() >= 1 && (s.o.output_mode != "one_hot" || in[-1] == 1))
    out = Shape(std::vector<int64_t>(in.begin(), in.end() - 1));
  out.push_back(s.depth());
  return {DType::f32, out};
}

// Keras's IndexLookup.save_assets: the vocabulary with its special tokens, one per line (no
// newline after the last), when it was adapted (a given one is in the config).
std::string IndexLookupLayer::vocabulary_asset() const {
  if (state_->has_input_vocabulary || state_->tokens.empty()) return "";
  std::string text;
  const auto v = state_->vocabulary(true);
  for (size_t i = 0; i < v.size(); ++i) text += (i ? "\n" : "") + v[i];
  return text;
}

void IndexLookupLayer::load_vocabulary_asset(const std::string& text) {
  if (state_->has_input_vocabulary) return;
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {  // str.splitlines() on "\n"-joined text
    size_t e = text.find('\n', start);
    if (e == std::string::npos) e = text.size();
    std::string line = text.substr(start, e - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
    start = e + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (state_->o.output_mode == "tf_idf") {
    // The idf weights came with the weights file (load_own_variables); keep them.
    std::vector<float> idf = state_->idf;
    state_->set_vocabulary(lines, std::vector<float>(lines.size(), 0.f));
    state_->idf = idf;
  } else {
    state_->set_vocabulary(lines, {});
  }
}
// ---------------------------------------------------------------------------------------------
// Hashing

HashingLayer::HashingLayer(int64_t num_bins, layers::HashingOptions o)
    : HostPreprocessingLayer(o.name.empty() ? unique_layer_name("hashing") : o.name),
      num_bins_(num_bins),
      o_(std::move(o)) {
  LS_CHECK(num_bins_ > 0, "Hashing '", name(), "': num_bins must be positive, got ", num_bins_);
  LS_CHECK(o_.output_mode == "int" || o_.output_mode == "one_hot" ||
               o_.output_mode == "multi_hot" || o_.output_mode == "count",
           "Hashing '", name(), "': output_mode must be \"int\", \"one_hot\", \"multi_hot\" or ",
           "\"count\", got \"", o_.output_mode, "\"");
  LS_CHECK(
      o_.mask_value.is_null() || o_.mask_value.is_string() || o_.mask_value.is_number_integer(),
      "Hashing '", name(), "': mask_value must be a string, an integer or null");
}

json HashingLayer::layer_config() const {
  return {{"num_bins", num_bins_},
          {"salt", nullptr},
          {"mask_value", o_.mask_value},
          {"output_mode", o_.output_mode},
          {"sparse", false}};
}

int64_t HashingLayer::bin(const std::string& s) const {
  const bool masked = !o_.mask_value.is_null() && num_bins_ > 1;
  if (masked) {
    const std::string m = o_.mask_value.is_string() ? o_.mask_value.get<std::string>()
                                                    : std::to_string(o_.mask_value.get<int64_t>());
    if (s == m) return 0;
  }
  const uint64_t bins = uint64_t(masked ? num_bins_ - 1 : num_bins_);
  return int64_t(data::farmhash_fingerprint64(s) % bins) + (masked ? 1 : 0);
}

Tensor HashingLayer::apply(const data::Strings& batch) const {
  std::vector<std::vector<int64_t>> rows;
  for (const auto& s : batch) rows.push_back({bin(s)});
  if (o_.output_mode == "int")
    return pad_rows(rows, 1, o_.int_dtype).reshape({int64_t(batch.size())});
  return encode_categorical(rows, true, num_bins_, o_.output_mode, nullptr, "Hashing", false);
}

Tensor HashingLayer::apply(const Tensor& batch) const {
  const std::string who = "Hashing '" + name() + "'";
  check_rank(batch, who);
  std::vector<int64_t> ids;
  for (int64_t v : int_values(batch, who)) ids.push_back(bin(std::to_string(v)));
  auto rows = as_rows(ids, batch);
  if (o_.output_mode == "int") {
    Tensor t = pad_rows(rows, batch.rank() == 2 ? batch.dim(1) : 1, o_.int_dtype);
    return batch.rank() == 2 ? t : t.reshape({batch.dim(0)});
  }
  return encode_categorical(rows, batch.rank() == 1, num_bins_, o_.output_mode, nullptr, who,
                            false);
}

TensorType HashingLayer::output_type(const Shape& in) const {
  if (o_.output_mode == "int") return {o_.int_dtype, in};
  Shape out = in.rank() >= 1 ? Shape(std::vector<int64_t>(in.begin(), in.end() - 1)) : Shape{};
  out.push_back(num_bins_);
  return {DType::f32, out};
}

// ---------------------------------------------------------------------------------------------
// CategoryEncoding

CategoryEncodingLayer::CategoryEncodingLayer(int64_t num_tokens, layers::CategoryEncodingOptions o)
    : HostPreprocessingLayer(o.name.empty() ? unique_layer_name("category_encoding") : o.name),
      num_tokens_(num_tokens),
      o_(std::move(o)) {
  LS_CHECK(num_tokens_ > 0, "CategoryEncoding '", name(), "': num_tokens must be positive, got ",
           num_tokens_);
  LS_CHECK(
      o_.output_mode == "one_hot" || o_.output_mode == "multi_hot" || o_.output_mode == "count",
      "CategoryEncoding '", name(), "': output_mode must be \"one_hot\", \"multi_hot\" or ",
      "\"count\", got \"", o_.output_mode, "\"");
}

json CategoryEncodingLayer::layer_config() const {
  return {{"num_tokens", num_tokens_}, {"output_mode", o_.output_mode}, {"sparse", false}};
}

Tensor CategoryEncodingLayer::apply(const Tensor& batch) const {
  const std::string who = "CategoryEncoding '" + name() + "'";
  check_rank(batch, who);
  return encode_categorical(as_rows(int_values(batch, who), batch), batch.rank() == 1, num_tokens_,
                            o_.output_mode, nullptr, who, true);
}

}  // namespace lockstep

namespace lockstep {
TensorType CategoryEncodingLayer::output_type(const Shape& in) const {
  Shape out = in.rank() >= 1 ? Shape(std::vector<int64_t>(in.begin(), in.end() - 1)) : Shape{};
  out.push_back(num_tokens_);
  return {DType::f32, out};
}
}  // namespace lockstep
