// Lockstep side of the transformer benchmarks (bench/run_transformer_bench.sh, peers in
// bench/transformer_peers.py), timed over --train-steps training steps after --warmup steps
// (ViT: 10 after 2, GPT: 3 after 1; the warm-up compiles):
//   --model vit: the Vision Transformer of `flowers --model vit` (examples/vit_model.h) without
//     its augmentation layers, on synthetic 64x64x3 images, 10 classes, batch 32, Adam(1e-3);
//     images/s.
//   --model gpt: a decoder-only transformer of ~10.8M parameters built from the layers
//     (Embedding of 256 byte ids and a learned position table, 6 pre-norm blocks of causal
//     MultiHeadAttention (6 heads of 64) and a GELU MLP of 1536, d = 384, a last LayerNorm and a
//     Dense(256) head) on synthetic ids, next-token cross-entropy on every position, Adam(3e-4);
//     --seq-len T (default 256), batch --batch-size (default 8); tokens/s.
// Prints one JSON line (last line of stdout): system, model, dtype_policy, threads, batch_size,
// seq_len, params, items_per_sec (images or tokens), unit, step_ms, final_loss, compile_seconds,
// peak_rss_mb and the planned step memory (Model::step_memory).
//   build/bin/transformer_bench [--model vit|gpt] [--dtype-policy float32|mixed_bfloat16]
//                               [--threads N] [--batch-size B] [--seq-len T]
//                               [--train-steps S] [--warmup W]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "../examples/vit_model.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/attention.h"
#include "lockstep/nn/embedding.h"

namespace ls = lockstep;
using Clock = std::chrono::steady_clock;

namespace {

// bench/transformer_peers.py builds the same models from these sizes.
constexpr int64_t kVocab = 256, kDim = 384, kLayers = 6, kHeads = 6, kMlp = 1536;
constexpr int kVitSize = 64;

struct Args {
  std::string model = "vit", policy = "float32";
  int threads = 2, batch = 0, seq_len = 256, steps = 0, warmup = -1;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "transformer_bench: %s\n"
               "usage: transformer_bench [--model vit|gpt] [--dtype-policy "
               "float32|mixed_bfloat16]\n"
               "                         [--threads N] [--batch-size B] [--seq-len T]\n"
               "                         [--train-steps S] [--warmup W]\n",
               what.c_str());
  std::exit(2);
}

int int_flag(const std::string& flag, const char* v, int min) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < min || x > 1'000'000)
    usage_error(flag + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return int(x);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") usage_error("help");
    if (i + 1 >= argc) usage_error(k + " needs a value");
    const char* v = argv[i + 1];
    if (k == "--model")
      a.model = v;
    else if (k == "--dtype-policy")
      a.policy = v;
    else if (k == "--threads")
      a.threads = int_flag(k, v, 1);
    else if (k == "--batch-size")
      a.batch = int_flag(k, v, 1);
    else if (k == "--seq-len")
      a.seq_len = int_flag(k, v, 2);
    else if (k == "--train-steps")
      a.steps = int_flag(k, v, 1);
    else if (k == "--warmup")
      a.warmup = int_flag(k, v, 1);
    else
      usage_error("unknown flag " + k);
  }
  if (a.model != "vit" && a.model != "gpt") usage_error("--model must be vit or gpt");
  const bool vit = a.model == "vit";
  if (a.batch == 0) a.batch = vit ? 32 : 8;
  if (a.steps == 0) a.steps = vit ? 10 : 3;
  if (a.warmup < 0) a.warmup = vit ? 2 : 1;
  return a;
}

// ids [N, T] (int32) -> next-byte logits [N, T, 256].
ls::Model gpt(int64_t t) {
  using namespace ls::layers;
  ls::KTensor ids = Input({t}, "ids", ls::DType::i32);
  ls::KTensor x = Embedding(kVocab, kDim)(ids);
  ls::KTensor pos = ls::keras_hub::PositionEmbedding(t, "glorot_uniform", "positions")(x);
  x = Add()({x, pos})[0];
  for (int64_t i = 0; i < kLayers; ++i) {
    ls::KTensor h = LayerNormalization({.epsilon = 1e-5})(x);
    h = attend(MultiHeadAttention(kHeads, kDim / kHeads), h, h, {.use_causal_mask = true})[0];
    x = Add()({x, h})[0];
    h = LayerNormalization({.epsilon = 1e-5})(x);
    h = Dense(kDim)(Dense(kMlp, {.activation = "gelu"})(h));
    x = Add()({x, h})[0];
  }
  x = LayerNormalization({.epsilon = 1e-5})(x);
  return ls::Model(ids, Dense(kVocab)(x), "gpt_bench");
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const bool vit = a.model == "vit";
  try {
    ls::set_num_threads(a.threads);
    ls::set_random_seed(1);
    ls::mixed_precision::set_global_policy(a.policy);  // before the layers are made
    ls::Model model =
        vit ? vision_transformer({.image_size = kVitSize, .augment = false}) : gpt(a.seq_len);
    model.compile({.optimizer = ls::optimizers::Adam(vit ? 1e-3 : 3e-4),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true})});
    const int64_t n = int64_t(a.batch) * (a.warmup + a.steps);
    std::mt19937_64 rng(1);
    ls::Tensor x, y;
    if (vit) {
      x = ls::Tensor::empty({n, kVitSize, kVitSize, 3});
      std::uniform_real_distribution<float> u(0.f, 255.f);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
      std::vector<int32_t> labels(static_cast<size_t>(n));
      for (auto& l : labels) l = int32_t(rng() % 10);
      y = ls::Tensor::from_vector_i32({n}, labels);
    } else {  // y: x shifted by one, as a language model's targets
      std::vector<int32_t> ids(size_t(n * (a.seq_len + 1)));
      for (auto& t : ids) t = int32_t(rng() % kVocab);
      std::vector<int32_t> in(size_t(n * a.seq_len)), next(in.size());
      for (int64_t r = 0; r < n; ++r)
        for (int64_t t = 0; t < a.seq_len; ++t) {
          in[size_t(r * a.seq_len + t)] = ids[size_t(r * (a.seq_len + 1) + t)];
          next[size_t(r * a.seq_len + t)] = ids[size_t(r * (a.seq_len + 1) + t + 1)];
        }
      x = ls::Tensor::from_vector_i32({n, a.seq_len}, in);
      y = ls::Tensor::from_vector_i32({n, a.seq_len}, next);
    }
    const ls::StepMemory memory = model.step_memory(a.batch);
    const int64_t w = int64_t(a.warmup) * a.batch;
    model.fit(x.slice(0, w), y.slice(0, w), {.batch_size = a.batch, .epochs = 1, .verbose = 0});
    const auto t0 = Clock::now();
    auto hist =
        model.fit(x.slice(w, n), y.slice(w, n), {.batch_size = a.batch, .epochs = 1, .verbose = 0});
    const double seconds = seconds_since(t0);
    const double items = double(n - w) * (vit ? 1.0 : double(a.seq_len));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    std::printf(
        "{\"system\": \"lockstep\", \"model\": \"%s\", \"dtype_policy\": \"%s\", \"threads\": %d, "
        "\"batch_size\": %d, \"seq_len\": %d, \"params\": %lld, \"items_per_sec\": %.1f, "
        "\"unit\": \"%s\", \"step_ms\": %.2f, \"final_loss\": %.4f, \"compile_seconds\": %.3f, "
        "\"peak_rss_mb\": %.1f, \"step_peak_mb\": %.1f, \"step_arena_mb\": %.1f, "
        "\"thread_replicas\": %d}\n",
        a.model.c_str(), a.policy.c_str(), a.threads, a.batch, vit ? 64 / 8 * (64 / 8) : a.seq_len,
        (long long)model.count_params(), items / seconds, vit ? "images" : "tokens",
        1000.0 * seconds / a.steps, hist.history["loss"].back(), model.compile_seconds(),
        double(ru.ru_maxrss) / 1024.0, double(memory.peak_bytes) / (1 << 20),
        double(memory.arena_bytes) / (1 << 20), hist.thread_replicas);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transformer_bench: error: %s\n", e.what());
    return 1;
  }
}
