// A small GPT that writes text: a decoder-only transformer (examples/gpt_model.h: KerasHub's
// TokenAndPositionEmbedding and TransformerDecoder blocks) trained on the bytes of every quote
// in Debian's fortunes package to predict the next byte. Each epoch trains on --steps batches of
// random windows and prints the validation loss and perplexity (per byte); then it samples text
// from --prompt with the key/value cache (lockstep/nn/generate.h), saves the model as .keras
// (`lockstep generate --model gpt.keras --prompt "..."` reads it) and ends with one JSON line:
// training tokens per second and generation tokens per second with and without the cache.
//
//   build/bin/gpt [--preset small|10m|tiny] [--layers N] [--d-model N] [--heads N]
//       [--seq-len N] [--epochs N] [--steps N] [--batch-size N] [--learning-rate F]
//       [--dropout F] [--dtype-policy float32|mixed_bfloat16] [--threads N] [--seed N]
//       [--out FILE.keras] [--prompt TEXT] [--max-tokens N] [--temperature F] [--top-k K]
//       [--fortunes-dir DIR] [--validation-windows N]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "gpt_model.h"
#include "lockstep/core/parse.h"
#include "lockstep/nn/generate.h"
#include "lockstep/tools/example_args.h"
#include "lockstep/tools/paths.h"

namespace ls = lockstep;

namespace {

const char* kUsage =
    "usage: gpt [--preset small|10m|tiny] [--layers N] [--d-model N] [--heads N]\n"
    "       [--seq-len N] [--epochs N] [--steps N] [--batch-size N] [--learning-rate F]\n"
    "       [--dropout F] [--dtype-policy float32|mixed_bfloat16] [--threads N] [--seed N]\n"
    "       [--out FILE.keras] [--prompt TEXT] [--max-tokens N] [--temperature F] [--top-k K]\n"
    "       [--fortunes-dir DIR] [--validation-windows N]\n"
    "Trains a byte-level GPT on Debian's fortunes (apt-get install fortunes), prints the\n"
    "validation loss and perplexity per epoch, samples --max-tokens bytes after --prompt and\n"
    "saves the model (default gpt.keras). --preset 10m: 6 layers of 384, 6 heads, T = 256.\n"
    "--epochs 0 only measures generation (with and without the key/value cache).\n";

struct Args {
  GptConfig model;
  std::string preset, policy, out, prompt, fortunes_dir;
  int epochs = 0, steps = 0, batch = 0, threads = 0;
  int64_t max_tokens = 0, top_k = 0, validation_windows = 0;
  uint64_t seed = 0;
  double learning_rate = 0, temperature = 0;
};

Args parse(int argc, char** argv) {
  const auto e = ls::tools::parse_example_args(
      argc, argv, kUsage,
      {"--preset", "--layers", "--d-model", "--heads", "--seq-len", "--epochs", "--steps",
       "--batch-size", "--learning-rate", "--dropout", "--dtype-policy", "--threads", "--seed",
       "--out", "--prompt", "--max-tokens", "--temperature", "--top-k", "--fortunes-dir",
       "--validation-windows"});
  Args a;
  a.preset = e.value_or("--preset", "small");
  try {
    a.model = gpt_preset(a.preset);
  } catch (const std::exception& err) {
    std::fprintf(stderr, "%s\n%s", err.what(), kUsage);
    std::exit(2);
  }
  const int64_t big = int64_t(1) << 20;
  a.model.layers = e.integer("--layers", a.model.layers, 1, 1024);
  a.model.d_model = e.integer("--d-model", a.model.d_model, 1, big);
  a.model.heads = e.integer("--heads", a.model.heads, 1, 1024);
  a.model.seq_len = e.integer("--seq-len", a.model.seq_len, 2, big);
  a.model.dropout = ls::parse_double("--dropout", e.value_or("--dropout", "0"), 0.0, 0.99);
  const bool ten_m = a.preset == "10m";
  a.epochs = int(e.integer("--epochs", ten_m ? 1 : 3, 0, 1000000));
  a.steps = int(e.integer("--steps", ten_m ? 10 : 100, 1, 1 << 30));
  a.batch = int(e.integer("--batch-size", ten_m ? 16 : 32, 1, 1 << 20));
  a.learning_rate = ls::parse_double("--learning-rate", e.value_or("--learning-rate", "0.002"),
                                     1e-9, 10.0);
  a.policy = e.value_or("--dtype-policy", "float32");
  a.threads = int(e.integer("--threads", 0, 0, 4096));
  a.seed = uint64_t(e.integer("--seed", 42, 0, INT64_MAX));
  a.out = e.value_or("--out", "gpt.keras");
  a.prompt = e.value_or("--prompt", "The ");
  a.max_tokens = e.integer("--max-tokens", 200, 0, big);
  a.temperature = ls::parse_double("--temperature", e.value_or("--temperature", "0.8"), 0.0, 100.0);
  a.top_k = e.integer("--top-k", 40, 0, 256);
  a.fortunes_dir = e.value_or("--fortunes-dir", ls::tools::kFortunesDir);
  a.validation_windows = e.integer("--validation-windows", 256, 1, big);
  if (a.model.d_model % a.model.heads != 0) {
    std::fprintf(stderr, "gpt: --d-model (%lld) must be a multiple of --heads (%lld)\n%s",
                 (long long)a.model.d_model, (long long)a.model.heads, kUsage);
    std::exit(2);
  }
  if (a.prompt.empty()) {
    std::fprintf(stderr, "gpt: --prompt must not be empty\n%s", kUsage);
    std::exit(2);
  }
  return a;
}

// Sampled text for the terminal: control characters escaped (lockstep/tools/paths.h), line
// breaks kept.
std::string shown(const std::string& text) {
  std::string out, line;
  for (char c : text + "\n") {
    if (c != '\n') {
      line += c;
      continue;
    }
    out += ls::tools::printable(line) + "\n";
    line.clear();
  }
  out.pop_back();
  return out;
}

// Generation tokens per second (after the prompt), with or without the cache; the first call
// compiles, so it runs twice and reports the second.
double generation_rate(ls::GptGenerator& gen, const std::vector<int32_t>& prompt, int64_t tokens,
                       bool cache) {
  ls::GenerateOptions o{.max_new_tokens = tokens, .temperature = 1.0, .seed = 1, .use_cache = cache};
  gen.generate(prompt, o);
  gen.generate(prompt, o);
  return double(tokens) / gen.stats().decode_seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  try {
    if (args.threads > 0) ls::set_num_threads(args.threads);
    ls::set_random_seed(args.seed);
    ls::mixed_precision::set_global_policy(args.policy);
    const ByteCorpus corpus = load_fortunes_corpus(args.fortunes_dir, 0.1, args.seed);
    std::printf("fortunes: %lld quotes from %lld files: %.2f MB to train on, %.2f MB held out\n",
                (long long)corpus.quotes, (long long)corpus.files, corpus.train.size() / 1e6,
                corpus.validation.size() / 1e6);
    const int64_t T = args.model.seq_len;
    const auto [x_val, y_val] = byte_windows(corpus.validation, args.validation_windows, T, false);

    ls::Model model = gpt_model(args.model);
    model.compile({.optimizer = ls::optimizers::Adam(args.learning_rate),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true})});
    model.summary();

    double train_tokens = 0, train_seconds = 0, val_loss = NAN;
    for (int epoch = 0; epoch < args.epochs; ++epoch) {
      // Fresh random windows each epoch: --steps batches of --batch-size.
      const auto [x, y] = byte_windows(corpus.train, int64_t(args.steps) * args.batch, T, true,
                                       args.seed * 1000003 + uint64_t(epoch));
      ls::History h = model.fit(x, y, {.batch_size = args.batch, .epochs = epoch + 1,
                                       .shuffle = false, .initial_epoch = epoch});
      train_tokens += double(h.samples) * double(T);
      train_seconds += h.train_seconds;
      val_loss = model.evaluate(x_val, y_val, {.batch_size = args.batch, .verbose = 0})["loss"];
      std::printf("epoch %d/%d: loss %.4f - val_loss %.4f - val_perplexity %.3f (%.3f bits/byte)\n",
                  epoch + 1, args.epochs, h.history["loss"].back(), val_loss, std::exp(val_loss),
                  val_loss / std::log(2.0));
      std::fflush(stdout);
    }
    if (args.epochs > 0) {
      model.save(args.out);
      std::printf("wrote %s\n", args.out.c_str());
    }

    ls::GptGenerator gen(model);
    const std::vector<int32_t> prompt = ls::bytes_to_ids(args.prompt);
    const auto ids = gen.generate(prompt, {.max_new_tokens = args.max_tokens,
                                           .temperature = args.temperature,
                                           .top_k = args.top_k,
                                           .seed = args.seed});
    std::printf("--- sample (temperature %.2f, top-k %lld, seed %llu) ---\n%s\n---\n",
                args.temperature, (long long)args.top_k, (unsigned long long)args.seed,
                shown(ls::ids_to_bytes(ids)).c_str());
    const int64_t bench_tokens = std::max<int64_t>(1, std::min<int64_t>(T - 1, 64));
    const std::vector<int32_t> one{prompt[0]};
    const double cached = generation_rate(gen, one, bench_tokens, true);
    const double uncached = generation_rate(gen, one, bench_tokens, false);
    std::printf(
        "{\"preset\": \"%s\", \"parameters\": %lld, \"seq_len\": %lld, \"epochs\": %d, "
        "\"val_loss\": %.4f, \"val_perplexity\": %.4f, \"train_tokens_per_sec\": %.1f, "
        "\"generate_tokens_per_sec\": %.1f, \"generate_nocache_tokens_per_sec\": %.1f, "
        "\"dtype_policy\": \"%s\"}\n",
        args.preset.c_str(), (long long)model.count_params(), (long long)T, args.epochs, val_loss,
        std::exp(val_loss), train_seconds > 0 ? train_tokens / train_seconds : 0.0, cached,
        uncached, args.policy.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt: error: %s\n", e.what());
    return 1;
  }
}
