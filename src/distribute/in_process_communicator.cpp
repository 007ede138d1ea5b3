// In-process collectives: replicas that are threads of one process. Each collective is two
// barriers: every replica posts its buffers, then replica r sums slice r of every buffer over
// the replicas in rank order (0, 1, ..., n-1) and writes the sum into every replica's buffer,
// then all wait for the writes. No scratch memory, no copies, and the order of additions never
// depends on thread timing, so results are bitwise reproducible and identical on all replicas.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "distribute/backends.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {
namespace {

enum class Op { kSumFloat, kSumDouble, kBroadcast, kAllgather, kBarrier };

const char* op_name(Op op) {
  switch (op) {
    case Op::kSumFloat:
      return "allreduce_sum(float)";
    case Op::kSumDouble:
      return "allreduce_sum(double)";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kAllgather:
      return "allgather_bytes";
    case Op::kBarrier:
      return "barrier";
  }
  return "?";
}

// What one replica contributes to the current collective.
struct Post {
  Op op = Op::kBarrier;
  std::vector<FloatBuffer> floats;  // kSumFloat
  double* doubles = nullptr;        // kSumDouble
  void* bytes = nullptr;            // kBroadcast, kAllgather (input)
  size_t count = 0;                 // elements (kSumDouble) or bytes
  int root = 0;
};

class Group {
 public:
  Group(int n, CommunicationOptions options) : n_(n), options_(options), posts_(n), reached_(n) {}

  int size() const { return n_; }

  // Waits until all n replicas reached this barrier. Throws PeerLostError naming the replicas
  // that did not arrive within the timeout (and fails the group so they throw too).
  void barrier(int rank, const char* what) {
    std::unique_lock lock(mu_);
    throw_if_aborted(rank);
    const uint64_t generation = generation_;
    reached_[rank] = generation + 1;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const bool done =
        cv_.wait_for(lock, options_.timeout, [&] { return generation_ != generation || aborted_; });
    if (done && generation_ != generation) return;
    if (aborted_) throw_if_aborted(rank);
    // Timed out: the replicas that have not reached this barrier are lost.
    std::vector<int> missing;
    for (int r = 0; r < n_; ++r) {
      if (reached_[r] != generation + 1) missing.push_back(r);
    }
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    const std::string message =
        "in-process " + std::string(what) + ": replica " + std::to_string(rank) + " waited " +
        detail::format_duration(options_.timeout) + " for replica" +
        (missing.size() > 1 ? "s " : " ") + list + " (thread) which never arrived (lost replica " +
        std::to_string(missing.front()) +
        "; it is hung, crashed or stopped calling collectives; raise "
        "CommunicationOptions.timeout if it is only slow)";
    aborted_ = true;
    abort_reason_ = message;
    cv_.notify_all();
    throw PeerLostError(message, missing.front(), "thread");
  }

  void abort(int rank, const std::string& reason) {
    std::lock_guard lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ =
        "in-process collectives aborted by replica " + std::to_string(rank) + ": " + reason;
    cv_.notify_all();
  }

  void check_aborted() {
    std::lock_guard lock(mu_);
    if (aborted_) throw CollectiveError(abort_reason_);
  }

  Post& post(int rank) { return posts_[rank]; }
  const Post& post(int rank) const { return posts_[rank]; }
  const CommunicationOptions& options() const { return options_; }

 private:
  void throw_if_aborted(int rank) {
    if (aborted_) throw CollectiveError(abort_reason_);
  }

  const int n_;
  const CommunicationOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<Post> posts_;
  std::vector<uint64_t> reached_;
};

// Slice [begin, end) of `count` elements that replica `rank` of `n` reduces; 64-byte aligned
// slices so replicas do not write the same cache line.
template <typename T>
std::pair<size_t, size_t> slice_of(size_t count, int rank, int n) {
  constexpr size_t kAlign = 64 / sizeof(T);
  size_t chunk = (count + n - 1) / n;
  chunk = (chunk + kAlign - 1) / kAlign * kAlign;
  const size_t begin = std::min(count, chunk * rank);
  const size_t end = std::min(count, begin + chunk);
  return {begin, end};
}

// Sums element range [begin, end) of sources[0..n) in rank order and writes it to all.
template <typename T>
void reduce_range(const std::vector<T*>& buffers, size_t begin, size_t end) {
  constexpr size_t kBlock = 1024;  // keep the partial sums in L1
  T sum[kBlock];
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t len = std::min(kBlock, end - b);
    const T* first = buffers[0] + b;
    for (size_t i = 0; i < len; ++i) sum[i] = first[i];
    for (size_t r = 1; r < buffers.size(); ++r) {
      const T* src = buffers[r] + b;
      for (size_t i = 0; i < len; ++i) sum[i] += src[i];
    }
    for (T* dst : buffers) std::memcpy(dst + b, sum, len * sizeof(T));
  }
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  ~InProcessCommunicator() override { close(); }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string backend() const override { return "in_process"; }

  void allreduce_sum(float* data, size_t count) override {
    FloatBuffer buffer{data, count};
    allreduce_sum(std::span<const FloatBuffer>(&buffer, 1));
  }

  void allreduce_sum(std::span<const FloatBuffer> bucket) override {
    check_open();
    for (const auto& b : bucket) {
      if (b.data == nullptr && b.count > 0) {
        throw CollectiveError("allreduce_sum: null buffer with " + std::to_string(b.count) +
                              " floats on replica " + std::to_string(rank_));
      }
    }
    if (size() == 1) return;
    Post& mine = group_->post(rank_);
    mine = Post{};
    mine.op = Op::kSumFloat;
    mine.floats.assign(bucket.begin(), bucket.end());
    group_->barrier(rank_, op_name(Op::kSumFloat));
    check_matching();
    std::vector<float*> buffers(size());
    for (size_t j = 0; j < bucket.size(); ++j) {
      const auto [begin, end] = slice_of<float>(bucket[j].count, rank_, size());
      if (begin == end) continue;
      for (int r = 0; r < size(); ++r) buffers[r] = group_->post(r).floats[j].data;
      reduce_range(buffers, begin, end);
    }
    group_->barrier(rank_, op_name(Op::kSumFloat));
  }

  void allreduce_sum(double* data, size_t count) override {
    check_open();
    if (size() == 1) return;
    Post& mine = group_->post(rank_);
    mine = Post{};
    mine.op = Op::kSumDouble;
    mine.doubles = data;
    mine.count = count;
    group_->barrier(rank_, op_name(Op::kSumDouble));
    check_matching();
    const auto [begin, end] = slice_of<double>(count, rank_, size());
    if (begin < end) {
      std::vector<double*> buffers(size());
      for (int r = 0; r < size(); ++r) buffers[r] = group_->post(r).doubles;
      reduce_range(buffers, begin, end);
    }
    group_->barrier(rank_, op_name(Op::kSumDouble));
  }

  void broadcast(float* data, size_t count, int root) override {
    broadcast_bytes(data, count * sizeof(float), root);
  }

  void broadcast_bytes(void* data, size_t bytes, int root) override {
    check_open();
    check_root(root);
    if (size() == 1) return;
    Post& mine = group_->post(rank_);
    mine = Post{};
    mine.op = Op::kBroadcast;
    mine.bytes = data;
    mine.count = bytes;
    mine.root = root;
    group_->barrier(rank_, op_name(Op::kBroadcast));
    check_matching();
    if (rank_ != root && bytes > 0) std::memcpy(data, group_->post(root).bytes, bytes);
    group_->barrier(rank_, op_name(Op::kBroadcast));
  }

  std::vector<std::vector<char>> allgather_bytes(const void* data, size_t bytes) override {
    check_open();
    const char* p = static_cast<const char*>(data);
    if (size() == 1) return {std::vector<char>(p, p + bytes)};
    Post& mine = group_->post(rank_);
    mine = Post{};
    mine.op = Op::kAllgather;
    mine.bytes = const_cast<void*>(data);
    mine.count = bytes;
    group_->barrier(rank_, op_name(Op::kAllgather));
    check_matching();
    std::vector<std::vector<char>> out(size());
    for (int r = 0; r < size(); ++r) {
      const Post& post = group_->post(r);
      const char* src = static_cast<const char*>(post.bytes);
      out[r].assign(src, src + post.count);
    }
    group_->barrier(rank_, op_name(Op::kAllgather));
    return out;
  }

  void barrier() override {
    check_open();
    if (size() == 1) return;
    group_->barrier(rank_, op_name(Op::kBarrier));
  }

  void abort(const std::string& reason) override { group_->abort(rank_, reason); }

  void close() override { closed_ = true; }

 private:
  void check_open() const {
    if (closed_) {
      throw CollectiveError("in-process communicator of replica " + std::to_string(rank_) +
                            " is closed");
    }
    group_->check_aborted();
  }

  void check_root(int root) const {
    if (root < 0 || root >= size()) {
      throw CollectiveError("broadcast: root " + std::to_string(root) + " is not a replica (0.." +
                            std::to_string(size() - 1) + ")");
    }
  }

  // Every replica must have posted the same collective with the same sizes. Each replica
  // compares all posts with replica 0's, so every replica reaches the same verdict.
  void check_matching() const {
    const Post& ref = group_->post(0);
    for (int r = 1; r < size(); ++r) {
      const Post& p = group_->post(r);
      std::string problem;
      if (p.op != ref.op) {
        problem = std::string("replica 0 called ") + op_name(ref.op) + ", replica " +
                  std::to_string(r) + " called " + op_name(p.op);
      } else if (p.op == Op::kSumFloat) {
        if (p.floats.size() != ref.floats.size()) {
          problem = "replica 0 passed " + std::to_string(ref.floats.size()) + " buffers, replica " +
                    std::to_string(r) + " passed " + std::to_string(p.floats.size());
        } else {
          for (size_t j = 0; j < p.floats.size() && problem.empty(); ++j) {
            if (p.floats[j].count != ref.floats[j].count) {
              problem = "buffer " + std::to_string(j) + " has " +
                        std::to_string(ref.floats[j].count) + " floats on replica 0 but " +
                        std::to_string(p.floats[j].count) + " on replica " + std::to_string(r);
            }
          }
        }
      } else if ((p.op == Op::kSumDouble || p.op == Op::kBroadcast) && p.count != ref.count) {
        problem = "size " + std::to_string(ref.count) + " on replica 0 but " +
                  std::to_string(p.count) + " on replica " + std::to_string(r);
      } else if (p.op == Op::kBroadcast && p.root != ref.root) {
        problem = "root " + std::to_string(ref.root) + " on replica 0 but " +
                  std::to_string(p.root) + " on replica " + std::to_string(r);
      }
      if (!problem.empty()) {
        throw CollectiveError("in-process collectives out of step: " + problem +
                              " (every replica must call the same collectives in the same "
                              "order with the same sizes)");
      }
    }
  }

  std::shared_ptr<Group> group_;
  const int rank_;
  bool closed_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(
    int n, const CommunicationOptions& options) {
  if (n < 1) {
    throw CollectiveError("make_in_process_communicators: need at least 1 replica, got " +
                          std::to_string(n));
  }
  if (options.timeout.count() <= 0) {
    throw CollectiveError("CommunicationOptions.timeout must be positive (got " +
                          std::to_string(options.timeout.count()) + " ms)");
  }
  auto group = std::make_shared<Group>(n, options);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return out;
}

}  // namespace lockstep::distribute
