// Collective interface pieces shared by every backend: option names, connect() dispatch,
// AsyncCollectives.
#include "lockstep/distribute/collective.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "distribute/backends.h"
#include "distribute/bf16_reduce.h"

namespace lockstep::distribute {

const char* to_string(CollectiveImplementation implementation) {
  switch (implementation) {
    case CollectiveImplementation::kAuto:
      return "auto";
    case CollectiveImplementation::kRing:
      return "ring";
    case CollectiveImplementation::kHalvingDoubling:
      return "halving_doubling";
    case CollectiveImplementation::kMpi:
      return "mpi";
  }
  return "?";
}

CollectiveImplementation parse_collective_implementation(const std::string& name) {
  for (auto impl : {CollectiveImplementation::kAuto, CollectiveImplementation::kRing,
                    CollectiveImplementation::kHalvingDoubling, CollectiveImplementation::kMpi}) {
    if (name == to_string(impl)) return impl;
  }
  throw CollectiveError("unknown collective implementation '" + name +
                        "' (expected auto, ring, halving_doubling or mpi)");
}

void Communicator::allreduce_mean(float* data, size_t count) {
  allreduce_sum(data, count);
  const float scale = 1.0f / float(size());
  for (size_t i = 0; i < count; ++i) data[i] *= scale;
}

// Any backend: all-gather every rank's whole bf16 buffer, then each rank sums all of them (in
// rank order, so every rank gets the same bits). Sends (n-1) x 2 bytes per float per rank:
// the same as the all-to-all + all-gather of the Gloo and MPI versions for two ranks.
void Communicator::allreduce_sum_bf16(std::span<const FloatBuffer> bucket) {
  const size_t total = detail::bucket_floats(bucket, rank(), "allreduce_sum_bf16");
  std::vector<bf16> mine(total);
  detail::pack_bf16(bucket, mine.data(), total);
  const auto all = allgather_bytes(mine.data(), total * sizeof(bf16));
  std::vector<bf16> slices(total * all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != total * sizeof(bf16)) {
      throw CollectiveError("allreduce_sum_bf16: rank " + std::to_string(r) + " sent " +
                            std::to_string(all[r].size() / sizeof(bf16)) + " values, rank " +
                            std::to_string(rank()) + " " + std::to_string(total) +
                            " (every rank must pass buckets of the same sizes)");
    }
    if (total) std::memcpy(slices.data() + r * total, all[r].data(), all[r].size());
  }
  detail::sum_bf16_slices(slices.data(), int(all.size()), total, mine.data());
  detail::unpack_bf16(mine.data(), bucket);
}

namespace detail {
std::string format_duration(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  if (d.count() > 1000) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.1f s", d.count() / 1000.0);
    return buf;
  }
  return std::to_string(d.count()) + " ms";
}
}  // namespace detail

std::unique_ptr<Communicator> connect(const ClusterResolver& resolver,
                                      const CommunicationOptions& options) {
  resolver.validate();
  if (options.timeout.count() <= 0) {
    throw CollectiveError("CommunicationOptions.timeout must be positive (got " +
                          std::to_string(options.timeout.count()) + " ms)");
  }
  const bool want_mpi =
      options.implementation == CollectiveImplementation::kMpi ||
      (options.implementation == CollectiveImplementation::kAuto && resolver.launched_by_mpi());
  if (resolver.num_workers() == 1 && !want_mpi) {
    return std::move(make_in_process_communicators(1, options)[0]);
  }
  if (want_mpi) {
#ifdef LOCKSTEP_HAVE_MPI
    return detail::connect_mpi(resolver, options);
#else
    if (options.implementation == CollectiveImplementation::kMpi) {
      throw CollectiveError(
          "implementation 'mpi' requested but Lockstep was built without OpenMPI (install "
          "libopenmpi-dev and reconfigure), or choose 'ring' / 'halving_doubling' (Gloo)");
    }
#endif
  }
  if (resolver.num_workers() == 1) return std::move(make_in_process_communicators(1, options)[0]);
#ifdef LOCKSTEP_HAVE_GLOO
  return detail::connect_gloo(resolver, options);
#else
  throw CollectiveError("connect(" + resolver.describe() +
                        "): Lockstep was built without Gloo, so it cannot connect worker "
                        "processes over TCP (install libgloo-dev and reconfigure, or launch "
                        "with mpirun for the MPI backend)");
#endif
}

// ---- AsyncCollectives ------------------------------------------------------------------------

struct AsyncCollectives::State {
  Communicator* communicator;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::packaged_task<void()>> queue;
  bool stop = false;
  std::thread thread;

  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  }
};

AsyncCollectives::AsyncCollectives(Communicator& communicator) : state_(new State) {
  state_->communicator = &communicator;
  state_->thread = std::thread([s = state_.get()] { s->loop(); });
}

AsyncCollectives::~AsyncCollectives() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

std::future<void> AsyncCollectives::submit(std::function<void(Communicator&)> work) {
  std::packaged_task<void()> task([work = std::move(work), c = state_->communicator] { work(*c); });
  auto future = task.get_future();
  {
    std::lock_guard lock(state_->mu);
    if (state_->stop) throw CollectiveError("AsyncCollectives: submit after shutdown");
    state_->queue.push_back(std::move(task));
  }
  state_->cv.notify_one();
  return future;
}

std::future<void> AsyncCollectives::allreduce_sum(std::vector<FloatBuffer> bucket) {
  return submit([bucket = std::move(bucket)](Communicator& c) {
    c.allreduce_sum(std::span<const FloatBuffer>(bucket));
  });
}

}  // namespace lockstep::distribute
