// A small rendezvous key-value store over TCP (like PyTorch's TCPStore): worker 0 hosts a
// StoreServer, every worker (worker 0 included) talks to it through a StoreClient. Used to
// exchange transport addresses before the collective engine connects, and to learn which
// worker's connection dropped when a collective fails.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::distribute {

// Listens on host:port (port 0 = pick a free one; see port()). Serves clients on background
// threads until destroyed. Keeps track of which registered ranks' connections closed without
// saying goodbye (lost_ranks), so survivors can name a dead worker.
class StoreServer {
 public:
  StoreServer(const std::string& host, int port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  std::string address() const;  // "host:port"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One connection to a StoreServer. Not thread-safe: one thread at a time. Every call fails
// with a PeerLostError (rank 0, the store address) when the server is unreachable or stops
// answering within the timeout.
class StoreClient {
 public:
  // Retries connecting until `timeout`; throws PeerLostError naming the address otherwise.
  StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~StoreClient();  // says goodbye (so the server does not count this rank as lost)
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  std::string address() const;  // the server's "host:port"
  std::chrono::milliseconds timeout() const;

  void set(const std::string& key, const std::vector<char>& value);
  void set(const std::string& key, const std::string& value);
  // Waits up to the timeout for the key; throws CollectiveError naming it otherwise.
  std::vector<char> get(const std::string& key);
  std::string get_string(const std::string& key);
  // Atomically adds delta to the integer stored at key (0 when absent); returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::string& key);  // present now?
  // Waits until every key exists. Throws CollectiveError listing the missing keys.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Waits like wait() but returns the keys still missing instead of throwing.
  std::vector<std::string> wait_missing(const std::vector<std::string>& keys,
                                        std::chrono::milliseconds timeout);

  // Tells the server this connection belongs to `rank` (for lost-rank tracking).
  void register_rank(int rank);
  // Ranks whose registered connection closed without goodbye. Waits up to `wait` for at least
  // one to be known (a dying peer's socket closes a moment after the collective fails).
  std::vector<int> lost_ranks(std::chrono::milliseconds wait);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::distribute
