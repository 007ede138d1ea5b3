// Rendezvous key-value store over TCP. Worker 0 hosts the server (one thread per client
// connection; the clients are the few workers of a job), every worker holds one client
// connection for its lifetime. Blocking requests (get, wait) wait on the server with the
// client's timeout; the client's socket has a receive timeout a little longer than that, so a
// dead or frozen server never blocks a worker forever.
//
// Hardening (see store.h): a hello carrying the job token opens every connection (required
// when the server has a token), lengths are capped and read in chunks as bytes arrive, a
// connection's thread closes its socket and is joined by the acceptor, connections are counted
// and bounded, and accept() backs off on EMFILE/ENFILE.
#include "lockstep/distribute/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "distribute/backends.h"
#include "distribute/store_protocol.h"
#include "lockstep/core/file_io.h"
#include "lockstep/core/strings.h"
#include "lockstep/distribute/cluster.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using namespace store_protocol;  // Op, Status, Reader, Writer, Request, read_request

// Extra time the client waits beyond a request's own timeout before calling the server lost.
constexpr milliseconds kReplyGrace{3000};
// How long the acceptor pauses when the process is out of descriptors (or threads).
constexpr milliseconds kAcceptBackoff{100};

bool write_all(int fd, const void* data, size_t size) {
  return write_fully(fd, data, size, /*socket=*/true) == 0;
}

bool read_all(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ECONNRESET;
      return false;
    }
    p += n;
    size -= size_t(n);
  }
  return true;
}

// A Reader of a socket (store_protocol.h has the encoding).
Reader fd_reader(int fd) {
  return Reader{[fd](void* data, size_t size) { return read_all(fd, data, size); }};
}

// Reads exactly `size` bytes unless `deadline` passes first (poll before each recv, so the
// time left bounds the whole read, not each piece of it).
bool read_before(int fd, void* data, size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    const int n = ::poll(&pf, 1, int(std::min<int64_t>(left, 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    const ssize_t got = ::recv(fd, p, size, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    p += got;
    size -= size_t(got);
  }
  return true;
}

std::string errno_text(int err) { return std::strerror(err); }

// Compares in time that depends only on the expected token's length.
bool token_matches(const std::string& expected, const std::string& given) {
  unsigned diff = expected.size() != given.size() ? 1u : 0u;
  const size_t n = given.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = n ? static_cast<unsigned char>(given[i % n]) : 0;
    diff |= static_cast<unsigned char>(expected[i]) ^ g;
  }
  return diff == 0;
}

void set_socket_timeout(int fd, milliseconds limit) {
  timeval tv{};
  tv.tv_sec = limit.count() / 1000;
  tv.tv_usec = (limit.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

std::string trim_right(std::string s) {
  while (!s.empty() &&
         (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t'))
    s.pop_back();
  return s;
}

std::string read_secret_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer forever (and ignore
  // --timeout-ms); a FIFO is then refused as not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw CollectiveError("LOCKSTEP_JOB_SECRET_FILE='" + path + "' cannot be read: " +
                          errno_text(errno) + " (every worker needs to read the same secret file)");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw CollectiveError("LOCKSTEP_JOB_SECRET_FILE='" + path + "' is " +
                          (S_ISFIFO(st.st_mode) ? "a FIFO, " : "") +
                          "not a regular file (write the secret to a file every worker can read)");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text(kStoreMaxTokenBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  ::close(fd);
  text.resize(got);
  text = trim_right(text);
  if (got > kStoreMaxTokenBytes) {
    throw CollectiveError("LOCKSTEP_JOB_SECRET_FILE='" + path + "' holds more than " +
                          std::to_string(kStoreMaxTokenBytes) + " bytes; a job secret is short");
  }
  if (text.empty()) throw CollectiveError("LOCKSTEP_JOB_SECRET_FILE='" + path + "' is empty");
  return text;
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "::") return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0 || result == nullptr) return false;
  bool loopback = true;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      loopback = loopback && (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      const bool mapped_loopback =
          IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127;
      loopback = loopback && (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) || mapped_loopback);
    } else {
      loopback = false;
    }
  }
  ::freeaddrinfo(result);
  return loopback;
}

namespace {

// A host that does not resolve is a wrong address (a typo in TF_CONFIG's cluster, a name only
// another machine knows), not a missing token: say so, naming it, before anything else.
void check_host_resolves(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "::") return;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (result != nullptr) ::freeaddrinfo(result);
  if (rc != 0)
    throw CollectiveError("the rendezvous store's host '" + host + "' does not resolve (" +
                          ::gai_strerror(rc) +
                          "): check the chief's address (TF_CONFIG's cluster, the chief "
                          "argument) and that this machine can resolve it");
}

}  // namespace

std::string job_token_from_environment(const std::string& host, const Environment& env) {
  auto get = [&](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  std::string token = get("LOCKSTEP_JOB_TOKEN");
  if (token.size() > kStoreMaxTokenBytes) {
    throw CollectiveError("LOCKSTEP_JOB_TOKEN is " + std::to_string(token.size()) +
                          " bytes; at most " + std::to_string(kStoreMaxTokenBytes));
  }
  if (token.empty() && !get("LOCKSTEP_JOB_SECRET_FILE").empty())
    token = read_secret_file(get("LOCKSTEP_JOB_SECRET_FILE"));
  if (!token.empty()) return token;
  const std::string opt_out = get("LOCKSTEP_ALLOW_UNAUTHENTICATED");
  if (opt_out == "1" || opt_out == "true" || opt_out == "yes") return "";
  if (!opt_out.empty() && opt_out != "0" && opt_out != "false" && opt_out != "no") {
    throw CollectiveError("LOCKSTEP_ALLOW_UNAUTHENTICATED='" + opt_out + "' is not 1 or 0");
  }
  if (is_loopback_host(host)) return "";
  check_host_resolves(host);
  throw CollectiveError(
      "the rendezvous store at '" + (host.empty() ? std::string("0.0.0.0") : host) +
      "' is reachable from the network but this job has no job token, so anyone who reaches "
      "the port could join it: give every worker the same secret with LOCKSTEP_JOB_TOKEN "
      "(e.g. export LOCKSTEP_JOB_TOKEN=$(openssl rand -hex 32) before launching) or "
      "LOCKSTEP_JOB_SECRET_FILE=<a file every worker can read>, or set "
      "LOCKSTEP_ALLOW_UNAUTHENTICATED=1 on a trusted, isolated network");
}

std::string job_token_from_environment(const std::string& host) {
  return job_token_from_environment(host, process_environment());
}

// The numeric host of an accepted peer ("127.0.0.1", "::1"); "" when unknown.
std::string peer_host(const sockaddr_storage& a) {
  char host[NI_MAXHOST] = "";
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof a, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) != 0)
    return "";
  return host;
}

// ---- server ----------------------------------------------------------------------------------

struct StoreServer::Impl {
  std::string host;
  int port = 0;
  StoreServerOptions options;
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  std::thread acceptor;

  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<char>> data;
  std::set<int> lost;
  bool stopping = false;
  uint64_t next_id = 0;
  std::map<uint64_t, std::thread> connections;  // running
  std::vector<std::thread> finished;            // ended, to be joined by the acceptor
  std::set<int> connection_fds;                 // open server-side sockets
  // Strangers: connections that have not yet shown they belong to the job (id -> socket and
  // peer address), oldest first. With a token, a stranger has not presented it yet; without
  // one, it has not completed a first request. When the store is full, the oldest stranger is
  // cut to make room, and one peer address holds at most max_strangers_per_peer of them (its
  // oldest is cut first), so idle connections can never keep a worker of the job out.
  struct Stranger {
    int fd;
    std::string peer;
  };
  std::map<uint64_t, Stranger> unauthenticated;

  // Sleeps `d` unless shutdown is requested first; returns false on shutdown.
  bool pause(milliseconds d) {
    pollfd p{wake_pipe[0], POLLIN, 0};
    return ::poll(&p, 1, int(d.count())) == 0;
  }

  void reap() {
    std::vector<std::thread> done;
    {
      std::lock_guard lock(mu);
      done.swap(finished);
    }
    for (auto& t : done) t.join();
  }

  void accept_loop() {
    for (;;) {
      reap();
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
      const int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (fds[1].revents & POLLIN)) return;
      sockaddr_storage peer_addr{};
      socklen_t peer_len = sizeof peer_addr;
      const int fd =
          ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer_addr), &peer_len, SOCK_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        if (err == EINTR || err == EAGAIN || err == ECONNABORTED || err == EPROTO) continue;
        // EMFILE / ENFILE / ENOBUFS / ENOMEM (or anything unexpected): the connection waits in
        // the backlog; try again once descriptors may have been freed, without spinning.
        if (!pause(kAcceptBackoff)) return;
        continue;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      const std::string peer = peer_host(peer_addr);
      evict_strangers_of(peer, options.max_strangers_per_peer - 1);
      if (int(connections.size()) >= options.max_connections && !evict_one_stranger()) {
        ::close(fd);  // over the bound, every connection a member: refused at once
        continue;
      }
      const uint64_t id = next_id++;
      try {
        std::thread& slot = connections[id];  // the slot first: a thread is never dropped
        connection_fds.insert(fd);
        unauthenticated[id] = Stranger{fd, peer};
        slot = std::thread([this, fd, id] { serve(fd, id); });
      } catch (const std::exception&) {  // no more threads or memory: like EMFILE
        connections.erase(id);
        connection_fds.erase(fd);
        unauthenticated.erase(id);
        ::close(fd);
      }
    }
  }

  // Holding `mu`: cuts the oldest connection that has not presented the token (its thread sees
  // the socket shut and ends). False when there is none.
  bool evict_one_stranger() {
    if (unauthenticated.empty()) return false;
    ::shutdown(unauthenticated.begin()->second.fd, SHUT_RDWR);
    unauthenticated.erase(unauthenticated.begin());
    return true;
  }

  // Holding `mu`: cuts the oldest strangers from `peer` until it holds at most `keep`.
  void evict_strangers_of(const std::string& peer, int keep) {
    int held = 0;
    for (const auto& [id, s] : unauthenticated) held += s.peer == peer;
    for (auto it = unauthenticated.begin();
         held > std::max(keep, 0) && it != unauthenticated.end();) {
      if (it->second.peer != peer) {
        ++it;
        continue;
      }
      ::shutdown(it->second.fd, SHUT_RDWR);
      it = unauthenticated.erase(it);
      --held;
    }
  }

  // Waits (holding `lock`) until pred() or timeout or shutdown; returns pred().
  template <typename Pred>
  bool wait_for(std::unique_lock<std::mutex>& lock, milliseconds timeout, Pred pred) {
    cv.wait_for(lock, timeout, [&] { return stopping || pred(); });
    return pred();
  }

  void serve(int fd, uint64_t id) {
    int rank = -1;
    bool goodbye = false;
    try {
      goodbye = serve_requests(fd, id, rank);
    } catch (...) {
      // bad_alloc or anything else: a protocol failure of this connection only
    }
    std::lock_guard lock(mu);
    if (!goodbye && !stopping && rank >= 0) {
      lost.insert(rank);
      cv.notify_all();
    }
    connection_fds.erase(fd);
    unauthenticated.erase(id);  // before close: the number must not be shut once reused
    ::close(fd);
    auto it = connections.find(id);
    if (it != connections.end()) {
      finished.push_back(std::move(it->second));
      connections.erase(it);
    }
  }

  enum class Next { kReply, kClose };

  // One request after the hello (its arguments read, each capped): fills the reply.
  Next handle(uint8_t op, Request& request, Writer& out, int& rank) {
    if (op == kSet) {
      {
        std::lock_guard lock(mu);
        data[request.key] = std::move(request.value);
      }
      cv.notify_all();
      out.pod(kOk);
    } else if (op == kGet) {
      std::unique_lock lock(mu);
      if (wait_for(lock, request.timeout, [&] { return data.count(request.key) > 0; })) {
        out.pod(kOk);
        out.bytes(data[request.key]);
      } else {
        out.pod(kTimeout);
      }
    } else if (op == kAdd) {
      out.pod(kOk);
      out.pod(add(request.key, request.delta));
    } else if (op == kCheck) {
      std::lock_guard lock(mu);
      out.pod(uint8_t(data.count(request.key) ? 1 : 0));
    } else if (op == kWait) {
      wait_for_keys(request.keys, request.timeout, out);
    } else if (op == kRegister) {
      rank = request.rank;
      out.pod(kOk);
    } else if (op == kLost) {
      std::unique_lock lock(mu);
      wait_for(lock, request.timeout, [&] { return !lost.empty(); });
      out.pod(kOk);
      out.pod(uint32_t(lost.size()));
      for (int r : lost) out.pod(int32_t(r));
    }
    return Next::kReply;
  }

  int64_t add(const std::string& key, int64_t delta) {
    int64_t value = 0;
    {
      std::lock_guard lock(mu);
      auto& stored = data[key];
      if (stored.size() == sizeof(int64_t)) std::memcpy(&value, stored.data(), sizeof value);
      value = int64_t(uint64_t(value) + uint64_t(delta));  // wraps, never UB
      stored.resize(sizeof value);
      std::memcpy(stored.data(), &value, sizeof value);
    }
    cv.notify_all();
    return value;
  }

  void wait_for_keys(const std::vector<std::string>& keys, milliseconds timeout, Writer& out) {
    std::unique_lock lock(mu);
    auto missing = [&] {
      std::vector<std::string> m;
      for (const auto& k : keys) {
        if (!data.count(k)) m.push_back(k);
      }
      return m;
    };
    wait_for(lock, timeout, [&] { return missing().empty(); });
    const auto still = missing();
    out.pod(still.empty() ? kOk : kTimeout);
    out.pod(uint32_t(still.size()));
    for (const auto& k : still) out.str(k);
  }

  // The hello: checks the token (when the server has one). False closes the connection.
  bool hello(int fd, Reader& in, Writer& out, bool& authenticated) {
    Request request;
    if (!read_request(kHello, in, request)) return false;
    const std::string& token = request.token;
    if (!options.token.empty() && !token_matches(options.token, token)) {
      out.pod(kDenied);
      write_all(fd, out.buf.data(), out.buf.size());
      return false;
    }
    authenticated = true;
    out.pod(kOk);
    return true;
  }

  // The connection has shown it belongs to the job (the token, or without one its first
  // complete request): a member from now on, never evicted, with no deadline on its reads.
  void admit(int fd, uint64_t id, bool& member) {
    set_socket_timeout(fd, milliseconds(0));  // workers idle for hours
    std::lock_guard lock(mu);
    unauthenticated.erase(id);
    member = true;
  }

  // Serves one connection until it leaves, breaks the protocol or the server stops. Returns
  // true when the client said goodbye.
  bool serve_requests(int fd, uint64_t id, int& rank) {
    bool authenticated = options.token.empty();
    bool member = false;
    // The handshake is bounded as a whole: a client dripping one byte every few seconds
    // (each read within a per-read timeout) is cut at the deadline all the same. Without a
    // token the first request is the handshake: an idle connection holds no slot for long.
    const auto deadline = Clock::now() + options.handshake_timeout;
    Reader in{[&](void* data, size_t size) {
      return member ? read_all(fd, data, size) : read_before(fd, data, size, deadline);
    }};
    for (;;) {
      const uint8_t op = in.pod<uint8_t>();
      if (!in.ok) return false;
      if (op == kBye) return true;
      Writer out;
      if (op == kHello) {
        if (!hello(fd, in, out, authenticated)) return false;
      } else if (!authenticated) {
        return false;  // a stranger: say nothing, close
      } else {
        // Read whole (within the deadline while a stranger) before it is served: a blocking
        // get or wait of a member then waits with no deadline.
        Request request;
        if (!read_request(op, in, request)) return false;
        if (!member) admit(fd, id, member);
        if (handle(op, request, out, rank) == Next::kClose) return false;
      }
      if (!member) admit(fd, id, member);
      if (!write_all(fd, out.buf.data(), out.buf.size())) return false;
    }
  }
};

StoreServer::StoreServer(const std::string& host, int port)
    : StoreServer(host, port, StoreServerOptions{job_token_from_environment(host)}) {}

StoreServer::StoreServer(const std::string& host, int port, StoreServerOptions options)
    : impl_(new Impl) {
  impl_->host = host;
  impl_->options = std::move(options);
  if (impl_->options.max_connections < 1) impl_->options.max_connections = 1;
  if (impl_->options.token.size() > kStoreMaxTokenBytes) {
    throw CollectiveError("rendezvous store: the job token is longer than " +
                          std::to_string(kStoreMaxTokenBytes) + " bytes");
  }
  const bool wildcard = host.empty() || host == "0.0.0.0" || host == "::";
  addrinfo hints{};
  hints.ai_family = wildcard ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string port_text = std::to_string(port);
  const std::string address = HostPort{wildcard ? "0.0.0.0" : host, port}.str();
  const int rc =
      ::getaddrinfo(wildcard ? nullptr : host.c_str(), port_text.c_str(), &hints, &result);
  if (rc != 0) {
    throw CollectiveError("rendezvous store: cannot resolve " + address + ": " + gai_strerror(rc));
  }
  int err = 0;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      impl_->listen_fd = fd;
      break;
    }
    err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(result);
  if (impl_->listen_fd < 0) {
    throw CollectiveError("rendezvous store: worker 0 cannot listen on " + address + ": " +
                          errno_text(err) +
                          " (another job or a previous run may hold the port; choose another "
                          "port for worker 0 in TF_CONFIG or LOCKSTEP_MASTER_PORT)");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  impl_->port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(impl_->wake_pipe, O_CLOEXEC) != 0) {
    ::close(impl_->listen_fd);
    throw CollectiveError("rendezvous store: pipe2 failed: " + errno_text(errno));
  }
  impl_->acceptor = std::thread([impl = impl_.get()] { impl->accept_loop(); });
}

StoreServer::~StoreServer() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    for (int fd : impl_->connection_fds) ::shutdown(fd, SHUT_RDWR);
  }
  impl_->cv.notify_all();
  const char byte = 0;
  (void)!::write(impl_->wake_pipe[1], &byte, 1);
  impl_->acceptor.join();
  // No new connections now; wake the running ones (each closes its own socket) and join them.
  std::map<uint64_t, std::thread> running;
  {
    std::lock_guard lock(impl_->mu);
    for (int fd : impl_->connection_fds) ::shutdown(fd, SHUT_RDWR);
    running.swap(impl_->connections);
  }
  for (auto& [id, t] : running) t.join();
  impl_->reap();
  ::close(impl_->listen_fd);
  ::close(impl_->wake_pipe[0]);
  ::close(impl_->wake_pipe[1]);
}

int StoreServer::port() const { return impl_->port; }
std::string StoreServer::address() const {
  const bool wildcard = impl_->host.empty();
  return HostPort{wildcard ? "0.0.0.0" : impl_->host, impl_->port}.str();
}

// ---- client ----------------------------------------------------------------------------------

struct StoreClient::Impl {
  std::string address;
  milliseconds timeout;
  std::string token;
  int fd = -1;
  milliseconds socket_timeout{-1};

  [[noreturn]] void fail(const std::string& during, int err) {
    throw PeerLostError("lost the rendezvous store at " + address +
                            " (hosted by worker 0) during " + during + ": " + errno_text(err) +
                            "; worker 0 (rank 0, " + address +
                            ") has probably exited, crashed or hung",
                        0, address);
  }

  void set_timeout(milliseconds limit) {
    if (limit != socket_timeout) {
      set_socket_timeout(fd, limit);
      socket_timeout = limit;
    }
  }

  // Sends a request and prepares the socket to wait `wait` for the reply.
  void send(const Writer& w, milliseconds wait, const std::string& during,
            milliseconds grace = kReplyGrace) {
    set_timeout(wait + grace);
    if (!write_all(fd, w.buf.data(), w.buf.size())) fail(during, errno);
  }

  Reader reader() { return fd_reader(fd); }
  void check(const Reader& r, const std::string& during) {
    if (r.over_limit) {
      throw PeerLostError("the rendezvous store at " + address + " sent a reply to " + during +
                              " longer than the protocol allows (is it a Lockstep store of the "
                              "same version?)",
                          0, address);
    }
    if (!r.ok) fail(during, errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno);
  }

  // The hello on a fresh connection: kOk, kDenied, or -1 when the connection failed.
  int hello(milliseconds wait) {
    Writer w;
    w.pod(uint8_t(kHello));
    w.str(token);
    set_timeout(std::max(wait, milliseconds(1)));
    if (!write_all(fd, w.buf.data(), w.buf.size())) return -1;
    Reader r = reader();
    const uint8_t status = r.pod<uint8_t>();
    return r.ok ? int(status) : -1;
  }
};

namespace {
void check_key(const std::string& key, const std::string& address) {
  if (key.size() > kStoreMaxKeyBytes) {
    throw CollectiveError("rendezvous store " + address + ": key '" + key.substr(0, 64) +
                          "...' is " + std::to_string(key.size()) + " bytes; keys are limited to " +
                          std::to_string(kStoreMaxKeyBytes));
  }
}
// A blocking TCP socket connected to `ai` (with TCP_NODELAY), or -1 with *err set when the
// connection fails or the deadline (at most 1 s per try) passes first.
int connect_before(const addrinfo* ai, Clock::time_point deadline, int* err) {
  const int fd =
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLOUT, 0};
    const int n = ::poll(&p, 1, int(std::max<int64_t>(1, std::min<int64_t>(left.count(), 1000))));
    int so_error = ETIMEDOUT;
    socklen_t len = sizeof so_error;
    if (n > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
    rc = so_error == 0 ? 0 : -1;
    errno = so_error;
  }
  if (rc != 0) {
    *err = errno;
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

StoreClient::StoreClient(const std::string& host, int port, milliseconds timeout)
    : StoreClient(host, port, timeout, job_token_from_environment(host)) {}

StoreClient::StoreClient(const std::string& host, int port, milliseconds timeout, std::string token)
    : impl_(new Impl) {
  impl_->address = HostPort{host, port}.str();
  impl_->timeout = timeout;
  impl_->token = std::move(token);
  if (impl_->token.size() > kStoreMaxTokenBytes) {
    throw CollectiveError("rendezvous store: the job token is longer than " +
                          std::to_string(kStoreMaxTokenBytes) + " bytes");
  }
  const auto deadline = Clock::now() + timeout;
  int err = 0;
  bool closed_in_handshake = false;  // connected, but the store closed before its answer
  std::string resolve_error;
  while (impl_->fd < 0) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
    if (rc != 0) {
      resolve_error = gai_strerror(rc);
    } else {
      for (addrinfo* ai = result; ai != nullptr && impl_->fd < 0; ai = ai->ai_next) {
        const int fd = connect_before(ai, deadline, &err);
        if (fd < 0) continue;
        impl_->fd = fd;
        // Prove membership of the job. A server that is starting, or full, may close the
        // connection: try again until the deadline. A refused token is final.
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        const int status = impl_->hello(std::max(left, milliseconds(1000)));
        if (status == kOk) break;
        ::close(fd);
        impl_->fd = -1;
        impl_->socket_timeout = milliseconds(-1);
        if (status == kDenied) {
          ::freeaddrinfo(result);
          throw CollectiveError(
              "the rendezvous store at " + impl_->address + " (hosted by worker 0) refused " +
              (impl_->token.empty() ? std::string("this worker: it presented no job token and "
                                                  "the store requires one")
                                    : std::string("this worker's job token")) +
              "; every worker of a job needs the same LOCKSTEP_JOB_TOKEN (or "
              "LOCKSTEP_JOB_SECRET_FILE naming the same secret)");
        }
        err = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : (errno ? errno : ECONNRESET);
        closed_in_handshake = true;
      }
      ::freeaddrinfo(result);
    }
    if (impl_->fd >= 0) break;
    if (Clock::now() >= deadline) {
      const std::string why = !resolve_error.empty() && err == 0 ? resolve_error : errno_text(err);
      if (closed_in_handshake)
        throw PeerLostError(
            "the rendezvous store at " + impl_->address + " (hosted by worker 0) accepted " +
                "connections but closed each before the handshake finished, for " +
                detail::format_duration(timeout) + " (" + why +
                "): it is full (StoreServerOptions::max_connections, 1024 by default; with a "
                "job token, connections that have not presented it are cut first, so the slots "
                "are held by this job's workers) or shutting down, not unreachable",
            0, impl_->address);
      throw PeerLostError("could not reach the rendezvous store at " + impl_->address +
                              " (hosted by worker 0) within " + detail::format_duration(timeout) +
                              ": " + why + "; check that worker 0 (rank 0, " + impl_->address +
                              ") is running and that this address is reachable from here",
                          0, impl_->address);
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
}

StoreClient::~StoreClient() {
  Writer w;
  w.pod(uint8_t(kBye));
  write_all(impl_->fd, w.buf.data(), w.buf.size());
  ::close(impl_->fd);
}

std::string StoreClient::address() const { return impl_->address; }
milliseconds StoreClient::timeout() const { return impl_->timeout; }

void StoreClient::set(const std::string& key, const std::vector<char>& value) {
  check_key(key, impl_->address);
  if (value.size() > kStoreMaxValueBytes) {
    throw CollectiveError("rendezvous store " + impl_->address + ": the value for key '" + key +
                          "' is " + std::to_string(value.size()) +
                          " bytes; values are limited to " + std::to_string(kStoreMaxValueBytes));
  }
  Writer w;
  w.pod(uint8_t(kSet));
  w.str(key);
  w.bytes(value);
  impl_->send(w, impl_->timeout, "set('" + key + "')");
  Reader r = impl_->reader();
  r.pod<uint8_t>();
  impl_->check(r, "set('" + key + "')");
}

void StoreClient::set(const std::string& key, const std::string& value) {
  set(key, std::vector<char>(value.begin(), value.end()));
}

std::vector<char> StoreClient::get(const std::string& key) {
  check_key(key, impl_->address);
  Writer w;
  w.pod(uint8_t(kGet));
  w.str(key);
  w.pod(int64_t(impl_->timeout.count()));
  impl_->send(w, impl_->timeout, "get('" + key + "')");
  Reader r = impl_->reader();
  const uint8_t status = r.pod<uint8_t>();
  impl_->check(r, "get('" + key + "')");
  if (status != kOk) {
    throw CollectiveError("rendezvous store " + impl_->address + ": key '" + key +
                          "' did not appear within " + detail::format_duration(impl_->timeout));
  }
  auto value = r.bytes(kStoreMaxValueBytes);
  impl_->check(r, "get('" + key + "')");
  return value;
}

std::string StoreClient::get_string(const std::string& key) {
  auto v = get(key);
  return std::string(v.begin(), v.end());
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  check_key(key, impl_->address);
  Writer w;
  w.pod(uint8_t(kAdd));
  w.str(key);
  w.pod(delta);
  impl_->send(w, impl_->timeout, "add('" + key + "')");
  Reader r = impl_->reader();
  r.pod<uint8_t>();
  const int64_t value = r.pod<int64_t>();
  impl_->check(r, "add('" + key + "')");
  return value;
}

bool StoreClient::check(const std::string& key) {
  check_key(key, impl_->address);
  Writer w;
  w.pod(uint8_t(kCheck));
  w.str(key);
  impl_->send(w, impl_->timeout, "check('" + key + "')");
  Reader r = impl_->reader();
  const uint8_t present = r.pod<uint8_t>();
  impl_->check(r, "check('" + key + "')");
  return present != 0;
}

std::vector<std::string> StoreClient::wait_missing(const std::vector<std::string>& keys,
                                                   milliseconds timeout) {
  if (keys.size() > kStoreMaxWaitKeys) {
    throw CollectiveError("rendezvous store " + impl_->address + ": wait for " +
                          std::to_string(keys.size()) + " keys; at most " +
                          std::to_string(kStoreMaxWaitKeys) + " at a time");
  }
  for (const auto& k : keys) check_key(k, impl_->address);
  Writer w;
  w.pod(uint8_t(kWait));
  w.pod(uint32_t(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.pod(int64_t(timeout.count()));
  impl_->send(w, timeout, "wait");
  Reader r = impl_->reader();
  r.pod<uint8_t>();
  const uint32_t n = r.pod<uint32_t>();
  std::vector<std::string> missing;
  if (n > keys.size()) r.ok = false, r.over_limit = true;
  for (uint32_t i = 0; i < n && r.ok; ++i) missing.push_back(r.str(kStoreMaxKeyBytes));
  impl_->check(r, "wait");
  return missing;
}

void StoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const auto missing = wait_missing(keys, timeout);
  if (!missing.empty()) {
    throw CollectiveError("rendezvous store " + impl_->address + ": waited " +
                          detail::format_duration(timeout) +
                          " for keys that never appeared: " + join(missing));
  }
}

void StoreClient::wait(const std::vector<std::string>& keys) { wait(keys, impl_->timeout); }

void StoreClient::register_rank(int rank) {
  Writer w;
  w.pod(uint8_t(kRegister));
  w.pod(int32_t(rank));
  impl_->send(w, impl_->timeout, "register");
  Reader r = impl_->reader();
  r.pod<uint8_t>();
  impl_->check(r, "register");
}

std::vector<int> StoreClient::lost_ranks(milliseconds wait) {
  Writer w;
  w.pod(uint8_t(kLost));
  w.pod(int64_t(wait.count()));
  // Asked after a collective failed: answer fast, or count the store's host as lost.
  impl_->send(w, wait, "lost_ranks", milliseconds(500));
  Reader r = impl_->reader();
  r.pod<uint8_t>();
  const uint32_t n = r.pod<uint32_t>();
  std::vector<int> ranks;
  if (n > (1u << 20)) r.ok = false, r.over_limit = true;
  for (uint32_t i = 0; i < n && r.ok; ++i) ranks.push_back(r.pod<int32_t>());
  impl_->check(r, "lost_ranks");
  return ranks;
}

}  // namespace lockstep::distribute
