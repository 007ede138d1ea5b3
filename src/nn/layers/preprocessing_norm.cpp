// keras.layers.Normalization: (x - mean) / max(sqrt(variance), epsilon), epsilon = 1e-7 (Keras's
// backend epsilon), with fixed statistics or statistics from adapt() (one streaming pass,
// batches combined pairwise as Chan et al.; biased variance, as Keras).
#include <algorithm>
#include <cmath>

#include "lockstep/data/dataset.h"
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

constexpr float kEpsilon = 1e-7f;

class NormalizationLayer : public Layer {
 public:
  bool computes_in_f32() const override { return true; }
  explicit NormalizationLayer(layers::NormalizationOptions o)
      : Layer(std::move(o.name)), o_(std::move(o)) {
    LS_CHECK(o_.mean.empty() == o_.variance.empty(), "Normalization '", name(),
             "': pass both mean and variance, or neither (then call adapt())");
    for (double v : o_.variance)
      LS_CHECK(v >= 0, "Normalization '", name(), "': variance must be >= 0, got ", v);
  }
  std::string class_name() const override { return "Normalization"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override {
    json mean = o_.mean.empty() ? json(nullptr) : json(o_.mean);
    json var = o_.variance.empty() ? json(nullptr) : json(o_.variance);
    return {{"axis", o_.axis}, {"invert", o_.invert}, {"mean", mean}, {"variance", var}};
  }

  void build(const std::vector<Shape>& shapes) override {
    const Shape& s = shapes.at(0);
    rank_ = s.rank();
    keep_.clear();
    for (int64_t a : o_.axis) {
      int64_t k = a < 0 ? a + rank_ : a;
      LS_CHECK(k > 0 && k < rank_, "Normalization '", name(), "': axis ", a,
               " is out of range for inputs of shape ", s.str(),
               " (the batch axis 0 cannot be kept)");
      LS_CHECK(s[int(k)] > 0, "Normalization '", name(), "': axis ", a,
               " needs a known size, got shape ", s.str());
      for (int64_t q : keep_)
        LS_CHECK(q != k, "Normalization '", name(), "': axis ", a, " is listed twice");
      keep_.push_back(k);
    }
    std::sort(keep_.begin(), keep_.end());
    Shape stat;
    bcast_.assign(size_t(rank_), 1);
    for (int64_t k : keep_) {
      stat.push_back(s[int(k)]);
      bcast_[k] = s[int(k)];
    }
    if (stat.rank() == 0) stat = Shape{1};
    nstat_ = stat.numel();
    if (o_.mean.empty()) {
      mean_ = add_weight("mean", stat, "zeros", false);
      var_ = add_weight("variance", stat, "ones", false);
      // Keras's third weight: the number of values adapt() saw per statistic (int64 scalar).
      count_weight_ = add_weight("count", Shape{}, "zeros", false);
      count_weight_->value = Tensor::zeros(Shape{}, DType::i64);
    } else {
      // Fixed statistics are constants in Keras (no weights): private variables here.
      mean_ = fixed("mean", o_.mean, stat);
      var_ = fixed("variance", o_.variance, stat);
    }
  }

  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    if (g.type(x).dtype != DType::f32) x = g.add(op::cast, {x}, Attrs{{"dtype", "float32"}});
    LS_CHECK(g.type(x).shape.rank() == rank_, "Normalization '", name(), "': built for rank ",
             rank_, ", called on ", g.type(x).shape.str());
    Value m = g.add(op::reshape, {ctx.read(mean_)}, Attrs{{"shape", bcast_}});
    Value v = g.add(op::reshape, {ctx.read(var_)}, Attrs{{"shape", bcast_}});
    Value sd = g.add(op::maximum, {g.add(op::sqrt, {v}), g.scalar(kEpsilon)});
    if (o_.invert) return {g.add(op::add, {g.add(op::mul, {x, sd}), m}, {}, name())};
    return {g.add(op::div, {g.add(op::sub, {x, m}), sd}, {}, name())};
  }

  // ---- adapt ----
  void reset_state() {
    count_ = 0;
    acc_mean_.assign(size_t(nstat_), 0.0);
    acc_m2_.assign(size_t(nstat_), 0.0);
  }
  void update_state(const Tensor& batch) {
    LS_CHECK(o_.mean.empty(), "Normalization '", name(),
             "': adapt() needs a layer built without fixed mean and variance");
    if (!built()) ensure_built({batch.shape().with_dim(0, -1)});
    LS_CHECK(batch.rank() == rank_, "Normalization '", name(), "': adapt data has shape ",
             batch.shape().str(), ", expected rank ", rank_);
    for (int64_t k : keep_)
      LS_CHECK(batch.dim(int(k)) == bcast_[k], "Normalization '", name(),
               "': adapt data has shape ", batch.shape().str(), ", expected size ", bcast_[k],
               " on axis ", k);
    if (acc_mean_.size() != size_t(nstat_)) reset_state();
    const int64_t total = batch.numel();
    if (total == 0) return;
    const int64_t nb = total / nstat_;  // elements per statistic in this batch
    std::vector<float> v = batch.to_vector();
    std::vector<int64_t> idx = stat_index(batch.shape());
    std::vector<double> bm(size_t(nstat_), 0.0), bm2(size_t(nstat_), 0.0);
    for (int64_t e = 0; e < total; ++e) bm[idx[e]] += v[e];
    for (auto& m : bm) m /= double(nb);
    for (int64_t e = 0; e < total; ++e) {
      double d = v[e] - bm[idx[e]];
      bm2[idx[e]] += d * d;
    }
    const double n = double(count_), nbd = double(nb), nn = n + nbd;
    for (int64_t k = 0; k < nstat_; ++k) {
      const double delta = bm[k] - acc_mean_[k];
      acc_mean_[k] += delta * nbd / nn;
      acc_m2_[k] += bm2[k] + delta * delta * n * nbd / nn;
    }
    count_ += nb;
  }
  void finalize_state() {
    LS_CHECK(count_ > 0, "Normalization '", name(), "': adapt() saw no data");
    note_variable_host_write();  // compiled programs recompute what they derived from these
    float* m = mean_->value.data<float>();
    float* v = var_->value.data<float>();
    for (int64_t k = 0; k < nstat_; ++k) {
      m[k] = float(acc_mean_[k]);
      v[k] = float(acc_m2_[k] / double(count_));
    }
    count_weight_->value.data<int64_t>()[0] = count_;
  }

 private:
  VariablePtr fixed(const std::string& what, const std::vector<double>& vals, const Shape& s) {
    LS_CHECK(int64_t(vals.size()) == 1 || int64_t(vals.size()) == s.numel(), "Normalization '",
             name(), "': ", what, " has ", vals.size(), " values, expected 1 or ", s.numel(),
             " (shape ", s.str(), ")");
    auto var = std::make_shared<Variable>();
    var->name = name() + "/" + what;
    var->trainable = false;
    var->value = Tensor::empty(s);
    for (int64_t i = 0; i < s.numel(); ++i)
      var->value.data<float>()[i] = float(vals.size() == 1 ? vals[0] : vals[size_t(i)]);
    return var;
  }
  // Index of the statistic each element of a contiguous tensor of shape s belongs to.
  std::vector<int64_t> stat_index(const Shape& s) const {
    std::vector<int64_t> mult(size_t(rank_), 0);
    int64_t m = 1;
    for (int d = rank_ - 1; d >= 0; --d)
      if (std::find(keep_.begin(), keep_.end(), d) != keep_.end()) {
        mult[d] = m;
        m *= s[d];
      }
    std::vector<int64_t> idx(size_t(s.numel()));
    std::vector<int64_t> pos(size_t(rank_), 0);
    int64_t cur = 0;
    for (int64_t e = 0; e < s.numel(); ++e) {
      idx[e] = cur;
      for (int d = rank_ - 1; d >= 0; --d) {
        cur += mult[d];
        if (++pos[d] < s[d]) break;
        cur -= mult[d] * s[d];
        pos[d] = 0;
      }
    }
    return idx;
  }

  layers::NormalizationOptions o_;
  int rank_ = 0;
  std::vector<int64_t> keep_, bcast_;
  int64_t nstat_ = 1;
  VariablePtr mean_, var_, count_weight_;
  int64_t count_ = 0;
  std::vector<double> acc_mean_, acc_m2_;
};

std::shared_ptr<NormalizationLayer> as_norm(const layers::NormalizationHandle& h) {
  auto p = h.as<NormalizationLayer>();
  LS_CHECK(p, "NormalizationHandle does not hold a Normalization layer");
  return p;
}

}  // namespace

namespace layers {

void NormalizationHandle::adapt(const Tensor& data) const {
  reset_state();
  update_state(data);
  finalize_state();
}
void NormalizationHandle::adapt(const data::Dataset& dataset, int64_t steps) const {
  auto p = as_norm(*this);
  LS_CHECK(steps >= 0 || dataset.cardinality() != data::kInfiniteCardinality, "Normalization '",
           p->name(), "': adapt() on an infinite dataset needs steps");
  p->reset_state();
  data::Iterator it = dataset.iterator();
  for (int64_t k = 0; steps < 0 || k < steps; ++k) {
    auto e = it.next();
    if (!e) break;
    p->update_state(e->tensor(0));
  }
  p->finalize_state();
}
void NormalizationHandle::reset_state() const {
  auto p = as_norm(*this);
  p->reset_state();
}
void NormalizationHandle::update_state(const Tensor& batch) const {
  as_norm(*this)->update_state(batch);
}
void NormalizationHandle::finalize_state() const { as_norm(*this)->finalize_state(); }

NormalizationHandle Normalization(NormalizationOptions o) {
  o.name = layer_util::default_name(o.name, "normalization");
  return NormalizationHandle(LayerPtr(std::make_shared<NormalizationLayer>(std::move(o))));
}

}  // namespace layers
}  // namespace lockstep
