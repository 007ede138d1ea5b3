// Keras initializers (keras.initializers) filled with Philox streams keyed by the layer seed.
#include "lockstep/nn/initializers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "lockstep/core/rng.h"

namespace lockstep {

static const char* kValidNames =
    "glorot_uniform, glorot_normal, he_normal, he_uniform, lecun_normal, lecun_uniform, "
    "zeros, ones, random_normal, random_uniform, truncated_normal, constant:<value>, "
    "orthogonal, variance_scaling, variance_scaling:<scale>:<fan_in|fan_out|fan_avg>:"
    "<truncated_normal|untruncated_normal|uniform>";

void compute_fans(const Shape& s, double* fan_in, double* fan_out) {
  if (s.rank() == 0) {
    *fan_in = *fan_out = 1;
  } else if (s.rank() == 1) {
    *fan_in = *fan_out = double(s[0]);
  } else if (s.rank() == 2) {
    *fan_in = double(s[0]);
    *fan_out = double(s[1]);
  } else {
    double rf = 1;
    for (int i = 0; i < s.rank() - 2; ++i) rf *= double(s[i]);
    *fan_in = double(s[-2]) * rf;
    *fan_out = double(s[-1]) * rf;
  }
}

namespace {

enum class Dist { kUniform, kTruncatedNormal, kNormal };

struct Spec {
  enum Kind { kVarianceScaling, kConstant, kRandom, kOrthogonal } kind = kConstant;
  double scale = 1.0;           // variance scaling
  std::string mode = "fan_in";  // fan_in | fan_out | fan_avg
  Dist dist = Dist::kUniform;
  double a = 0, b = 0;  // constant: a; random: uniform [a, b] or normal(a, b)
};

// Accepts Keras snake_case names and class names (GlorotUniform, HeNormal, ...).
std::string canonical(const std::string& name) {
  std::string s;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c >= 'A' && c <= 'Z') {
      if (i > 0 && name[i - 1] != '_') s.push_back('_');
      s.push_back(char(c - 'A' + 'a'));
    } else {
      s.push_back(c);
    }
  }
  if (s == "zero") s = "zeros";
  if (s == "one") s = "ones";
  return s;
}

// "variance_scaling:<scale>:<mode>:<distribution>" (keras.initializers.VarianceScaling's
// arguments; distribution truncated_normal, untruncated_normal or uniform).
bool parse_variance_scaling(const std::string& n, Spec* out) {
  std::vector<std::string> parts;
  for (size_t b = 0, e; b <= n.size(); b = e + 1) {
    e = n.find(':', b);
    if (e == std::string::npos) e = n.size();
    parts.push_back(n.substr(b, e - b));
  }
  if (parts.size() != 4) return false;
  char* end = nullptr;
  out->kind = Spec::kVarianceScaling;
  out->scale = std::strtod(parts[1].c_str(), &end);
  if (parts[1].empty() || *end != '\0' || !(out->scale > 0)) return false;
  out->mode = parts[2];
  if (out->mode != "fan_in" && out->mode != "fan_out" && out->mode != "fan_avg") return false;
  const std::string& d = parts[3];
  if (d == "truncated_normal" || d == "normal") {
    out->dist = Dist::kTruncatedNormal;
  } else if (d == "untruncated_normal") {
    out->dist = Dist::kNormal;
  } else if (d == "uniform") {
    out->dist = Dist::kUniform;
  } else {
    return false;
  }
  return true;
}

bool parse(const std::string& raw, Spec* out) {
  Spec sp;
  if (raw.rfind("variance_scaling:", 0) == 0) return parse_variance_scaling(raw, out);
  std::string n = raw.rfind("constant:", 0) == 0 ? raw : canonical(raw);
  auto vs = [&](double scale, const char* mode, Dist d) {
    sp.kind = Spec::kVarianceScaling;
    sp.scale = scale;
    sp.mode = mode;
    sp.dist = d;
  };
  if (n == "glorot_uniform")
    vs(1.0, "fan_avg", Dist::kUniform);
  else if (n == "glorot_normal")
    vs(1.0, "fan_avg", Dist::kTruncatedNormal);
  else if (n == "he_normal")
    vs(2.0, "fan_in", Dist::kTruncatedNormal);
  else if (n == "he_uniform")
    vs(2.0, "fan_in", Dist::kUniform);
  else if (n == "lecun_normal")
    vs(1.0, "fan_in", Dist::kTruncatedNormal);
  else if (n == "lecun_uniform")
    vs(1.0, "fan_in", Dist::kUniform);
  else if (n == "variance_scaling")
    vs(1.0, "fan_in", Dist::kTruncatedNormal);
  else if (n == "orthogonal")
    sp.kind = Spec::kOrthogonal;
  else if (n == "zeros")
    sp.a = 0;
  else if (n == "ones")
    sp.a = 1;
  else if (n == "random_normal") {
    sp.kind = Spec::kRandom;
    sp.dist = Dist::kNormal;
    sp.a = 0;
    sp.b = 0.05;
  } else if (n == "truncated_normal") {
    sp.kind = Spec::kRandom;
    sp.dist = Dist::kTruncatedNormal;
    sp.a = 0;
    sp.b = 0.05;
  } else if (n == "random_uniform") {
    sp.kind = Spec::kRandom;
    sp.dist = Dist::kUniform;
    sp.a = -0.05;
    sp.b = 0.05;
  } else if (n.rfind("constant:", 0) == 0) {
    std::string v = n.substr(9);
    char* end = nullptr;
    sp.a = std::strtod(v.c_str(), &end);
    if (v.empty() || end == nullptr || *end != '\0') return false;
  } else {
    return false;
  }
  *out = sp;
  return true;
}

// keras.initializers.Orthogonal (gain 1): the (rows, cols) flattening (rows = the product of all
// but the last axis) of a matrix with orthonormal columns (rows >= cols) or rows, from
// Gram-Schmidt on a normal matrix (QR with a positive diagonal, as Keras's sign correction).
void orthogonal(Tensor& t, Philox& rng) {
  const int64_t cols = t.shape().rank() == 0 ? 1 : t.shape()[-1];
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  const int64_t m = std::max(rows, cols), k = std::min(rows, cols);
  std::vector<double> q(size_t(m * k));  // k columns of length m, column-major
  for (auto& v : q) v = rng.normal();
  for (int64_t j = 0; j < k; ++j) {
    double* c = q.data() + j * m;
    for (int pass = 0; pass < 2; ++pass)  // twice: re-orthogonalise for rounding
      for (int64_t i = 0; i < j; ++i) {
        const double* p = q.data() + i * m;
        double d = 0;
        for (int64_t r = 0; r < m; ++r) d += c[r] * p[r];
        for (int64_t r = 0; r < m; ++r) c[r] -= d * p[r];
      }
    double norm = 0;
    for (int64_t r = 0; r < m; ++r) norm += c[r] * c[r];
    norm = std::sqrt(norm);
    for (int64_t r = 0; r < m; ++r) c[r] /= norm;
  }
  float* p = t.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[r * cols + c] = float(rows >= cols ? q[size_t(c * m + r)] : q[size_t(r * m + c)]);
}

}  // namespace

void check_initializer(const std::string& initializer) {
  Spec sp;
  LS_CHECK(parse(initializer, &sp), "unknown initializer '", initializer,
           "'; valid names: ", kValidNames);
}

void initialize(Tensor& t, const std::string& initializer, uint64_t seed) {
  Spec sp;
  LS_CHECK(parse(initializer, &sp), "unknown initializer '", initializer,
           "'; valid names: ", kValidNames);
  LS_CHECK(t.dtype() == DType::f32 && t.is_contiguous(),
           "initialize: expects a contiguous float32 tensor, got ", dtype_name(t.dtype()));
  float* p = t.data<float>();
  const int64_t n = t.numel();
  if (sp.kind == Spec::kConstant) {
    for (int64_t i = 0; i < n; ++i) p[i] = float(sp.a);
    return;
  }
  Philox rng(seed);
  if (sp.kind == Spec::kOrthogonal) return orthogonal(t, rng);
  if (sp.kind == Spec::kRandom) {
    for (int64_t i = 0; i < n; ++i) {
      switch (sp.dist) {
        case Dist::kUniform:
          p[i] = rng.uniform(float(sp.a), float(sp.b));
          break;
        case Dist::kNormal:
          p[i] = float(sp.a + sp.b * rng.normal());
          break;
        case Dist::kTruncatedNormal:
          p[i] = float(sp.a + sp.b * rng.truncated_normal());
          break;
      }
    }
    return;
  }
  // keras.initializers.VarianceScaling.
  double fan_in, fan_out;
  compute_fans(t.shape(), &fan_in, &fan_out);
  double denom = sp.mode == "fan_in"    ? fan_in
                 : sp.mode == "fan_out" ? fan_out
                                        : (fan_in + fan_out) / 2;
  double scale = sp.scale / std::max(1.0, denom);
  if (sp.dist == Dist::kUniform) {
    float limit = float(std::sqrt(3.0 * scale));
    for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(-limit, limit);
  } else if (sp.dist == Dist::kNormal) {
    const double stddev = std::sqrt(scale);
    for (int64_t i = 0; i < n; ++i) p[i] = float(stddev * rng.normal());
  } else {
    // Std of a unit normal truncated at +-2 is 0.8796...; Keras divides it out.
    double stddev = std::sqrt(scale) / 0.87962566103423978;
    for (int64_t i = 0; i < n; ++i) p[i] = float(stddev * rng.truncated_normal());
  }
}

}  // namespace lockstep
