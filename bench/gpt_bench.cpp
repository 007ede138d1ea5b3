// Lockstep side of the GPT benchmark: the byte-level GPT of examples/gpt_model.h (--preset 10m:
// 6 layers of 384, 6 heads, T = 256, 10.9M parameters) on random windows of Debian's fortunes.
// Training: tokens per second over --train-steps train_on_batch steps (batch --batch-size of T
// tokens each, Adam(3e-4)) after --warmup steps (the first compiles). Generation: tokens per
// second of GptGenerator (lockstep/nn/generate.h) after a one-token prompt, --gen-tokens tokens
// with the key/value cache and without it (the whole context recomputed per token), batch 1,
// float32 (the generator computes in float32 whatever the policy), each the better of 2 runs
// after a warm-up. Prints one JSON line.
//   build/bin/gpt_bench [--preset small|10m|tiny] [--dtype-policy float32|mixed_bfloat16]
//                       [--threads N] [--batch-size B] [--train-steps S] [--warmup W]
//                       [--gen-tokens N] [--mode train|generate|both]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "../examples/gpt_model.h"
#include "lockstep/nn/generate.h"
#include "lockstep/tools/example_args.h"

namespace ls = lockstep;
using Clock = std::chrono::steady_clock;

namespace {

const char* kUsage =
    "usage: gpt_bench [--preset small|10m|tiny] [--dtype-policy float32|mixed_bfloat16]\n"
    "                 [--threads N] [--batch-size B] [--train-steps S] [--warmup W]\n"
    "                 [--gen-tokens N] [--mode train|generate|both]\n";

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const auto a =
      ls::tools::parse_example_args(argc, argv, kUsage,
                                    {"--preset", "--dtype-policy", "--threads", "--batch-size",
                                     "--train-steps", "--warmup", "--gen-tokens", "--mode"});
  try {
    const std::string preset = a.value_or("--preset", "10m"), mode = a.value_or("--mode", "both");
    const std::string policy = a.value_or("--dtype-policy", "float32");
    const int threads = int(a.integer("--threads", 2, 0, 4096));
    const int64_t batch = a.integer("--batch-size", 16, 1, 1 << 16);
    const int64_t steps = a.integer("--train-steps", 5, 1, 1 << 20);
    const int64_t warmup = a.integer("--warmup", 2, 1, 1 << 20);
    const GptConfig cfg = gpt_preset(preset);
    const int64_t gen_tokens =
        a.integer("--gen-tokens", std::min<int64_t>(cfg.seq_len - 1, 128), 1, 1 << 20);
    if (threads > 0) ls::set_num_threads(threads);
    ls::mixed_precision::set_global_policy(policy);
    ls::set_random_seed(1);
    ls::Model model = gpt_model(cfg);
    model.compile({.optimizer = ls::optimizers::Adam(3e-4),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true})});
    double train_tps = 0, loss = 0, compile_s = 0;
    if (mode != "generate") {
      const ByteCorpus corpus = load_fortunes_corpus();
      const auto [x, y] =
          byte_windows(corpus.train, (warmup + steps) * batch, cfg.seq_len, true, 9);
      auto rows = [&](const ls::Tensor& t, int64_t i) {
        return t.slice(i * batch, (i + 1) * batch).contiguous();
      };
      const auto t_compile = Clock::now();
      for (int64_t i = 0; i < warmup; ++i) model.train_on_batch(rows(x, i), rows(y, i));
      compile_s = seconds_since(t_compile);
      const auto t0 = Clock::now();
      for (int64_t i = warmup; i < warmup + steps; ++i)
        loss = model.train_on_batch(rows(x, i), rows(y, i))["loss"];
      train_tps = double(steps * batch * cfg.seq_len) / seconds_since(t0);
    }
    double cached = 0, uncached = 0;
    if (mode != "train") {
      ls::GptGenerator gen(model);
      for (bool cache : {true, false}) {
        const ls::GenerateOptions o{
            .max_new_tokens = gen_tokens, .temperature = 1.0, .seed = 1, .use_cache = cache};
        gen.generate({int32_t('T')}, o);  // compiles
        double best = 0;
        for (int r = 0; r < 2; ++r) {
          gen.generate({int32_t('T')}, o);
          best = std::max(best, double(gen_tokens) / gen.stats().decode_seconds);
        }
        (cache ? cached : uncached) = best;
      }
    }
    std::printf(
        "{\"preset\": \"%s\", \"parameters\": %lld, \"seq_len\": %lld, \"dtype_policy\": \"%s\", "
        "\"threads\": %d, \"batch_size\": %lld, \"train_steps\": %lld, \"train_tokens_per_sec\": "
        "%.1f, \"final_loss\": %.4f, \"warmup_seconds\": %.2f, \"gen_tokens\": %lld, "
        "\"generate_tokens_per_sec\": %.1f, \"generate_nocache_tokens_per_sec\": %.1f}\n",
        preset.c_str(), (long long)model.count_params(), (long long)cfg.seq_len, policy.c_str(),
        threads, (long long)batch, (long long)steps, train_tps, loss, compile_s,
        (long long)gen_tokens, cached, uncached);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_bench: error: %s\n", e.what());
    return 1;
  }
}
