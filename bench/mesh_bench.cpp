// keras.distribution on the xla backend: the train-step time of one MLP on one device, under
// DataParallel over 4 devices, and under ModelParallel on a 2x2 (batch, model) and a 1x4 mesh,
// all on the PJRT CPU plugin in one process, the configurations interleaved round by round. On
// the CPU plugin the "devices" share the host's cores, so this shows the cost of the partitioned
// program's collectives and bookkeeping, not an accelerator's speed-up. Prints one line per
// round, the medians, and one JSON line (last line of stdout).
//   build/bin/mesh_bench [--batch-size B] [--width W] [--steps S] [--rounds R]
// Model: 256 features -> Dense(W, relu) -> Dense(W, relu) -> Dense(16), Adam, batch B
// (defaults: W 128, B 128, 20 steps a round, 5 rounds). ModelParallel splits every kernel's
// columns and bias over "model". On a 2-core machine, W 512 with B 256 stops in the CPU
// plugin's collectives (its rendezvous times out after 40 s: 4 partitions' threads and the
// matmuls' own threads share the cores; docs/accelerator.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/parse.h"
#include "lockstep/core/rng.h"
#include "lockstep/distribute/distribution.h"
#include "lockstep/distribute/xla_strategy.h"
#include "lockstep/lockstep.h"

namespace ls = lockstep;
namespace ld = lockstep::distribution;
using Clock = std::chrono::steady_clock;

namespace {

int flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return int(ls::parse_int(name, argv[i + 1], 1, 1 << 20));
  return fallback;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

ld::Distribution model_parallel(int64_t batch, int64_t model) {
  ld::LayoutMap map(ld::DeviceMesh({batch, model}, {"batch", "model"}));
  map["dense.*kernel"] = {std::nullopt, "model"};
  map["dense.*bias"] = {"model"};
  return ld::ModelParallel(map, "batch");
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help")
      return std::puts("usage: mesh_bench [--batch-size B] [--width W] [--steps S] [--rounds R]"),
             0;
  const int batch = flag(argc, argv, "--batch-size", 128), width = flag(argc, argv, "--width", 128),
            steps = flag(argc, argv, "--steps", 20), rounds = flag(argc, argv, "--rounds", 5);
  ls::distribute::XlaClusterResolver::connect("cpu", 4, false);
  using namespace ls::layers;
  auto build = [&] {
    return ls::Sequential({Input({256}), Dense(width, {.activation = "relu"}),
                           Dense(width, {.activation = "relu"}), Dense(16)});
  };
  ls::Philox rng(1);
  const int64_t rows = int64_t(batch) * steps;
  ls::Tensor x = ls::Tensor::zeros(ls::Shape{rows, 256});
  ls::Tensor y = ls::Tensor::zeros(ls::Shape{rows}, ls::DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(-1.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) y.data<int32_t>()[r] = int32_t(r % 16);

  struct Config {
    std::string name;
    std::optional<ld::Distribution> distribution;
    ls::Model model;
    std::vector<double> ms;
  };
  std::vector<Config> configs;
  configs.push_back({"one_device", std::nullopt, {}, {}});
  configs.push_back(
      {"data_parallel_4", ld::DataParallel({"xla:0", "xla:1", "xla:2", "xla:3"}), {}, {}});
  configs.push_back({"model_parallel_2x2", model_parallel(2, 2), {}, {}});
  configs.push_back({"model_parallel_1x4", model_parallel(1, 4), {}, {}});
  ls::set_random_seed(3);
  const std::vector<ls::Tensor> initial = build().get_weights();
  const ls::FitConfig fit{.batch_size = batch, .epochs = 1, .verbose = 0, .shuffle = false};
  auto use = [](const Config& c) {
    if (c.distribution)
      ld::set_distribution(*c.distribution);
    else
      ld::clear_distribution();
  };
  for (Config& c : configs) {  // build, compile and warm up (the first fit compiles the step)
    use(c);
    c.model = build();
    c.model.set_weights(initial);
    c.model.compile({.optimizer = ls::optimizers::Adam(1e-3),
                     .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .backend = "xla"});
    c.model.fit(x, y, fit);
  }
  for (int r = 0; r < rounds; ++r) {
    std::printf("round %d:", r);
    for (Config& c : configs) {
      use(c);
      const auto t0 = Clock::now();
      c.model.fit(x, y, fit);
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
      c.ms.push_back(ms);
      std::printf(" %s %.2f ms", c.name.c_str(), ms);
    }
    std::printf("\n");
  }
  ld::clear_distribution();
  std::string json =
      "{\"batch_size\": " + std::to_string(batch) + ", \"width\": " + std::to_string(width) +
      ", \"steps\": " + std::to_string(steps) + ", \"rounds\": " + std::to_string(rounds);
  for (const Config& c : configs) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ", \"%s_ms_per_step\": %.3f", c.name.c_str(), median(c.ms));
    json += buf;
    std::printf("median %s: %.2f ms per step\n", c.name.c_str(), median(c.ms));
  }
  std::printf("%s}\n", json.c_str());
}
