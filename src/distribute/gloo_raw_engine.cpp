// Raw Gloo all-reduce timing for the benchmark: Gloo's algorithm classes called directly.
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>

#include <chrono>

#include "distribute/gloo_connection.h"
#include "distribute/raw_engine.h"

namespace lockstep::distribute::detail {

std::vector<double> raw_gloo_allreduce_seconds(const ClusterResolver& resolver,
                                               const CommunicationOptions& options, float* data,
                                               size_t count, int warmup, int iterations) {
  GlooConnection c = connect_gloo_context(resolver, options);
  std::unique_ptr<gloo::Algorithm> algorithm;
  std::vector<float*> ptrs{data};
  if (options.implementation == CollectiveImplementation::kHalvingDoubling) {
    algorithm =
        std::make_unique<gloo::AllreduceHalvingDoubling<float>>(c.context, ptrs, int(count));
  } else {
    algorithm = std::make_unique<gloo::AllreduceRingChunked<float>>(c.context, ptrs, int(count));
  }
  for (int i = 0; i < warmup; ++i) algorithm->run();
  std::vector<double> seconds;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    algorithm->run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  // Tear down together (a peer's early close fails the others' last messages).
  c.client->set("raw/closing/" + std::to_string(resolver.task_index()), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < resolver.num_workers(); ++r)
    keys.push_back("raw/closing/" + std::to_string(r));
  c.client->wait_missing(keys, options.timeout);
  algorithm.reset();
  return seconds;
}

}  // namespace lockstep::distribute::detail
