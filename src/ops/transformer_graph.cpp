// The graph builders of lockstep/ops/transformer.h: einsum lowered to transpose / reshape /
// (batch_)matmul / reduce_sum, Keras's masked softmax as where + softmax + where, and thin
// wrappers of the rms_norm, rotary_embedding and random_categorical ops.
#include <algorithm>
#include <cctype>
#include <map>

#include "lockstep/ops/transformer.h"
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

// One parsed einsum: each operand's and the output's labels (an ellipsis expanded into labels
// '0', '1', ... aligned from the right) and each label's size.
struct Einsum {
  std::string eq;
  std::vector<std::string> in;
  std::string out;
  std::map<char, int64_t> size;
};

[[noreturn]] void fail(const std::string& eq, const std::string& what) {
  LS_FAIL("einsum \"", eq, "\": ", what);
}

// Labels of one term for an operand of rank `rank` ("" for the output: ell is known).
std::string expand(const std::string& eq, const std::string& term, int rank, int& ell) {
  const size_t dots = term.find("...");
  std::string letters = term;
  if (dots != std::string::npos) letters.erase(dots, 3);
  for (char c : letters)
    if (!std::isalpha(static_cast<unsigned char>(c)))
      fail(eq, std::string("'") + c +
                   "' is not a letter (a term holds letters and at most one \"...\")");
  if (dots == std::string::npos) {
    if (rank >= 0 && int(letters.size()) != rank)
      fail(eq, "term \"" + term + "\" has " + std::to_string(letters.size()) +
                   " letters for an operand of rank " + std::to_string(rank));
    return letters;
  }
  int e = rank >= 0 ? rank - int(letters.size()) : ell;
  if (e < 0)
    fail(eq,
         "term \"" + term + "\" has more letters than its operand's rank " + std::to_string(rank));
  if (rank >= 0) ell = std::max(ell, e);
  std::string dims;
  for (int i = 0; i < e; ++i) dims += char('0' + (ell - e + i));
  return std::string(letters, 0, dots) + dims + std::string(letters, dots);
}

Einsum parse(const std::string& equation, const std::vector<Shape>& shapes) {
  Einsum e;
  e.eq = equation;
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t p = 0;;) {
    const size_t comma = lhs.find(',', p);
    terms.push_back(lhs.substr(p, comma - p));
    if (comma == std::string::npos) break;
    p = comma + 1;
  }
  if (terms.size() != shapes.size())
    fail(equation, std::to_string(terms.size()) + " input terms for " +
                       std::to_string(shapes.size()) + " operand(s) (einsum takes one or two)");
  // First pass: the ellipsis's rank (the widest), then the labels aligned to it.
  int ell = 0;
  for (size_t i = 0; i < terms.size(); ++i) expand(equation, terms[i], shapes[i].rank(), ell);
  for (size_t i = 0; i < terms.size(); ++i) {
    int dummy = ell;
    std::string labels = expand(equation, terms[i], shapes[i].rank(), dummy);
    for (size_t k = 0; k < labels.size(); ++k) {
      const char c = labels[k];
      if (labels.find(c) != k)
        fail(equation, std::string("letter '") + c +
                           "' repeats within one operand (a diagonal), "
                           "which einsum here does not take");
      const int64_t d = shapes[i][int(k)];
      auto it = e.size.find(c);
      if (it == e.size.end() || it->second == d || d < 0) {
        if (it == e.size.end()) e.size[c] = d;
        continue;
      }
      const bool in_ellipsis = std::isdigit(static_cast<unsigned char>(c));
      if (it->second < 0 || (in_ellipsis && it->second == 1)) {
        it->second = d;
      } else if (!(in_ellipsis && d == 1)) {
        fail(equation,
             (in_ellipsis ? std::string("a dim of \"...\"") : std::string("letter '") + c + "'") +
                 " has size " + std::to_string(it->second) + " in one operand and " +
                 std::to_string(d) + " in another");
      }
    }
    e.in.push_back(labels);
  }
  if (arrow != std::string::npos) {
    int dummy = ell;
    e.out = expand(equation, eq.substr(arrow + 2), -1, dummy);
  } else {  // numpy's implicit output: the ellipsis, then the letters used once, sorted
    for (int i = 0; i < ell; ++i) e.out += char('0' + i);
    std::string once;
    for (const auto& [c, d] : e.size) {
      int n = 0;
      for (const std::string& t : e.in) n += int(std::count(t.begin(), t.end(), c));
      if (n == 1 && std::isalpha(static_cast<unsigned char>(c))) once += c;
    }
    e.out += once;
  }
  for (size_t k = 0; k < e.out.size(); ++k) {
    const char c = e.out[k];
    if (!e.size.count(c)) fail(equation, std::string("output letter '") + c + "' is in no operand");
    if (e.out.find(c) != k) fail(equation, std::string("output letter '") + c + "' repeats");
  }
  return e;
}

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

Shape shape_of(const Einsum& e, const std::string& labels) {
  Shape s;
  for (char c : labels) s.push_back(e.size.at(c));
  return s;
}

Value transpose_to(Graph& g, Value x, const std::string& from, const std::string& to,
                   const std::string& name) {
  std::vector<int64_t> perm;
  bool identity = true;
  for (size_t i = 0; i < to.size(); ++i) {
    perm.push_back(int64_t(from.find(to[i])));
    identity = identity && perm.back() == int64_t(i);
  }
  return identity ? x : g.add(op::transpose, {x}, Attrs{{"perm", perm}}, name);
}

// x reshaped to `dims` (unless it has them); at most one unknown (-1) dim.
Value reshape_to(Graph& g, Value x, std::vector<int64_t> dims, const std::string& name) {
  if (g.type(x).shape == Shape(dims)) return x;
  return g.add(op::reshape, {x}, Attrs{{"shape", dims}}, name);
}

// The product of the sizes of `labels` (-1 when one is unknown).
int64_t product(const Einsum& e, const std::string& labels) {
  int64_t p = 1;
  for (char c : labels) {
    const int64_t d = e.size.at(c);
    if (d < 0) return -1;
    p *= d;
  }
  return p;
}

// The letters of `x` not in `keep` summed away (reduce_sum), the labels updated.
Value sum_out(Graph& g, Value x, std::string& labels, const std::string& keep,
              const std::string& name) {
  std::vector<int64_t> axes;
  std::string rest;
  for (size_t i = 0; i < labels.size(); ++i)
    if (has(keep, labels[i]))
      rest += labels[i];
    else
      axes.push_back(int64_t(i));
  if (axes.empty()) return x;
  labels = rest;
  return g.add(op::reduce_sum, {x}, Attrs{{"axes", axes}, {"keepdims", false}}, name);
}

Value contract(Graph& g, const Einsum& e, Value a, Value b, const std::string& name) {
  std::string la = e.in[0], lb = e.in[1];
  a = sum_out(g, a, la, lb + e.out, name);
  b = sum_out(g, b, lb, la + e.out, name);
  std::string batch, m, k, n;
  for (char c : la) (has(lb, c) ? (has(e.out, c) ? batch : k) : m) += c;
  for (char c : lb)
    if (!has(la, c)) n += c;
  a = transpose_to(g, a, la, batch + m + k, name);
  b = transpose_to(g, b, lb, batch + k + n, name);
  auto dims = [&](const std::string& lead, const std::string& x, const std::string& y,
                  const std::string& src) {
    std::vector<int64_t> d;
    for (char c : lead) d.push_back(g.type(src == "a" ? a : b).shape[int(lead.find(c))]);
    d.push_back(product(e, x));
    d.push_back(product(e, y));
    return d;
  };
  a = reshape_to(g, a, dims(batch, m, k, "a"), name);
  b = reshape_to(g, b, dims(batch, k, n, "b"), name);
  Value y = batch.empty() ? g.add(op::matmul, {a, b}, {}, name)
                          : g.add(op::batch_matmul, {a, b}, {}, name);
  std::vector<int64_t> full;
  const Shape ys = g.type(y).shape;
  for (size_t i = 0; i < batch.size(); ++i) full.push_back(ys[int(i)]);
  for (char c : m + n) full.push_back(e.size.at(c));
  y = reshape_to(g, y, full, name);
  return transpose_to(g, y, batch + m + n, e.out, name);
}

}  // namespace

Shape einsum_shape(const std::string& equation, const Shape& a, const Shape& b) {
  std::vector<Shape> shapes{a};
  if (equation.find(',') != std::string::npos || b.rank() > 0) shapes.push_back(b);
  return shape_of(parse(equation, shapes), parse(equation, shapes).out);
}

Value einsum(Graph& g, const std::string& equation, Value a, Value b, const std::string& name) {
  std::vector<Shape> shapes{g.type(a).shape};
  if (b.valid()) shapes.push_back(g.type(b).shape);
  const Einsum e = parse(equation, shapes);
  if (!b.valid()) {
    std::string la = e.in[0];
    Value x = sum_out(g, a, la, e.out, name);
    return transpose_to(g, x, la, e.out, name);
  }
  return contract(g, e, a, b, name);
}

Value masked_softmax(Graph& g, Value x, Value mask, std::vector<int64_t> axes,
                     const std::string& name) {
  const int r = g.type(x).shape.rank();
  axes = normalise_axes(axes, r);
  Value keep;
  if (mask.valid()) {
    LS_CHECK(g.type(mask).shape.rank() <= r, "Softmax '", name, "': the mask ",
             g.type(mask).shape.str(), " has more dims than the input ", g.type(x).shape.str());
    Value m = g.type(mask).dtype == DType::f32
                  ? mask
                  : g.add(op::cast, {mask}, Attrs{{"dtype", "float32"}}, name);
    keep = g.add(op::greater, {m, g.add(op::constant, {}, Attrs{{"value", 0.5}}, name)}, {}, name);
    Value big = g.add(op::constant, {}, Attrs{{"value", -1e9}}, name);
    x = g.add(op::where, {keep, x, big}, {}, name);
  }
  Value y;
  if (axes.size() == 1) {
    y = g.add(op::softmax, {x}, Attrs{{"axis", axes[0]}}, name);
  } else {  // exp(x - logsumexp(x)) over several axes, as Keras
    Value mx = g.add(op::reduce_max, {x}, Attrs{{"axes", axes}, {"keepdims", true}}, name);
    mx = g.add(op::stop_gradient, {mx}, {}, name);
    Value ex = g.add(op::exp, {g.add(op::sub, {x, mx}, {}, name)}, {}, name);
    Value s = g.add(op::reduce_sum, {ex}, Attrs{{"axes", axes}, {"keepdims", true}}, name);
    y = g.add(op::div, {ex, s}, {}, name);
  }
  if (keep.valid())
    y = g.add(op::where, {keep, y, g.add(op::constant, {}, Attrs{{"value", 0.0}}, name)}, {}, name);
  return y;
}

Value rms_norm(Graph& g, Value x, Value scale, double epsilon, const std::string& name) {
  return g.add(op::rms_norm, {x, scale}, Attrs{{"epsilon", epsilon}}, name);
}

Value rotary_embedding(Graph& g, Value x, const RotaryOptions& o, Value start_index,
                       const std::string& name) {
  std::vector<Value> in{x};
  if (start_index.valid()) in.push_back(start_index);
  return g.add(op::rotary_embedding, in,
               Attrs{{"max_wavelength", o.max_wavelength},
                     {"scaling_factor", o.scaling_factor},
                     {"sequence_axis", o.sequence_axis},
                     {"feature_axis", o.feature_axis},
                     {"start_index", o.start_index}},
               name);
}

Value random_categorical(Graph& g, Value logits, uint64_t seed, double temperature, int64_t top_k,
                         const std::string& name) {
  return g.add(op::random_categorical, {logits},
               Attrs{{"seed", int64_t(seed)}, {"temperature", temperature}, {"top_k", top_k}},
               name);
}

}  // namespace lockstep::ops
