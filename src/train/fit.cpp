// Model::fit / evaluate / predict: the host loop around compiled programs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "lockstep/core/rng.h"
#include "lockstep/nn/model.h"
#include "lockstep/train/progress.h"
#include "train/program.h"

namespace lockstep {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Copies rows idx[begin, end) of src into dst (dst has end-begin rows).
void gather_rows(const Tensor& src, const std::vector<int64_t>& idx, int64_t begin, int64_t end,
                 Tensor& dst) {
  size_t row = src.nbytes() / size_t(src.dim(0));
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  for (int64_t i = begin; i < end; ++i) std::memcpy(d + (i - begin) * row, s + idx[i] * row, row);
}

// Checks x against the model input and converts/validates labels for the loss.
Tensor check_data(const Model& m, const Tensor& x, const Tensor* y, const char* fn) {
  LS_CHECK(x.defined() && x.rank() >= 1, fn, ": x is empty");
  const Shape& want = m.inputs()[0].shape();
  bool ok = x.rank() == want.rank();
  for (int i = 1; ok && i < want.rank(); ++i) ok = want[i] < 0 || want[i] == x.dim(i);
  LS_CHECK(ok, fn, ": x has shape ", x.shape().str(), " but model '", m.name(), "' input expects ",
           want.str(), " (batch first; e.g. add a channel axis for images)");
  LS_CHECK(x.dtype() == m.inputs()[0].dtype(), fn, ": x has dtype ", dtype_name(x.dtype()),
           ", model input expects ", dtype_name(m.inputs()[0].dtype()));
  LS_CHECK(x.is_contiguous(), fn, ": x must be contiguous");
  if (!y) return {};
  LS_CHECK(y->defined() && y->rank() >= 1 && y->dim(0) == x.dim(0), fn, ": y has ",
           y->defined() && y->rank() ? y->dim(0) : 0, " samples but x has ", x.dim(0));
  const auto& loss = m.compile_config().loss;
  LS_CHECK(loss, fn, ": model '", m.name(), "' was compiled without a loss");
  const Shape& out = m.outputs()[0].shape();
  if (loss->label_dtype() == DType::i32) {
    Tensor yi = y->dtype() == DType::i32 ? *y : Tensor::empty(Shape{y->dim(0)}, DType::i32);
    LS_CHECK(y->numel() == y->dim(0), fn, ": ", loss->name(), " expects integer class labels of shape (N,), got ",
             y->shape().str(), " (use CategoricalCrossentropy for one-hot labels)");
    std::vector<float> v = y->to_vector();
    int64_t classes = out[out.rank() - 1];
    for (int64_t i = 0; i < int64_t(v.size()); ++i) {
      LS_CHECK(v[i] == std::floor(v[i]) && v[i] >= 0 && v[i] < classes, fn, ": label ", v[i],
               " at index ", i, " is out of range for ", classes, " classes (expected 0..", classes - 1, ")");
      if (y->dtype() != DType::i32) yi.data<int32_t>()[i] = int32_t(v[i]);
    }
    return yi;
  }
  LS_CHECK(y->dtype() == DType::f32, fn, ": ", loss->name(), " expects float32 targets");
  return *y;
}

Logs read_metrics(const Model& m, const std::string& prefix = "") {
  Logs logs;
  for (auto& metric : m.metrics()) logs[prefix + metric.get()->name()] = metric->result();
  return logs;
}

void reset_metrics(const Model& m) {
  for (auto& metric : m.metrics()) metric->reset();
}

}  // namespace

History Model::fit(const Tensor& x_in, const Tensor& y_in, FitConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before fit()");
  LS_CHECK(cfg.batch_size >= 1, "fit: batch_size must be >= 1, got ", cfg.batch_size);
  LS_CHECK(cfg.epochs >= 0 && cfg.initial_epoch >= 0, "fit: epochs and initial_epoch must be >= 0");
  LS_CHECK(cfg.validation_split >= 0 && cfg.validation_split < 1,
           "fit: validation_split must be in [0, 1), got ", cfg.validation_split);
  Tensor y_all = check_data(*this, x_in, &y_in, "fit");
  Tensor x = x_in, y = y_all, xv, yv;
  if (cfg.validation_split > 0) {  // Keras: the last fraction, before shuffling
    int64_t n = x.dim(0), nv = int64_t(std::floor(double(n) * cfg.validation_split));
    LS_CHECK(nv > 0 && nv < n, "fit: validation_split ", cfg.validation_split, " leaves no data");
    xv = x.slice(n - nv, n).contiguous(), yv = y.slice(n - nv, n).contiguous();
    x = x.slice(0, n - nv), y = y.slice(0, n - nv);
  } else if (cfg.validation_data.first.defined()) {
    xv = cfg.validation_data.first;
    yv = check_data(*this, xv, &cfg.validation_data.second, "fit(validation_data)");
  }
  const int64_t n = x.dim(0), B = cfg.batch_size;
  int64_t steps = (n + B - 1) / B;
  if (cfg.steps_per_epoch > 0) steps = std::min(steps, cfg.steps_per_epoch);
  const int spe = config_.steps_per_execution;

  History hist;
  stop_training = false;
  for (auto& cb : cfg.callbacks) cb->set_model(this);
  for (auto& cb : cfg.callbacks) cb->on_train_begin({});
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  int64_t samples = 0;
  for (int epoch = cfg.initial_epoch; epoch < cfg.epochs && !stop_training; ++epoch) {
    if (cfg.verbose) std::printf("Epoch %d/%d\n", epoch + 1, cfg.epochs), std::fflush(stdout);
    for (auto& cb : cfg.callbacks) cb->on_epoch_begin(epoch, {});
    reset_metrics(*this);
    if (cfg.shuffle) {  // Fisher-Yates with a counter-based stream per epoch
      Philox rng(cfg.seed ^ 0x5EED, uint64_t(epoch));
      for (int64_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.next_u64() % uint64_t(i + 1)]);
    }
    ProgressBar bar(int(steps), cfg.verbose);
    double compile_before = compile_seconds_;
    auto t0 = Clock::now();
    Logs logs;
    for (int64_t s = 0; s < steps && !stop_training; s += spe) {
      int64_t s_end = std::min<int64_t>(s + spe, steps);
      for (int64_t k = s; k < s_end; ++k) {
        int64_t b0 = k * B, b1 = std::min(n, b0 + B);
        Program& p = program("train", b1 - b0);
        gather_rows(x, perm, b0, b1, p.x());
        gather_rows(y, perm, b0, b1, p.y());
        p.run();
        samples += b1 - b0;
        float l = p.loss();
        if (!std::isfinite(l)) {
          hist.stopped_on_nan = true;
          hist.stop_reason = "loss became " + std::string(std::isnan(l) ? "NaN" : "inf") +
                             " at epoch " + std::to_string(epoch + 1) + ", step " +
                             std::to_string(k + 1) +
                             "; training stopped (lower the learning rate, or check the inputs "
                             "and labels for NaN/inf)";
          std::fprintf(stderr, "\nfit: %s\n", hist.stop_reason.c_str());
          stop_training = true;
          break;
        }
      }
      logs = read_metrics(*this);
      if (!stop_training) bar.update(int(s_end), logs);
      for (auto& cb : cfg.callbacks) cb->on_train_batch_end(int(s_end - 1), logs);
    }
    double epoch_seconds = since(t0) - (compile_seconds_ - compile_before);
    hist.train_seconds += epoch_seconds;
    if (xv.defined() && !hist.stopped_on_nan) {
      Logs v = evaluate(xv, yv, {.batch_size = cfg.batch_size, .verbose = 0});
      for (auto& [k, val] : v) logs["val_" + k] = val;
    }
    if (cfg.verbose && !hist.stopped_on_nan) bar.finish(logs);
    for (auto& [k, val] : logs) hist.history[k].push_back(val);
    hist.epoch.push_back(epoch);
    for (auto& cb : cfg.callbacks) cb->on_epoch_end(epoch, logs);
  }
  for (auto& cb : cfg.callbacks) cb->on_train_end({});
  hist.compile_seconds = compile_seconds_;
  hist.images_per_second = hist.train_seconds > 0 ? double(samples) / hist.train_seconds : 0;
  return hist;
}

Logs Model::evaluate(const Tensor& x, const Tensor& y_in, EvaluateConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before evaluate()");
  Tensor y = check_data(*this, x, &y_in, "evaluate");
  reset_metrics(*this);
  const int64_t n = x.dim(0), B = cfg.batch_size;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  ProgressBar bar(int((n + B - 1) / B), cfg.verbose);
  Logs logs;
  for (int64_t b0 = 0; b0 < n; b0 += B) {
    int64_t b1 = std::min(n, b0 + B);
    Program& p = program("eval", b1 - b0);
    gather_rows(x, idx, b0, b1, p.x());
    gather_rows(y, idx, b0, b1, p.y());
    p.run();
  }
  logs = read_metrics(*this);
  if (cfg.verbose) bar.finish(logs);
  return logs;
}

Tensor Model::predict(const Tensor& x, int batch_size, int verbose) {
  check_data(*this, x, nullptr, "predict");
  const int64_t n = x.dim(0), B = batch_size;
  Tensor out;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  for (int64_t b0 = 0; b0 < n; b0 += B) {
    int64_t b1 = std::min(n, b0 + B);
    Program& p = program("predict", b1 - b0);
    gather_rows(x, idx, b0, b1, p.x());
    p.run();
    const Tensor& pr = p.predictions();
    if (!out.defined()) out = Tensor::empty(pr.shape().with_dim(0, n), pr.dtype());
    std::memcpy(static_cast<char*>(out.raw()) + size_t(b0) * (pr.nbytes() / size_t(b1 - b0)), pr.raw(),
                pr.nbytes());
  }
  return out;
}

}  // namespace lockstep
