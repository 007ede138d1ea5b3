// The `lockstep generate` command: text from a saved byte-level GPT (examples/gpt.cpp's
// gpt.keras), sampled with the key/value cache (lockstep/nn/generate.h).
#pragma once
#include <cstdio>
#include <string>

#include "lockstep/nn/generate.h"
#include "model_files.h"

namespace lockstep::cli {

inline const char* kGenerateUsage =
    "usage: lockstep generate --model GPT.keras --prompt TEXT [--max-tokens N]\n"
    "       [--temperature T] [--top-k K] [--seed S] [--no-cache] [--threads N]\n"
    "\n"
    "Prints the prompt and the text a byte-level GPT (build/bin/gpt trains one) writes after it:\n"
    "each next byte sampled from softmax(logits / T) among the K most likely, with a key/value\n"
    "cache (one model step per byte). The same model, prompt and seed print the same text.\n"
    "\n"
    "options:\n"
    "  --model FILE       the .keras model: token ids [batch, T] -> logits [batch, T, 256]\n"
    "  --prompt TEXT      the text to continue (its bytes are the first tokens)\n"
    "  --max-tokens N     bytes generated after the prompt (default 200)\n"
    "  --temperature T    0: greedy (the most likely byte); default 0.8\n"
    "  --top-k K          sample among the K most likely bytes (default 40; 0: all)\n"
    "  --seed S           the sampling seed (default 0)\n"
    "  --no-cache         recompute the whole context for every byte (slower; the same text)\n"
    "  --threads N        compute threads (default: all cores)\n";

inline int run_generate(const std::vector<std::string>& argv) {
  CommandSpec spec{"generate",
                   kGenerateUsage,
                   {"--model", "--prompt", "--max-tokens", "--temperature", "--top-k", "--seed",
                    "--threads"},
                   {"--no-cache"},
                   0,
                   0};
  Args a = parse_args(spec, argv);
  if (a.help) return std::fputs(kGenerateUsage, stdout), 0;
  LS_CHECK(a.has("--model"), "generate: --model FILE.keras is required (see lockstep generate --help)");
  LS_CHECK(a.has("--prompt"), "generate: --prompt TEXT is required (see lockstep generate --help)");
  const std::string path = a.get("--model");
  LS_CHECK(ends_with(path, ".keras"), "generate: '", tools::printable(path),
           "' is not a .keras file");
  if (a.has("--threads")) set_num_threads(int(a.integer("--threads", 0, 1, 4096)));
  const std::string prompt = a.get("--prompt");
  LS_CHECK(!prompt.empty(), "generate: --prompt is empty; give at least one character");
  GenerateOptions o{.max_new_tokens = a.integer("--max-tokens", 200, 0, int64_t(1) << 24),
                    .temperature = a.number("--temperature", 0.8, 0.0, 1e6),
                    .top_k = a.integer("--top-k", 40, 0, int64_t(1) << 30),
                    .seed = uint64_t(a.integer("--seed", 0, 0, INT64_MAX)),
                    .use_cache = !a.flags.count("--no-cache")};
  Model m = load_model(path, /*compile=*/false);
  GptGenerator gen(m);
  LS_CHECK(gen.vocabulary_size() == 256, "generate: '", tools::printable(path), "' has ",
           gen.vocabulary_size(), " output tokens; this command reads bytes (a vocabulary of 256, ",
           "as build/bin/gpt trains)");
  // Line by line, control characters escaped (a sampled ESC never reaches the terminal).
  std::string line;
  for (char c : ids_to_bytes(gen.generate(bytes_to_ids(prompt), o)) + "\n") {
    if (c != '\n') {
      line += c;
      continue;
    }
    std::printf("%s\n", tools::printable(line).c_str());
    line.clear();
  }
  std::fprintf(stderr, "generate: %lld bytes in %.3f s (%.1f bytes/s, %s)\n",
               (long long)o.max_new_tokens, gen.stats().decode_seconds,
               gen.stats().decode_seconds > 0 ? o.max_new_tokens / gen.stats().decode_seconds : 0.0,
               o.use_cache ? "key/value cache" : "no cache");
  return 0;
}

}  // namespace lockstep::cli
