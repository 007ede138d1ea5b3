// Elements: typed access, specs, stacking (batch) and splitting (unbatch, split_batch).
#include <cstring>

#include "data/dataset_node.h"

namespace lockstep::data {

static const char* kind_name(const Component& c) {
  if (std::holds_alternative<Tensor>(c)) return "Tensor";
  if (std::holds_alternative<std::string>(c)) return "string";
  return "Strings";
}

static void check_index(const Element& e, size_t i) {
  LS_CHECK(i < e.parts.size(), "element component ", i, " requested but the element ", e.str(),
           " has ", e.parts.size(), " components");
}

const Tensor& Element::tensor(size_t i) const {
  check_index(*this, i);
  const Tensor* t = std::get_if<Tensor>(&parts[i]);
  LS_CHECK(t, "element component ", i, " is a ", kind_name(parts[i]), ", not a Tensor (element ",
           str(), ")");
  return *t;
}

Tensor& Element::tensor(size_t i) {
  return const_cast<Tensor&>(static_cast<const Element*>(this)->tensor(i));
}

const std::string& Element::string(size_t i) const {
  check_index(*this, i);
  const std::string* s = std::get_if<std::string>(&parts[i]);
  LS_CHECK(s, "element component ", i, " is a ", kind_name(parts[i]), ", not a string (element ",
           str(), ")");
  return *s;
}

const Strings& Element::strings(size_t i) const {
  check_index(*this, i);
  const Strings* s = std::get_if<Strings>(&parts[i]);
  LS_CHECK(s, "element component ", i, " is a ", kind_name(parts[i]), ", not Strings (element ",
           str(), ")");
  return *s;
}

static std::string dims_str(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.rank(); ++i) {
    if (i) out += ",";
    out += s[i] < 0 ? "?" : std::to_string(s[i]);
  }
  return out + "]";
}

std::string Element::str() const {
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += ", ";
    if (auto* t = std::get_if<Tensor>(&parts[i])) {
      out += t->defined() ? std::string(dtype_name(t->dtype())) + dims_str(t->shape()) : "null";
    } else if (auto* s = std::get_if<std::string>(&parts[i])) {
      out += "\"" + (s->size() > 60 ? s->substr(0, 57) + "..." : *s) + "\"";
    } else {
      out += "strings[" + std::to_string(std::get<Strings>(parts[i]).size()) + "]";
    }
  }
  return out + ")";
}

std::string ComponentSpec::str() const {
  switch (kind) {
    case ComponentKind::tensor:
      return std::string(dtype_name(dtype)) + shape.str();
    case ComponentKind::string:
      return "string()";
    case ComponentKind::strings:
      return "strings" + shape.str();
  }
  return "?";
}

std::string ElementSpec::str() const {
  std::string out = "(";
  for (size_t i = 0; i < components.size(); ++i) out += (i ? ", " : "") + components[i].str();
  return out + ")";
}

ElementSpec spec_of(const Element& element) {
  ElementSpec spec;
  for (const Component& c : element.parts) {
    ComponentSpec cs;
    if (auto* t = std::get_if<Tensor>(&c)) {
      cs.dtype = t->dtype();
      cs.shape = t->shape();
    } else if (std::holds_alternative<std::string>(c)) {
      cs.kind = ComponentKind::string;
      cs.dtype = DType::u8;
    } else {
      cs.kind = ComponentKind::strings;
      cs.dtype = DType::u8;
      cs.shape = Shape{int64_t(std::get<Strings>(c).size())};
    }
    spec.components.push_back(cs);
  }
  return spec;
}

Element stack_elements(const std::vector<Element>& elements) {
  LS_CHECK(!elements.empty(), "batch: cannot stack zero elements");
  const Element& first = elements[0];
  const size_t n = elements.size();
  for (size_t e = 1; e < n; ++e)
    LS_CHECK(elements[e].size() == first.size(), "batch: element ", e, " ", elements[e].str(),
             " has ", elements[e].size(), " components but element 0 ", first.str(), " has ",
             first.size());
  Element out;
  for (size_t c = 0; c < first.size(); ++c) {
    if (auto* t0 = std::get_if<Tensor>(&first.parts[c])) {
      Shape shape;
      shape.push_back(int64_t(n));
      for (int64_t d : t0->shape()) shape.push_back(d);
      Tensor stacked = Tensor::empty(shape, t0->dtype());
      char* dst = static_cast<char*>(stacked.raw());
      const size_t row = t0->nbytes();
      for (size_t e = 0; e < n; ++e) {
        const Tensor* t = std::get_if<Tensor>(&elements[e].parts[c]);
        LS_CHECK(t && t->dtype() == t0->dtype() && t->shape() == t0->shape(), "batch: element ", e,
                 " ", elements[e].str(), " does not match element 0 ", first.str(),
                 " in component ", c,
                 "; batch needs identical shapes and dtypes (resize or crop before batching)");
        Tensor src = t->contiguous();
        std::memcpy(dst + e * row, src.raw(), row);
      }
      out.parts.emplace_back(std::move(stacked));
    } else if (std::holds_alternative<std::string>(first.parts[c])) {
      Strings batch;
      batch.reserve(n);
      for (size_t e = 0; e < n; ++e) {
        const std::string* s = std::get_if<std::string>(&elements[e].parts[c]);
        LS_CHECK(s, "batch: element ", e, " ", elements[e].str(), " does not match element 0 ",
                 first.str(), " in component ", c);
        batch.push_back(*s);
      }
      out.parts.emplace_back(std::move(batch));
    } else {
      LS_FAIL("batch: component ", c, " of element ", first.str(),
              " is already a batch of strings (Strings), which cannot be batched again; "
              "unbatch() first or keep paths unbatched");
    }
  }
  return out;
}

// Row i of every component (used by unbatch and from_tensor_slices).
static int64_t common_dim0(const Element& e, const char* who) {
  int64_t n = -1;
  for (size_t c = 0; c < e.size(); ++c) {
    int64_t d;
    if (auto* t = std::get_if<Tensor>(&e.parts[c])) {
      LS_CHECK(t->rank() >= 1, who, ": component ", c, " of ", e.str(),
               " is a scalar; it needs a leading dimension to be split");
      d = t->dim(0);
    } else if (auto* s = std::get_if<Strings>(&e.parts[c])) {
      d = int64_t(s->size());
    } else {
      LS_FAIL(who, ": component ", c, " of ", e.str(),
              " is a single string; only Tensors and Strings can be split");
    }
    LS_CHECK(n < 0 || d == n, who, ": components of ", e.str(), " disagree on dimension 0 (", n,
             " vs ", d, ")");
    n = d;
  }
  return n < 0 ? 0 : n;
}

int64_t element_rows(const Element& e, const char* who) { return common_dim0(e, who); }

// Components of `e` restricted to rows [begin, end); `squeeze` drops dimension 0 (one row).
Element element_rows_slice(const Element& e, int64_t begin, int64_t end, bool squeeze) {
  Element out;
  out.parts.reserve(e.size());
  for (const Component& c : e.parts) {
    if (auto* t = std::get_if<Tensor>(&c)) {
      Tensor src = t->is_contiguous() ? *t : t->contiguous();
      Tensor v = src.slice(begin, end);
      if (squeeze) {
        std::vector<int64_t> rest(src.shape().begin() + 1, src.shape().end());
        v = v.reshape(Shape(rest));
      }
      out.parts.emplace_back(std::move(v));
    } else {
      const Strings& s = std::get<Strings>(c);
      if (squeeze)
        out.parts.emplace_back(s[begin]);
      else
        out.parts.emplace_back(Strings(s.begin() + begin, s.begin() + end));
    }
  }
  return out;
}

std::vector<Element> split_batch(const Element& global_batch, int num_replicas) {
  LS_CHECK(num_replicas >= 1, "split_batch: num_replicas must be >= 1, got ", num_replicas);
  int64_t rows = -1;
  for (size_t c = 0; c < global_batch.size(); ++c) {
    int64_t d = -1;
    if (auto* t = std::get_if<Tensor>(&global_batch.parts[c])) {
      LS_CHECK(t->rank() >= 1, "split_batch: component ", c, " of ", global_batch.str(),
               " is a scalar and has no batch dimension");
      d = t->dim(0);
    } else if (auto* s = std::get_if<Strings>(&global_batch.parts[c])) {
      d = int64_t(s->size());
    } else {
      continue;  // a single string goes to every replica
    }
    LS_CHECK(rows < 0 || d == rows, "split_batch: components of ", global_batch.str(),
             " disagree on the batch size (", rows, " vs ", d, ")");
    rows = d;
  }
  LS_CHECK(rows >= 0, "split_batch: ", global_batch.str(), " has no batched component");
  LS_CHECK(rows % num_replicas == 0, "split_batch: global batch of ", rows, " is not divisible by ",
           num_replicas,
           " replicas; use a global batch size that is a multiple of the replica count, "
           "or batch(..., {.drop_remainder = true})");
  const int64_t per = rows / num_replicas;
  std::vector<Element> out(num_replicas);
  for (int r = 0; r < num_replicas; ++r) {
    for (const Component& c : global_batch.parts) {
      if (auto* t = std::get_if<Tensor>(&c)) {
        Tensor src = t->is_contiguous() ? *t : t->contiguous();
        out[r].parts.emplace_back(src.slice(r * per, (r + 1) * per));
      } else if (auto* s = std::get_if<Strings>(&c)) {
        out[r].parts.emplace_back(Strings(s->begin() + r * per, s->begin() + (r + 1) * per));
      } else {
        out[r].parts.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace lockstep::data
