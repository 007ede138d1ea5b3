// OpenMPI backend: processes launched by mpirun / srun. MPI_Allreduce & co. on a duplicate of
// MPI_COMM_WORLD with MPI_ERRORS_RETURN, so engine errors become CollectiveError. OpenMPI
// cannot survive a lost peer: mpirun aborts the whole job when a rank dies. A hung peer (alive
// but stuck) would block every other rank in the collective forever, so a watchdog thread
// bounds each collective by CommunicationOptions.timeout: past it, this rank prints which
// collective timed out and exits (status 3), and mpirun then ends the whole job. (MPI cannot
// tell which peer is missing, and a blocked MPI call cannot be cancelled: exiting is the only
// way out that never hangs.) The C API only (no deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "distribute/backends.h"
#include "distribute/bf16_reduce.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute::detail {
namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, len);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

// Initialises MPI once per process (if the program did not) and finalises it at exit.
void ensure_mpi_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    // The collectives run on a communication thread that shares the cores with the compute
    // threads (AsyncCollectives overlaps them with backward). Open MPI's progress loop
    // busy-polls while it waits for a peer, taking the core from the compute thread whenever
    // a worker has as many busy threads as cores (2 workers x 1 thread on 2 cores: 2 workers
    // went 0.82 -> 0.88 of 1 worker x 2 threads). mpi_yield_when_idle makes it yield between
    // polls. The job's own setting (mpirun --mca, or the variable) wins.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      throw CollectiveError("MPI_Init_thread failed: " + mpi_error_text(rc) +
                            " (was this process started by mpirun / srun?)");
    }
    std::atexit(finalize_at_exit);
  });
}

namespace {

// Bounds each collective by a timeout (0 = none): arm() before the MPI call, disarm() after.
// Sleeps on a condition variable (no polling), so it costs nothing while collectives finish.
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds timeout, int rank, int size)
      : timeout_(timeout),
        rank_(rank),
        peer_(size == 2 ? "worker " + std::to_string(1 - rank) + " (the only peer)"
                        : "a peer (MPI cannot tell which)") {
    if (timeout_.count() > 0) thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void arm(const std::string& op) {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      op_ = op;
      deadline_ = std::chrono::steady_clock::now() + timeout_;
      armed_ = ++sequence_;
    }
    cv_.notify_all();
  }
  void disarm() {
    if (!thread_.joinable()) return;
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = 0;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (armed_ == 0) {
        cv_.wait(lock, [&] { return stop_ || armed_ != 0; });
        continue;
      }
      const uint64_t watching = armed_;
      if (cv_.wait_until(lock, deadline_, [&] { return stop_ || armed_ != watching; })) continue;
      std::fprintf(stderr,
                   "\nlockstep: MPI %s on worker %d did not complete within %.1f s "
                   "(CommunicationOptions.timeout): %s is hung or lost, and OpenMPI cannot "
                   "cancel the call; exiting so that mpirun ends the job\n",
                   op_.c_str(), rank_, double(timeout_.count()) / 1000.0, peer_.c_str());
      std::fflush(stderr);
      std::_Exit(3);
    }
  }

  const std::chrono::milliseconds timeout_;
  const int rank_;
  const std::string peer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string op_;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t sequence_ = 0, armed_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout)
      : comm_(comm), rank_(rank), size_(size), watchdog_(timeout, rank, size) {}
  ~MpiCommunicator() override { close(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void allreduce_sum(float* data, size_t count) override {
    usable("allreduce_sum");
    reduce(data, count, MPI_FLOAT, "allreduce_sum of " + std::to_string(count) + " floats");
  }

  void allreduce_sum(double* data, size_t count) override {
    usable("allreduce_sum");
    reduce(data, count, MPI_DOUBLE, "allreduce_sum of " + std::to_string(count) + " doubles");
  }

  void allreduce_sum(std::span<const FloatBuffer> bucket) override {
    usable("allreduce_sum");
    if (bucket.size() == 1) {
      reduce(bucket[0].data, bucket[0].count, MPI_FLOAT,
             "allreduce_sum of " + std::to_string(bucket[0].count) + " floats");
      return;
    }
    size_t total = 0;
    for (const auto& b : bucket) total += b.count;
    staging_.resize(total);
    size_t offset = 0;
    for (const auto& b : bucket) {
      if (b.count) std::memcpy(staging_.data() + offset, b.data, b.count * sizeof(float));
      offset += b.count;
    }
    reduce(staging_.data(), total, MPI_FLOAT,
           "allreduce_sum of a bucket of " + std::to_string(total) + " floats");
    offset = 0;
    for (const auto& b : bucket) {
      if (b.count) std::memcpy(b.data, staging_.data() + offset, b.count * sizeof(float));
      offset += b.count;
    }
  }

  // bf16 on the wire, f32 sums (see collective.h): MPI_Alltoall hands rank j every rank's bf16
  // slice j (as 16-bit integers: MPI has no bf16 type, and its reductions would not add in
  // f32), rank j adds them in f32 in rank order, MPI_Allgather returns the bf16 sums.
  void allreduce_sum_bf16(std::span<const FloatBuffer> bucket) override {
    usable("allreduce_sum_bf16");
    const size_t total = bucket_floats(bucket, rank_, "allreduce_sum_bf16");
    if (total == 0) return;
    const size_t n = size_t(size_), chunk = (total + n - 1) / n;
    check_int(n * chunk, "allreduce_sum_bf16");
    bf16_send_.resize(n * chunk);
    bf16_recv_.resize(n * chunk);
    bf16_mine_.resize(chunk);
    pack_bf16(bucket, bf16_send_.data(), n * chunk);
    const std::string op = "allreduce_sum_bf16 of " + std::to_string(total) + " floats";
    check(
        [&] {
          return MPI_Alltoall(bf16_send_.data(), int(chunk), MPI_UINT16_T, bf16_recv_.data(),
                              int(chunk), MPI_UINT16_T, comm_);
        },
        op + " (all-to-all)");
    sum_bf16_slices(bf16_recv_.data(), size_, chunk, bf16_mine_.data());
    check(
        [&] {
          return MPI_Allgather(bf16_mine_.data(), int(chunk), MPI_UINT16_T, bf16_send_.data(),
                               int(chunk), MPI_UINT16_T, comm_);
        },
        op + " (all-gather)");
    unpack_bf16(bf16_send_.data(), bucket);
  }

  void broadcast(float* data, size_t count, int root) override {
    broadcast_bytes(data, count * sizeof(float), root);
  }

  void broadcast_bytes(void* data, size_t bytes, int root) override {
    usable("broadcast");
    if (root < 0 || root >= size_) {
      throw CollectiveError("broadcast: root " + std::to_string(root) + " is not a worker (0.." +
                            std::to_string(size_ - 1) + ")");
    }
    check_int(bytes, "broadcast");
    check([&] { return MPI_Bcast(data, int(bytes), MPI_BYTE, root, comm_); }, "broadcast");
  }

  std::vector<std::vector<char>> allgather_bytes(const void* data, size_t bytes) override {
    usable("allgather_bytes");
    check_int(bytes, "allgather_bytes");
    std::vector<int> sizes(size_);
    const int mine = int(bytes);
    check([&] { return MPI_Allgather(&mine, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm_); },
          "allgather_bytes");
    std::vector<int> offsets(size_);
    size_t total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[r] = int(total);
      total += size_t(sizes[r]);
    }
    check_int(total, "allgather_bytes");
    std::vector<char> all(total);
    check(
        [&] {
          return MPI_Allgatherv(data, mine, MPI_BYTE, all.data(), sizes.data(), offsets.data(),
                                MPI_BYTE, comm_);
        },
        "allgather_bytes");
    std::vector<std::vector<char>> out(size_);
    for (int r = 0; r < size_; ++r) {
      out[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + sizes[r]);
    }
    return out;
  }

  void barrier() override {
    usable("barrier");
    check([&] { return MPI_Barrier(comm_); }, "barrier");
  }

  void abort(const std::string& reason) override {
    if (failed_.empty()) failed_ = "aborted on worker " + std::to_string(rank_) + ": " + reason;
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

 private:
  void usable(const char* op) const {
    if (closed_) throw CollectiveError(std::string(op) + ": the MPI communicator is closed");
    if (!failed_.empty()) {
      throw CollectiveError(std::string(op) + ": the MPI communicator failed earlier (" + failed_ +
                            ")");
    }
  }

  static void check_int(size_t count, const char* op) {
    if (count > size_t(std::numeric_limits<int>::max())) {
      throw CollectiveError(std::string(op) + ": " + std::to_string(count) +
                            " elements exceed MPI's int count; split the buffer");
    }
  }

  void reduce(void* data, size_t count, MPI_Datatype type, const std::string& op) {
    if (count == 0) return;
    check_int(count, "allreduce_sum");
    check([&] { return MPI_Allreduce(MPI_IN_PLACE, data, int(count), type, MPI_SUM, comm_); }, op);
  }

  // Runs one MPI call under the watchdog; an error return becomes a CollectiveError.
  template <typename Call>
  void check(Call&& call, const std::string& op) {
    watchdog_.arm(op);
    const int rc = call();
    watchdog_.disarm();
    if (rc == MPI_SUCCESS) return;
    failed_ = "MPI error during " + op + " on worker " + std::to_string(rank_) + ": " +
              mpi_error_text(rc);
    throw CollectiveError(failed_);
  }

  MPI_Comm comm_;
  const int rank_, size_;
  std::vector<float> staging_;
  std::vector<bf16> bf16_send_, bf16_recv_, bf16_mine_;  // allreduce_sum_bf16 staging
  std::string failed_;
  bool closed_ = false;
  Watchdog watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> connect_mpi(const ClusterResolver& resolver,
                                          const CommunicationOptions& options) {
  ensure_mpi_initialized();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (resolver.kind() != ClusterResolver::Kind::kLocal &&
      (rank != resolver.task_index() || size != resolver.num_workers())) {
    throw CollectiveError("connect(" + resolver.describe() + "): MPI says this is rank " +
                          std::to_string(rank) + " of " + std::to_string(size) +
                          "; the cluster definition disagrees (launch with mpirun -np " +
                          std::to_string(resolver.num_workers()) +
                          " and no conflicting TF_CONFIG)");
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::make_unique<MpiCommunicator>(comm, rank, size, options.timeout);
}

}  // namespace lockstep::distribute::detail
