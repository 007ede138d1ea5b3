// A small rendezvous key-value store over TCP (like PyTorch's TCPStore): worker 0 hosts a
// StoreServer, every worker (worker 0 included) talks to it through a StoreClient. Used to
// exchange transport addresses before the collective engine connects, and to learn which
// worker's connection dropped when a collective fails.
//
// Safe to expose on a shared network:
//   - The server listens only on the address it is given (worker 0's host from TF_CONFIG /
//     Slurm / MPI), never on every interface unless told "0.0.0.0".
//   - Every connection proves it belongs to the job: it presents the job token, compared in
//     constant time; a connection that does not (or sends anything else first) is closed.
//     The token comes from LOCKSTEP_JOB_TOKEN, or from the file LOCKSTEP_JOB_SECRET_FILE names
//     (a file on a shared filesystem every worker can read; its content, trailing whitespace
//     removed, is the token). Generate one with e.g. `openssl rand -hex 32`.
//     A job without a token may only use a loopback address (127.0.0.0/8, ::1, localhost);
//     anywhere else it is refused with a message saying what to set, unless
//     LOCKSTEP_ALLOW_UNAUTHENTICATED=1 opts out (a trusted, isolated network).
//     The token travels in clear text: it keeps strangers who can reach the port out, not an
//     eavesdropper on the path (Gloo's own transport is not authenticated either).
//   - Every length is capped (kStoreMaxKeyBytes, kStoreMaxValueBytes, kStoreMaxWaitKeys) and
//     memory is allocated as bytes arrive, never from a claimed length; a request that breaks
//     the protocol closes that connection and nothing else.
//   - Connections are closed as soon as their client leaves; their number is bounded
//     (StoreServerOptions::max_connections, more are closed at once); a connection must present
//     its token (without a token: complete a first request) within handshake_timeout; when
//     the store is full, connections that have not yet done so are cut first, oldest first, and
//     one peer address holds at most max_strangers_per_peer of them, so idle connections, with
//     a token or without, cannot keep a worker out; accept() backs off when the process is out
//     of file descriptors (EMFILE/ENFILE) instead of spinning, and resumes when they free up.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/distribute/cluster.h"

namespace lockstep::distribute {

constexpr size_t kStoreMaxKeyBytes = 4096;                ///< the longest key
constexpr size_t kStoreMaxValueBytes = size_t(16) << 20;  ///< 16 MiB
constexpr size_t kStoreMaxWaitKeys = 65536;               ///< keys in one wait()
constexpr size_t kStoreMaxTokenBytes = 4096;              ///< the longest job token

/// The job token for a store listening on (or a client connecting to) `host`, from `env`:
/// LOCKSTEP_JOB_TOKEN, else the content of the file LOCKSTEP_JOB_SECRET_FILE names (trailing
/// whitespace removed); "" when neither is set. Throws CollectiveError when the token cannot be
/// read, or when there is none, `host` is not a loopback address and
/// LOCKSTEP_ALLOW_UNAUTHENTICATED is not 1.
std::string job_token_from_environment(const std::string& host, const Environment& env);
std::string job_token_from_environment(const std::string& host);  ///< the process's environment

/// True when every address `host` resolves to is a loopback address.
bool is_loopback_host(const std::string& host);

/// A StoreServer's options.
struct StoreServerOptions {
  std::string token;           ///< "" = no token required (loopback or opted-out jobs)
  int max_connections = 1024;  ///< connections served at once; more wait
  /// Connections one peer address may hold before they show they belong to the job (the
  /// token, or without one a first complete request); past it that peer's oldest is cut.
  int max_strangers_per_peer = 64;
  /// To present the token, or without a token to complete a first request.
  std::chrono::milliseconds handshake_timeout{5000};
};

/// Listens on host:port (port 0 = pick a free one; see port()). Serves clients on background
/// threads until destroyed. Keeps track of which registered ranks' connections closed without
/// saying goodbye (lost_ranks), so survivors can name a dead worker.
class StoreServer {
 public:
  /// The token from job_token_from_environment(host).
  StoreServer(const std::string& host, int port);
  /// With explicit options (the token among them).
  StoreServer(const std::string& host, int port, StoreServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;             ///< the port it listens on (the one picked for port 0)
  std::string address() const;  ///< "host:port"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One connection to a StoreServer. Not thread-safe: one thread at a time. Every call fails
/// with a PeerLostError (rank 0, the store address) when the server is unreachable or stops
/// answering within the timeout.
class StoreClient {
 public:
  /// Retries connecting until `timeout`; throws PeerLostError naming the address otherwise, and
  /// CollectiveError at once when the server refuses the token. The token comes from
  /// job_token_from_environment(host) unless given.
  ///@{
  StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout);
  StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout,
              std::string token);
  ///@}
  ~StoreClient();  ///< says goodbye (so the server does not count this rank as lost)
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  std::string address() const;                ///< the server's "host:port"
  std::chrono::milliseconds timeout() const;  ///< every call's limit

  /// Keys longer than kStoreMaxKeyBytes and values longer than kStoreMaxValueBytes throw
  /// CollectiveError before anything is sent.
  ///@{
  void set(const std::string& key, const std::vector<char>& value);
  void set(const std::string& key, const std::string& value);
  ///@}
  /// Waits up to the timeout for the key; throws CollectiveError naming it otherwise.
  ///@{
  std::vector<char> get(const std::string& key);
  std::string get_string(const std::string& key);
  ///@}
  /// Atomically adds delta to the integer stored at key (0 when absent); returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::string& key);  ///< present now?
  /// Waits until every key exists. Throws CollectiveError listing the missing keys.
  ///@{
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  ///@}
  /// Waits like wait() but returns the keys still missing instead of throwing.
  std::vector<std::string> wait_missing(const std::vector<std::string>& keys,
                                        std::chrono::milliseconds timeout);

  /// Tells the server this connection belongs to `rank` (for lost-rank tracking).
  void register_rank(int rank);
  /// Ranks whose registered connection closed without goodbye. Waits up to `wait` for at least
  /// one to be known (a dying peer's socket closes a moment after the collective fails).
  std::vector<int> lost_ranks(std::chrono::milliseconds wait);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::distribute
