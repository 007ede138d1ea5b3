// Collectives: the all-reduce / broadcast / all-gather / barrier layer under the distribution
// strategies. One interface (Communicator) with three backends:
//   - in-process: replicas that are threads of one process (MirroredStrategy on one host);
//   - Gloo over TCP: worker processes on one or many hosts (MultiWorkerMirroredStrategy),
//     rendezvous through a small key-value store hosted by worker 0 (see store.h);
//   - OpenMPI: processes launched by mpirun / srun.
//
// Rules every backend follows:
//   - Every rank calls the same collectives in the same order with the same sizes (collectives
//     are matched by call order, like MPI). Calls block until the result is in place.
//   - One Communicator is used by one thread at a time. Wrap it in AsyncCollectives to run
//     collectives on a background thread (overlap with backward).
//   - A peer that dies or hangs makes the call throw PeerLostError within
//     CommunicationOptions::timeout (Gloo, in-process). OpenMPI has no such recovery: a dead
//     peer aborts the job (mpirun kills every rank), a partition hangs.
//   - Sums are deterministic for a given backend, size and rank count: the same inputs give
//     bitwise the same outputs on every rank and on every run.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster.h"

namespace lockstep::distribute {

/// Which engine / algorithm carries the collectives.
///   kAuto: in-process for make_in_process_communicators; for connect(): MPI when the process
///          was launched by mpirun/srun with an MPI environment and Lockstep was built with MPI,
///          otherwise Gloo with ring-chunked all-reduce for large buffers and halving-doubling for
///          small ones (< 256 KiB), chosen per call.
///   kRing / kHalvingDoubling: Gloo's AllreduceRingChunked / AllreduceHalvingDoubling always.
///   kMpi: OpenMPI (MPI_Allreduce ...); connect() fails if Lockstep was built without MPI.
enum class CollectiveImplementation { kAuto, kRing, kHalvingDoubling, kMpi };

/// "auto", "ring", "halving_doubling", "mpi" (the names parse_collective_implementation accepts).
const char* to_string(CollectiveImplementation implementation);
/// The implementation named `name` (as to_string writes it); throws CollectiveError otherwise.
CollectiveImplementation parse_collective_implementation(const std::string& name);

/// How workers communicate: the timeout of every collective and the engine.
struct CommunicationOptions {
  /// How long any single collective (and connect()) may wait for peers before throwing.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  CollectiveImplementation implementation = CollectiveImplementation::kAuto;  ///< the engine
};

/// Any failure of the collective layer (bad arguments, aborted communicator, engine error).
class CollectiveError : public Error {
 public:
  explicit CollectiveError(const std::string& what) : Error(what) {}  ///< with message `what`
};

/// A peer died, hung past the timeout, or never arrived. rank() is the lost worker's rank
/// (-1 when it cannot be told which peer), address() its "host:port" (or "thread" for
/// in-process replicas); what() names both.
class PeerLostError : public CollectiveError {
 public:
  /// The error `what` about worker `rank` at `address`.
  PeerLostError(const std::string& what, int rank, std::string address)
      : CollectiveError(what), rank_(rank), address_(std::move(address)) {}
  int rank() const { return rank_; }                       ///< the lost worker (-1: unknown)
  const std::string& address() const { return address_; }  ///< its "host:port", or "thread"

 private:
  int rank_;
  std::string address_;
};

/// One float buffer of a bucket: `count` floats at `data`, reduced in place.
struct FloatBuffer {
  float* data = nullptr;  ///< the first float
  size_t count = 0;       ///< how many
};

/// One rank's end of a group of workers or replicas: the collectives (all-reduce, broadcast,
/// all-gather, barrier). Every rank must call the same collectives in the same order.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  ///< this rank, 0..size()-1
  virtual int size() const = 0;  ///< the number of ranks
  /// "in_process", "gloo_ring", "gloo_halving_doubling", "gloo_auto", "mpi".
  virtual std::string backend() const = 0;

  /// data[i] = sum over ranks of data[i], in place, on every rank.
  virtual void allreduce_sum(float* data, size_t count) = 0;
  virtual void allreduce_sum(double* data, size_t count) = 0;  ///< the same for doubles
  /// A bucket: every buffer is summed in place, in one collective call (buffers may have
  /// different sizes; every rank passes the same count of buffers with the same sizes).
  /// Backends cache the engine's per-buffer state keyed by (pointers, sizes), so calling again
  /// with the same buffers every training step is the fast path.
  virtual void allreduce_sum(std::span<const FloatBuffer> bucket) = 0;
  /// Compressed gradient all-reduce (StrategyOptions::all_reduce_dtype = bf16): like the bucket
  /// allreduce_sum, but every rank's values travel as bfloat16 (half the bytes of float32) and
  /// are added in float32. On every rank, data[i] becomes
  ///   bf16( f32(bf16(data_0[i])) + f32(bf16(data_1[i])) + ... + f32(bf16(data_{n-1}[i])) )
  /// (added in rank order, in f32; each contribution and the result rounded to bf16 once), so
  /// results are bitwise identical on every rank and backend. Algorithm: a reduce-scatter by
  /// all-to-all (rank j receives every rank's bf16 slice j and sums it in f32) followed by an
  /// all-gather of the bf16 sums: 2 (n-1)/n x 2 bytes per float per rank, half of a float32 ring.
  /// Gloo: gloo::alltoall + gloo::allgather; MPI: MPI_Alltoall + MPI_Allgather. In-process:
  /// this base version (all-gathers the whole bf16 buffers, then every rank sums), correct for
  /// any backend; replicas share memory, so it only reproduces the arithmetic and saves nothing
  /// (strategies keep the in-process sum of local replicas in f32).
  virtual void allreduce_sum_bf16(std::span<const FloatBuffer> bucket);

  /// Copies root's data into every other rank's data.
  virtual void broadcast(float* data, size_t count, int root) = 0;
  virtual void broadcast_bytes(void* data, size_t bytes, int root) = 0;  ///< the same for bytes
  /// Every rank contributes `bytes` bytes (sizes may differ between ranks); returns all
  /// contributions indexed by rank, identical on every rank.
  virtual std::vector<std::vector<char>> allgather_bytes(const void* data, size_t bytes) = 0;
  virtual void barrier() = 0;  ///< returns when every rank has reached it

  /// Marks the communicator failed: later calls (on this rank; in-process: on every replica,
  /// including ones blocked in a collective) throw CollectiveError naming `reason`. Use it when
  /// a replica fails so the others stop instead of waiting for it.
  virtual void abort(const std::string& reason) = 0;
  /// Releases connections. Idempotent; the destructor calls it. Later calls throw.
  virtual void close() = 0;

  /// Convenience: all-reduce then divide by size().
  void allreduce_mean(float* data, size_t count);
};

/// N communicators of one in-process group (ranks 0..n-1), one per replica thread. Each must be
/// driven by its own thread. Sums add the replicas' values in rank order 0,1,..,n-1 whatever
/// the thread timing, so results are bitwise reproducible and identical on all replicas.
/// A replica that does not reach a collective within options.timeout makes the others throw
/// PeerLostError naming it.
std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(
    int n, const CommunicationOptions& options = {});

/// Connects this process to the other workers of `resolver`'s cluster and returns its
/// communicator (rank = resolver.task_index()). Validates the cluster first (addresses,
/// duplicates, index range) and fails with a PeerLostError / CollectiveError naming the missing
/// workers and the store address if the cluster is not complete within options.timeout.
/// A one-worker cluster gives a trivial communicator (no engine, no sockets).
std::unique_ptr<Communicator> connect(const ClusterResolver& resolver,
                                      const CommunicationOptions& options = {});

/// Runs collectives on one background thread, in submission order, so that a caller can
/// start reducing a bucket and go on computing (all-reduce overlapping backward). Every rank
/// must submit the same sequence. The Communicator must outlive this object and must not be
/// used directly while it has pending work.
class AsyncCollectives {
 public:
  /// Starts the thread that drives `communicator`.
  explicit AsyncCollectives(Communicator& communicator);
  ~AsyncCollectives();  ///< waits for queued work, joins
  AsyncCollectives(const AsyncCollectives&) = delete;
  AsyncCollectives& operator=(const AsyncCollectives&) = delete;

  /// The future rethrows the collective's error. Buffers must stay valid until it is ready.
  std::future<void> allreduce_sum(std::vector<FloatBuffer> bucket);
  /// Queues any work on the communicator; the future rethrows its error.
  std::future<void> submit(std::function<void(Communicator&)> work);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace lockstep::distribute
