// Gloo backend: worker processes connected by Gloo's tcp transport, full mesh set up through
// the rendezvous store hosted by worker 0. All-reduce uses Gloo's classic algorithm classes
// (AllreduceRingChunked, AllreduceHalvingDoubling); their instances are cached so a training
// step that reduces the same buffers every step does not rebuild them.
//
// Cache rule: creating a Gloo algorithm takes communication slots from the context, so every
// rank must create algorithms at the same calls. Buckets are cached by their sizes (the same
// on every rank) and reduced through an owned staging buffer; a single buffer of 8 MiB or more
// is reduced in place, cached by its pointer, and the ranks agree on "everyone hit the cache"
// with a one-float all-reduce before using it (pointers differ between ranks).
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "distribute/backends.h"
#include "distribute/bf16_reduce.h"
#include "distribute/gloo_connection.h"
#include "lockstep/core/env.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/store.h"

namespace lockstep::distribute::detail {
namespace {

using std::chrono::milliseconds;

// Below this many bytes a bucket goes through the staging buffer and, with kAuto, uses
// halving-doubling (fewer steps); above it, ring-chunked (bandwidth-optimal).
constexpr size_t kLargeBytes = 256 * 1024;
// From this size on a single buffer is reduced in place (no staging copies) at the price of the
// one-float agreement round; below it the two copies cost less than that round (measured with
// bench/allreduce_bench: 1 MiB took ~2.8 ms with the agreement vs ~0.8 ms raw on a loaded host).
constexpr size_t kInPlaceBytes = 8 << 20;
constexpr size_t kMaxCachedAlgorithms = 64;

void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);  // a dying peer must not kill this process with SIGPIPE
    }
  });
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// gloo::rendezvous::Store over our StoreClient, keys under a prefix.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(StoreClient& client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    client_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override { return client_.get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, client_.timeout()); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    client_.wait(full, timeout);
  }

 private:
  StoreClient& client_;
  std::string prefix_;
};

bool is_timeout_message(const std::string& msg) {
  return msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
}

// Gloo messages start with "[file:line] "; keep the part a user can read.
std::string engine_message(const std::exception& e) {
  std::string msg = e.what();
  if (!msg.empty() && msg[0] == '[') {
    const size_t close = msg.find("] ");
    if (close != std::string::npos) msg = msg.substr(close + 2);
  }
  return msg;
}

// Notices when the process stops running (SIGSTOP, Ctrl-Z, a suspended VM): a thread ticks
// every 100 ms, and the longest gap between ticks since restart() is how long the process was
// not running (a stopped process's threads all stop). Costs one sleeping thread.
class PauseWatch {
 public:
  PauseWatch() : thread_([this] { tick(); }) {}
  ~PauseWatch() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void restart() { longest_ms_.store(0, std::memory_order_relaxed); }
  // Includes the time since the last tick: the failing call can run before the ticker, on
  // resuming, gets the CPU back.
  double longest_seconds() const {
    const int64_t since = now_ms() - last_tick_ms_.load(std::memory_order_relaxed);
    return 1e-3 * double(std::max(longest_ms_.load(std::memory_order_relaxed), since));
  }

 private:
  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void tick() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; })) {
      const int64_t now = now_ms();
      const int64_t gap = now - last_tick_ms_.load(std::memory_order_relaxed);
      if (gap > longest_ms_.load(std::memory_order_relaxed))
        longest_ms_.store(gap, std::memory_order_relaxed);
      last_tick_ms_.store(now, std::memory_order_relaxed);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<int64_t> last_tick_ms_{now_ms()};
  std::atomic<int64_t> longest_ms_{0};
  std::thread thread_;  // last: starts after the rest is set up
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(int rank, int size, CollectiveImplementation implementation,
                   CommunicationOptions options, std::vector<std::string> addresses,
                   std::unique_ptr<StoreServer> server, std::unique_ptr<StoreClient> client,
                   std::shared_ptr<gloo::transport::Device> device,
                   std::shared_ptr<gloo::Context> context)
      : rank_(rank),
        size_(size),
        implementation_(implementation),
        options_(options),
        addresses_(std::move(addresses)),
        server_(std::move(server)),
        client_(std::move(client)),
        device_(std::move(device)),
        context_(std::move(context)) {}

  ~GlooCommunicator() override { close(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return std::string("gloo_") + to_string(implementation_); }

  void allreduce_sum(float* data, size_t count) override {
    FloatBuffer buffer{data, count};
    allreduce_sum(std::span<const FloatBuffer>(&buffer, 1));
  }

  void allreduce_sum(std::span<const FloatBuffer> bucket) override {
    check_usable("allreduce_sum");
    size_t total = 0;
    for (const auto& b : bucket) {
      if (b.data == nullptr && b.count > 0) {
        throw CollectiveError("allreduce_sum: null buffer with " + std::to_string(b.count) +
                              " floats on worker " + std::to_string(rank_));
      }
      total += b.count;
    }
    check_count(total, "allreduce_sum");
    if (total == 0) return;
    if (bucket.size() == 1 && total * sizeof(float) >= kInPlaceBytes) {
      reduce_in_place(bucket[0]);
      return;
    }
    std::vector<size_t> sizes;
    for (const auto& b : bucket) sizes.push_back(b.count);
    auto it = staged_.find(sizes);
    if (it == staged_.end()) {
      if (staged_.size() >= kMaxCachedAlgorithms) staged_.clear();  // same on every rank
      Staged entry;
      entry.buffer.resize(total);
      guarded("allreduce_sum setup",
              [&] { entry.algorithm = make_allreduce<float>(entry.buffer.data(), total); });
      it = staged_.emplace(sizes, std::move(entry)).first;
    }
    float* staging = it->second.buffer.data();
    size_t offset = 0;
    for (const auto& b : bucket) {
      if (b.count) std::memcpy(staging + offset, b.data, b.count * sizeof(float));
      offset += b.count;
    }
    guarded("allreduce_sum of " + std::to_string(total) + " floats",
            [&] { it->second.algorithm->run(); });
    offset = 0;
    for (const auto& b : bucket) {
      if (b.count) std::memcpy(b.data, staging + offset, b.count * sizeof(float));
      offset += b.count;
    }
  }

  // bf16 on the wire, f32 sums (see collective.h): gloo::alltoall hands rank j every rank's
  // bf16 slice j, rank j adds them in f32 in rank order, gloo::allgather returns the bf16 sums.
  // The bucket is padded with zeros to a multiple of the rank count.
  void allreduce_sum_bf16(std::span<const FloatBuffer> bucket) override {
    check_usable("allreduce_sum_bf16");
    const size_t total = bucket_floats(bucket, rank_, "allreduce_sum_bf16");
    check_count(total, "allreduce_sum_bf16");
    if (total == 0) return;
    const size_t n = size_t(size_);
    if (n == 2) {
      // Two workers: all-gather each worker's whole buffer (the same bytes as all-to-all plus
      // all-gather) with Gloo's ring algorithm over bound buffers, then sum in rank order. The
      // unbound-buffer collectives (gloo::alltoall/allgather) crawl once any classic algorithm
      // has run on the context (a 2-double all-reduce, as fit does every step, is enough: 18 MB
      // then took 7 s instead of 0.2 s), which stalled training on large buckets.
      bf16_send_.resize(total);
      bf16_recv_.resize(n * total);
      bf16_mine_.resize(total);
      pack_bf16(bucket, bf16_send_.data(), total);
      guarded("allreduce_sum_bf16 of " + std::to_string(total) + " floats (all-gather)", [&] {
        std::vector<const uint16_t*> in{reinterpret_cast<const uint16_t*>(bf16_send_.data())};
        gloo::AllgatherRing<uint16_t> algorithm(
            context_, in, reinterpret_cast<uint16_t*>(bf16_recv_.data()), int(total));
        algorithm.run();
      });
      sum_bf16_slices(bf16_recv_.data(), size_, total, bf16_mine_.data());
      unpack_bf16(bf16_mine_.data(), bucket);
      return;
    }
    const size_t chunk = (total + n - 1) / n;
    bf16_send_.resize(n * chunk);
    bf16_recv_.resize(n * chunk);
    bf16_mine_.resize(chunk);
    pack_bf16(bucket, bf16_send_.data(), n * chunk);
    auto* send = reinterpret_cast<uint16_t*>(bf16_send_.data());
    auto* recv = reinterpret_cast<uint16_t*>(bf16_recv_.data());
    const std::string op = "allreduce_sum_bf16 of " + std::to_string(total) + " floats";
    guarded(op + " (all-to-all)", [&] {
      gloo::AlltoallOptions o(context_);
      o.setInput(send, n * chunk);
      o.setOutput(recv, n * chunk);
      o.setTimeout(options_.timeout);
      gloo::alltoall(o);
    });
    sum_bf16_slices(bf16_recv_.data(), size_, chunk, bf16_mine_.data());
    guarded(op + " (all-gather)", [&] {
      gloo::AllgatherOptions o(context_);
      o.setInput(reinterpret_cast<uint16_t*>(bf16_mine_.data()), chunk);
      o.setOutput(send, n * chunk);
      o.setTimeout(options_.timeout);
      gloo::allgather(o);
    });
    unpack_bf16(bf16_send_.data(), bucket);
  }

  void allreduce_sum(double* data, size_t count) override {
    check_usable("allreduce_sum");
    check_count(count, "allreduce_sum");
    if (count == 0) return;
    guarded("allreduce_sum of " + std::to_string(count) + " doubles", [&] {
      auto algorithm = make_allreduce<double>(data, count);
      algorithm->run();
    });
  }

  void broadcast(float* data, size_t count, int root) override {
    broadcast_bytes(data, count * sizeof(float), root);
  }

  void broadcast_bytes(void* data, size_t bytes, int root) override {
    check_usable("broadcast");
    check_count(bytes, "broadcast");
    if (root < 0 || root >= size_) {
      throw CollectiveError("broadcast: root " + std::to_string(root) + " is not a worker (0.." +
                            std::to_string(size_ - 1) + ")");
    }
    if (bytes == 0) return;
    guarded("broadcast of " + std::to_string(bytes) + " bytes from worker " + std::to_string(root),
            [&] {
              std::vector<uint8_t*> ptrs{static_cast<uint8_t*>(data)};
              gloo::BroadcastOneToAll<uint8_t> algorithm(context_, ptrs, bytes, root);
              algorithm.run();
            });
  }

  std::vector<std::vector<char>> allgather_bytes(const void* data, size_t bytes) override {
    check_usable("allgather_bytes");
    check_count(bytes, "allgather_bytes");
    std::vector<int64_t> sizes(size_);
    const int64_t mine = int64_t(bytes);
    guarded("allgather_bytes (sizes)", [&] {
      std::vector<const int64_t*> in{&mine};
      gloo::AllgatherRing<int64_t> algorithm(context_, in, sizes.data(), 1);
      algorithm.run();
    });
    const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<std::vector<char>> out(size_);
    if (longest == 0) return out;
    std::vector<char> padded(longest, 0), all(size_t(longest) * size_);
    if (bytes) std::memcpy(padded.data(), data, bytes);
    guarded("allgather_bytes of " + std::to_string(bytes) + " bytes", [&] {
      std::vector<const char*> in{padded.data()};
      gloo::AllgatherRing<char> algorithm(context_, in, all.data(), int(longest));
      algorithm.run();
    });
    for (int r = 0; r < size_; ++r) {
      const char* p = all.data() + size_t(longest) * r;
      out[r].assign(p, p + sizes[r]);
    }
    return out;
  }

  void barrier() override {
    check_usable("barrier");
    guarded("barrier", [&] {
      if (!barrier_) barrier_ = std::make_unique<gloo::BarrierAllToAll>(context_);
      barrier_->run();
    });
  }

  void abort(const std::string& reason) override {
    if (failed_.empty()) failed_ = "aborted on worker " + std::to_string(rank_) + ": " + reason;
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    // A peer that tears down its connections makes Gloo fail whatever the others still have
    // pending with it (even a finished barrier's last message), so all ranks first agree,
    // through the store, that they are closing. Skipped after a failure.
    if (failed_.empty() && client_) {
      try {
        client_->set("lockstep/closing/" + std::to_string(rank_), "1");
        std::vector<std::string> keys;
        for (int r = 0; r < size_; ++r) keys.push_back("lockstep/closing/" + std::to_string(r));
        client_->wait_missing(keys, options_.timeout);
      } catch (const CollectiveError&) {
        // The store (worker 0) already closed after everyone arrived, or a peer is gone.
      }
    }
    inplace_.clear();
    staged_.clear();
    agreement_.reset();
    barrier_.reset();
    context_.reset();
    device_.reset();
    client_.reset();
    server_.reset();
  }

 private:
  struct Staged {
    std::vector<float> buffer;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };

  void check_usable(const char* op) const {
    if (closed_) {
      throw CollectiveError(std::string(op) + ": the Gloo communicator of worker " +
                            std::to_string(rank_) + " is closed");
    }
    if (!failed_.empty()) {
      throw CollectiveError(std::string(op) + ": the Gloo communicator of worker " +
                            std::to_string(rank_) + " failed earlier (" + failed_ +
                            "); reconnect to continue");
    }
  }

  static void check_count(size_t count, const char* op) {
    if (count > size_t(std::numeric_limits<int>::max())) {
      throw CollectiveError(std::string(op) + ": " + std::to_string(count) +
                            " elements exceed Gloo's limit of 2^31-1 per call; split the buffer");
    }
  }

  CollectiveImplementation pick(size_t bytes) const {
    if (implementation_ != CollectiveImplementation::kAuto) return implementation_;
    return bytes >= kLargeBytes ? CollectiveImplementation::kRing
                                : CollectiveImplementation::kHalvingDoubling;
  }

  template <typename T>
  std::unique_ptr<gloo::Algorithm> make_allreduce(T* data, size_t count) {
    std::vector<T*> ptrs{data};
    if (pick(count * sizeof(T)) == CollectiveImplementation::kHalvingDoubling) {
      return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, ptrs, int(count));
    }
    return std::make_unique<gloo::AllreduceRingChunked<T>>(context_, ptrs, int(count));
  }

  void reduce_in_place(const FloatBuffer& buffer) {
    const auto key = std::make_pair(buffer.data, buffer.count);
    auto it = inplace_.find(key);
    const std::string op = "allreduce_sum of " + std::to_string(buffer.count) + " floats";
    guarded(op, [&] {
      if (!agreement_) agreement_ = make_allreduce<float>(&agreement_flag_, 1);
      agreement_flag_ = it != inplace_.end() ? 1.0f : 0.0f;
      agreement_->run();
    });
    if (agreement_flag_ != float(size_)) {  // someone missed: every rank rebuilds
      if (it != inplace_.end()) inplace_.erase(it);
      if (inplace_.size() >= kMaxCachedAlgorithms) inplace_.clear();
      guarded(op, [&] {
        it = inplace_.emplace(key, make_allreduce<float>(buffer.data, buffer.count)).first;
      });
    }
    guarded(op, [&] { it->second->run(); });
  }

  // Runs fn; maps engine failures to PeerLostError naming the lost worker.
  template <typename Fn>
  void guarded(const std::string& op, Fn&& fn) {
    try {
      fn();
    } catch (const CollectiveError&) {
      throw;
    } catch (const std::exception& e) {
      fail(op, e);
    }
    pauses_.restart();
  }

  // When this worker itself was not running (stopped with SIGSTOP or Ctrl-Z, suspended) for a
  // good part of the timeout since its last collective, the others gave up waiting for it, and
  // what it sees on resuming (their closed connections, the store gone) would blame them: a
  // worker stopped and resumed said worker 0 was lost. Says so first; "" otherwise.
  std::string own_pause() const {
    const double paused = pauses_.longest_seconds();
    const double limit = std::chrono::duration<double>(options_.timeout).count();
    if (paused < std::max(1.0, 0.5 * limit)) return "";
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", paused);
    return "this worker (" + std::to_string(rank_) + ") was not running for " + text +
           " (stopped with SIGSTOP or Ctrl-Z, suspended, or starved of CPU) against a " +
           format_duration(options_.timeout) +
           " collective timeout, so the other workers most likely gave up waiting for it: the "
           "failure below follows from that pause, not from a fault of theirs; rerun the job "
           "(from its backup, if it keeps one) and keep every worker running; then: ";
  }

  [[noreturn]] void fail(const std::string& op, const std::exception& e) {
    const std::string engine = engine_message(e);
    const bool timed_out = is_timeout_message(engine);
    std::vector<int> lost;
    bool store_lost = false;
    if (client_) {
      try {
        // A killed peer's sockets all close at once; give the store a moment to see it.
        lost = client_->lost_ranks(timed_out ? milliseconds(0)
                                             : std::min(milliseconds(1000), options_.timeout));
      } catch (const PeerLostError&) {
        lost = {0};  // the store itself (worker 0) is gone or unreachable
        store_lost = true;
      }
    }
    lost.erase(std::remove(lost.begin(), lost.end(), rank_), lost.end());
    std::string message;
    int lost_rank = -1;
    if (!lost.empty()) {
      lost_rank = lost.front();
      message = "worker " + std::to_string(lost_rank) + " (" + addresses_[lost_rank] +
                ") was lost during " + op + " on worker " + std::to_string(rank_) +
                (store_lost ? (timed_out ? ": it stopped answering and the rendezvous store it "
                                           "hosts is unreachable (hung, crashed or partitioned)"
                                         : ": its connections closed and the rendezvous store it "
                                           "hosts is gone (the process exited or was killed)")
                            : ": its connection closed (the process exited, crashed or was "
                              "killed)");
      if (lost.size() > 1) {
        message += "; also lost:";
        for (size_t i = 1; i < lost.size(); ++i) {
          message += " worker " + std::to_string(lost[i]) + " (" + addresses_[lost[i]] + ")";
        }
      }
    } else if (size_ == 2) {
      lost_rank = 1 - rank_;
      message = "worker " + std::to_string(lost_rank) + " (" + addresses_[lost_rank] + ") " +
                (timed_out ? "did not answer within " + format_duration(options_.timeout)
                           : std::string("failed")) +
                " during " + op + " on worker " + std::to_string(rank_) +
                " (it is hung, partitioned or too slow; raise CommunicationOptions.timeout if "
                "it is only slow)";
    } else {
      message = "a peer of worker " + std::to_string(rank_) + " " +
                (timed_out ? "did not answer within " + format_duration(options_.timeout)
                           : std::string("failed")) +
                " during " + op + " and no worker's connection has closed, so one of the " +
                std::to_string(size_ - 1) + " other workers is hung or partitioned";
    }
    message = own_pause() + message + " [gloo: " + engine + "]";
    failed_ = message;
    throw PeerLostError(message, lost_rank, lost_rank >= 0 ? addresses_[lost_rank] : "");
  }

  const int rank_, size_;
  const CollectiveImplementation implementation_;
  const CommunicationOptions options_;
  const std::vector<std::string> addresses_;
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::map<std::vector<size_t>, Staged> staged_;
  std::map<std::pair<float*, size_t>, std::unique_ptr<gloo::Algorithm>> inplace_;
  std::unique_ptr<gloo::Algorithm> agreement_;
  float agreement_flag_ = 0;
  std::unique_ptr<gloo::Algorithm> barrier_;
  std::vector<bf16> bf16_send_, bf16_recv_, bf16_mine_;  // allreduce_sum_bf16 staging
  std::string failed_;
  bool closed_ = false;
  PauseWatch pauses_;  // since the last collective that succeeded
};

std::string rank_list(const std::vector<int>& ranks, const std::vector<std::string>& addresses) {
  std::string out;
  for (int r : ranks) {
    out += (out.empty() ? "" : ", ") + std::to_string(r);
    if (!addresses[r].empty()) out += " (" + addresses[r] + ")";
  }
  return out;
}

}  // namespace

// Each worker publishes the address it is reached at and reads the others' from the store; a
// worker that never arrives within the timeout is a PeerLostError naming it.
static void publish_and_collect_addresses(GlooConnection& c, int rank, int size,
                                          const std::string& own, const std::string& where,
                                          const HostPort& chief,
                                          const CommunicationOptions& options) {
  const std::string me = c.addresses[rank].empty() ? own : c.addresses[rank];
  c.client->set("lockstep/worker/" + std::to_string(rank), me);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("lockstep/worker/" + std::to_string(r));
  const auto missing_keys = c.client->wait_missing(keys, options.timeout);
  if (!missing_keys.empty()) {
    std::vector<int> missing;
    for (const auto& k : missing_keys) missing.push_back(std::stoi(k.substr(k.rfind('/') + 1)));
    throw PeerLostError(where + ": worker" + (missing.size() > 1 ? "s " : " ") +
                            rank_list(missing, c.addresses) +
                            " never arrived at the rendezvous store at " + chief.str() +
                            " within " + format_duration(options.timeout) +
                            " (not started, crashed, or started with a different cluster "
                            "definition)",
                        missing.front(), c.addresses[missing.front()]);
  }
  for (int r = 0; r < size; ++r) {
    if (c.addresses[r].empty()) c.addresses[r] = c.client->get_string(keys[r]);
  }
}

GlooConnection connect_gloo_context(const ClusterResolver& resolver,
                                    const CommunicationOptions& options) {
  ignore_sigpipe_once();
  const int rank = resolver.task_index(), size = resolver.num_workers();
  const std::string where = "connect(" + resolver.describe() + ")";
  if (resolver.chief_address().empty()) {
    throw CollectiveError(where +
                          ": no address for worker 0's rendezvous store; set "
                          "LOCKSTEP_MASTER_ADDR (and LOCKSTEP_MASTER_PORT) to worker 0's host, "
                          "or launch with TF_CONFIG");
  }
  const HostPort chief = parse_host_port(resolver.chief_address(), "address of worker 0");
  GlooConnection c;
  c.addresses.assign(size, "");
  if (!resolver.worker_addresses().empty()) c.addresses = resolver.worker_addresses();
  if (c.addresses[0].empty()) c.addresses[0] = chief.str();

  // Worker 0's store listens only where the cluster says worker 0 is (LOCKSTEP_STORE_BIND_ADDR
  // overrides it, e.g. when worker 0's name resolves to a loopback address on worker 0 itself).
  // Both ends take the job token from the environment (see store.h).
  if (rank == 0) {
    c.server = std::make_unique<StoreServer>(env::text(env::store_bind_addr).value_or(chief.host),
                                             chief.port);
  }
  c.client = std::make_unique<StoreClient>(chief.host, chief.port, options.timeout);
  c.client->register_rank(rank);

  std::string own = resolver.own_host();
  if (own.empty()) own = hostname();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = own;
    c.device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CollectiveError(where + ": worker " + std::to_string(rank) +
                          " cannot bind its Gloo transport to host '" + own +
                          "': " + engine_message(e) +
                          " (the host in this worker's address must be one of its own)");
  }
  publish_and_collect_addresses(c, rank, size, own, where, chief, options);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(options.timeout);
  GlooStore store(*c.client, "gloo/");
  try {
    context->connectFullMesh(store, c.device);
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveError(where + ": Gloo could not connect the workers' transports (" +
                          engine_message(e) +
                          "); check that every worker can reach the others' hosts: " +
                          rank_list(
                              [&] {
                                std::vector<int> all(size);
                                for (int r = 0; r < size; ++r) all[r] = r;
                                return all;
                              }(),
                              c.addresses));
  }
  c.context = context;
  // Everyone is done reading the store before anyone may close it.
  c.client->set("lockstep/connected/" + std::to_string(rank), "1");
  std::vector<std::string> done;
  for (int r = 0; r < size; ++r) done.push_back("lockstep/connected/" + std::to_string(r));
  c.client->wait(done, options.timeout);
  return c;
}

std::unique_ptr<Communicator> connect_gloo(const ClusterResolver& resolver,
                                           const CommunicationOptions& options) {
  if (options.implementation == CollectiveImplementation::kMpi) {
    throw CollectiveError("connect_gloo: implementation 'mpi' is not a Gloo algorithm");
  }
  GlooConnection c = connect_gloo_context(resolver, options);
  return std::make_unique<GlooCommunicator>(resolver.task_index(), resolver.num_workers(),
                                            options.implementation, options, std::move(c.addresses),
                                            std::move(c.server), std::move(c.client),
                                            std::move(c.device), std::move(c.context));
}

}  // namespace lockstep::distribute::detail
