// Lockstep side of the training benchmarks: the reference CNN (examples/reference_cnn.h) on
// Fashion-MNIST, the small ResNet of bench/bench_resnet.h on synthetic 64x64x3 images, or a
// keras.applications backbone (applications::MobileNetV2 / EfficientNetB0 with weights=None, 10
// classes, logits) on synthetic --image-size images (default 96), timed over a fixed number of
// training steps after warm-up, and/or inference throughput. --trainable head freezes every
// layer but the classifier ("predictions"): the frozen-backbone step of transfer learning.
// --model text_conv1d / text_bilstm: the text classifiers of examples/text_models.h on synthetic
// token ids in [1, 10000) of length 64 (no padding, no mask), Adam(1e-3), batch 64 (train) /
// 256 (inference); "images" in the JSON keys are sequences there.
// Prints one JSON line (last line of stdout).
//   build/bin/train_bench [--model cnn|resnet|mobilenet_v2|efficientnet_b0|text_conv1d|
//                                  text_bilstm]
//                         [--mode train|infer|both] [--image-size N] [--trainable all|head]
//                         [--dtype-policy float32|mixed_bfloat16] [--threads N]
//                         [--batch-size B] [--train-steps S] [--warmup W]
//                         [--infer-batch-size B] [--infer-batches N] [--data-dir DIR]
//                         [--steps-per-execution N] [--device cpu|xla:cpu|xla:PLUGIN]
//                         [--strategy one_device|mirrored]
// Defaults: cnn: batch 128, 200 steps, 20 warm-up, Adam(1e-3); resnet: batch 64, 30 steps, 5
// warm-up, SGD(0.01, momentum 0.9); mobilenet_v2 / efficientnet_b0: batch 32 (train and
// inference), 20 steps, 3 warm-up, SGD(0.01, momentum 0.9). --mode infer: batch 1000 (cnn) /
// 256 (resnet), 10 batches after 2 warm-up batches. --mode both (the default, as before):
// train, then inference at the training batch size over 50 (cnn) / 10 (resnet) batches.
// JSON keys: system, model, mode, dtype_policy, threads, batch_size, images_per_sec (of
// --mode; train in "both"), train_images_per_sec / infer_images_per_sec (those measured),
// infer_batch_size, params (count_params: weights and batch-norm statistics), compile_seconds,
// peak_rss_mb, final_loss and thread_replicas (train: how fit ran the step, History::
// thread_replicas), steps_per_execution (CompileConfig::steps_per_execution:
// train steps run per call into the compiled program; default 1).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "../examples/cli/device_flag.h"
#include "../examples/reference_cnn.h"
#include "../examples/text_models.h"
#include "bench_resnet.h"

namespace ls = lockstep;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kTextVocab = 10000, kTextLen = 64;  // bench/peers.py's TEXT_VOCAB, TEXT_LEN

struct Args {
  std::string model = "cnn", mode = "both", policy = "float32", data_dir, device = "cpu";
  int threads = 2, batch = 0, steps = -1, warmup = -1, infer_batch = 0, infer_batches = 0;
  int steps_per_execution = 1;
  int image_size = 96;            // the applications' input (synthetic images)
  std::string trainable = "all";  // "head": only the classifier trains
  std::string strategy;           // "" (none), "mirrored", ... (strategy_from_name)
  bool application() const { return model == "mobilenet_v2" || model == "efficientnet_b0"; }
  bool text() const { return model == "text_conv1d" || model == "text_bilstm"; }
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(
      stderr,
      "train_bench: %s\n"
      "usage: train_bench [--model cnn|resnet|mobilenet_v2|efficientnet_b0|text_conv1d|"
      "text_bilstm]\n"
      "                   [--mode train|infer|both] [--image-size N] [--trainable all|head]\n"
      "                   [--dtype-policy float32|mixed_bfloat16] [--threads N]\n"
      "                   [--batch-size B] [--train-steps S] [--warmup W]\n"
      "                   [--infer-batch-size B] [--infer-batches N] [--data-dir DIR]\n"
      "                   [--steps-per-execution N] [--device cpu|xla:cpu|xla:PLUGIN]\n"
      "                   [--strategy one_device|mirrored]\n",
      what.c_str());
  std::exit(2);
}

int positive_int(const std::string& flag, const char* v, int min) {
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < min || x > 1'000'000)
    usage_error(flag + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return int(x);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (i + 1 >= argc) usage_error(k + " needs a value");
    const char* v = argv[i + 1];
    if (k == "--model")
      a.model = v;
    else if (k == "--mode")
      a.mode = v;
    else if (k == "--dtype-policy")
      a.policy = v;
    else if (k == "--data-dir")
      a.data_dir = v;
    else if (k == "--threads")
      a.threads = positive_int(k, v, 1);
    else if (k == "--batch-size")
      a.batch = positive_int(k, v, 1);
    else if (k == "--train-steps")
      a.steps = positive_int(k, v, 1);
    else if (k == "--warmup")
      a.warmup = positive_int(k, v, 0);
    else if (k == "--infer-batch-size")
      a.infer_batch = positive_int(k, v, 1);
    else if (k == "--infer-batches")
      a.infer_batches = positive_int(k, v, 1);
    else if (k == "--steps-per-execution")
      a.steps_per_execution = positive_int(k, v, 1);
    else if (k == "--device")  // examples/cli/device_flag.h
      a.device = v;
    else if (k == "--image-size")
      a.image_size = positive_int(k, v, 32);
    else if (k == "--trainable")
      a.trainable = v;
    else if (k == "--strategy")
      a.strategy = v;
    else
      usage_error("unknown argument " + k);
  }
  if (a.model != "cnn" && a.model != "resnet" && !a.application() && !a.text())
    usage_error(
        "--model must be cnn, resnet, mobilenet_v2, efficientnet_b0, text_conv1d or "
        "text_bilstm, got '" +
        a.model + "'");
  if (a.trainable != "all" && a.trainable != "head")
    usage_error("--trainable must be all or head, got '" + a.trainable + "'");
  if (a.trainable == "head" && !a.application())
    usage_error("--trainable head needs --model mobilenet_v2 or efficientnet_b0");
  if (a.mode != "train" && a.mode != "infer" && a.mode != "both")
    usage_error("--mode must be train, infer or both, got '" + a.mode + "'");
  const bool cnn = a.model == "cnn";
  if (a.batch == 0)
    a.batch = a.application() ? 32 : a.mode == "infer" ? (cnn ? 1000 : 256) : (cnn ? 128 : 64);
  if (a.steps < 0)
    a.steps = a.application() ? 20 : cnn || a.model == "text_conv1d" ? (cnn ? 200 : 100) : 30;
  if (a.warmup < 0) a.warmup = a.mode == "infer" ? 2 : a.application() ? 3 : (cnn ? 20 : 5);
  if (a.infer_batch == 0) a.infer_batch = a.batch;  // --mode infer: --batch-size is it
  if (a.infer_batches == 0) a.infer_batches = a.mode == "infer" ? 10 : (cnn ? 50 : 10);
  return a;
}

// Synthetic size x size x 3 images in [0, 1) and labels 0..9 (the same distribution as
// bench/peers.py).
std::pair<ls::Tensor, ls::Tensor> synthetic_images(int64_t n, uint64_t seed, int64_t size = 64) {
  ls::Tensor x = ls::Tensor::empty({n, size, size, 3});
  std::vector<int32_t> labels(size_t(n), 0);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  float* px = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = u(rng);
  for (auto& l : labels) l = int32_t(rng() % 10);
  return {x, ls::Tensor::from_vector_i32({n}, labels)};
}

// Token ids (n, 64) in [1, 10000) and labels 0..9 (as bench/peers.py's text data).
std::pair<ls::Tensor, ls::Tensor> synthetic_ids(int64_t n, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n * kTextLen)), labels(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  for (auto& t : ids) t = int32_t(1 + rng() % (kTextVocab - 1));
  for (auto& l : labels) l = int32_t(rng() % 10);
  return {ls::Tensor::from_vector_i32({n, kTextLen}, ids),
          ls::Tensor::from_vector_i32({n}, labels)};
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const bool cnn = a.model == "cnn";
  try {
    ls::set_num_threads(a.threads);
    ls::set_random_seed(1);
    // Before the model is built: layers read the global policy when they are created.
    ls::mixed_precision::set_global_policy(a.policy);
    ls::distribute::Strategy strategy = ls::distribute::strategy_from_name(a.strategy);
    std::optional<ls::distribute::Strategy::Scope> scope;
    if (strategy.impl()) scope.emplace(strategy.impl());
    ls::Model model;
    if (a.application()) {
      model = ls::applications::by_name(a.model, {.input_shape = {a.image_size, a.image_size, 3},
                                                  .classes = 10,
                                                  .classifier_activation = "linear"});
      if (a.trainable == "head") {  // transfer learning's first phase: the classifier only
        model.set_trainable(false);
        model.get_layer("predictions")->trainable = true;
      }
    } else if (a.text()) {
      model = text_classifier(a.model.substr(5), kTextVocab, kTextLen, 10);
    } else {
      model = cnn ? reference_cnn() : bench_resnet();
    }
    if (cnn || a.text())
      model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                     .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .steps_per_execution = a.steps_per_execution,
                     .backend = ls::cli::backend_for_device(a.device)});
    else
      model.compile({.optimizer = ls::optimizers::SGD(0.01, 0.9),
                     .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .steps_per_execution = a.steps_per_execution,
                     .backend = ls::cli::backend_for_device(a.device)});

    // Data: the train part covers warm-up + timed steps (one pass, no repeats); inference reads
    // infer_batches batches (wrapping over what there is).
    const bool train = a.mode != "infer", infer = a.mode != "train";
    const int64_t n_train = train ? int64_t(a.batch) * (a.steps + a.warmup) : 0;
    const int64_t n_infer = infer ? int64_t(a.infer_batch) * a.infer_batches : 0;
    ls::Tensor x_train, y_train, x_infer;
    if (cnn) {
      auto data = ls::data::load_fashion_mnist(a.data_dir);
      if (n_train > data.x_train.dim(0))
        throw ls::Error("train_bench: --train-steps + --warmup need " + std::to_string(n_train) +
                        " Fashion-MNIST images, there are " + std::to_string(data.x_train.dim(0)) +
                        "; ask for fewer steps");
      x_train = data.x_train.slice(0, n_train);
      y_train = data.y_train.slice(0, n_train);
      x_infer = data.x_test;
    } else if (a.text()) {
      std::tie(x_train, y_train) = synthetic_ids(n_train, 1);
      x_infer = synthetic_ids(std::min<int64_t>(std::max<int64_t>(n_infer, 1), 4096), 2).first;
    } else {
      const int64_t size = a.application() ? a.image_size : 64;
      std::tie(x_train, y_train) = synthetic_images(n_train, 1, size);
      x_infer =
          synthetic_images(std::min<int64_t>(std::max<int64_t>(n_infer, 1), 4096), 2, size).first;
    }

    std::map<std::string, double> rates;
    double final_loss = 0;
    int thread_replicas = 1;  // how fit ran the step (lockstep/core/config.h)
    if (train) {
      const int64_t w = int64_t(a.warmup) * a.batch;
      // The warm-up fit compiles the train program; the timed fit reuses it.
      if (w > 0)
        model.fit(x_train.slice(0, w), y_train.slice(0, w),
                  {.batch_size = a.batch, .epochs = 1, .verbose = 0});
      auto t0 = Clock::now();
      auto hist = model.fit(x_train.slice(w, n_train), y_train.slice(w, n_train),
                            {.batch_size = a.batch, .epochs = 1, .verbose = 0});
      rates["train"] = double(n_train - w) / seconds_since(t0);
      final_loss = hist.history["loss"].back();
      thread_replicas = hist.thread_replicas;
    }
    if (infer) {
      // Whole batches out of x_infer, wrapping around; the first call compiles.
      const int64_t have = x_infer.dim(0) - x_infer.dim(0) % a.infer_batch;
      if (have == 0)
        throw ls::Error("train_bench: --infer-batch-size " + std::to_string(a.infer_batch) +
                        " is larger than the " + std::to_string(x_infer.dim(0)) +
                        " inference images");
      auto batch_at = [&](int64_t b) {
        int64_t start = (b * a.infer_batch) % have;
        return x_infer.slice(start, start + a.infer_batch);
      };
      const int warm = std::max(1, a.mode == "infer" ? a.warmup : 1);
      for (int b = 0; b < warm; ++b) model.predict(batch_at(b), a.infer_batch);
      auto t1 = Clock::now();
      for (int b = 0; b < a.infer_batches; ++b) model.predict(batch_at(b), a.infer_batch);
      rates["infer"] = double(n_infer) / seconds_since(t1);
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long long trainable_params = 0;
    for (auto& w : model.trainable_weights()) trainable_params += w->value.numel();
    std::printf(
        "{\"system\": \"lockstep\", \"model\": \"%s\", \"mode\": \"%s\", "
        "\"dtype_policy\": \"%s\", \"threads\": %d, \"batch_size\": %d, "
        "\"images_per_sec\": %.1f",
        a.model.c_str(), a.mode.c_str(), a.policy.c_str(), a.threads, a.batch,
        rates.count("train") ? rates["train"] : rates["infer"]);
    if (train)
      std::printf(", \"train_images_per_sec\": %.1f, \"final_loss\": %.4f, \"thread_replicas\": %d",
                  rates["train"], final_loss, thread_replicas);
    if (infer)
      std::printf(", \"infer_images_per_sec\": %.1f, \"infer_batch_size\": %d", rates["infer"],
                  a.infer_batch);
    std::printf(
        ", \"params\": %lld, \"compile_seconds\": %.3f, \"peak_rss_mb\": %.1f, "
        "\"steps_per_execution\": %d, \"device\": \"%s\", \"image_size\": %d, "
        "\"trainable\": \"%s\", \"trainable_params\": %lld}\n",
        static_cast<long long>(model.count_params()), model.compile_seconds(),
        ru.ru_maxrss / 1024.0, a.steps_per_execution, a.device.c_str(),
        a.application() ? a.image_size
        : cnn           ? 28
        : a.text()      ? int(kTextLen)
                        : 64,
        a.trainable.c_str(), trainable_params);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: error: %s\n", e.what());
    return 1;
  }
}
