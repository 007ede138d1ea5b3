// Rendezvous key-value store over TCP. Worker 0 hosts the server (one thread per client
// connection; the clients are the few workers of a job), every worker holds one client
// connection for its lifetime. Blocking requests (get, wait) wait on the server with the
// client's timeout; the client's socket has a receive timeout a little longer than that, so a
// dead or frozen server never blocks a worker forever.
#include "lockstep/distribute/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "distribute/backends.h"
#include "lockstep/distribute/cluster.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCheck, kWait, kRegister, kLost, kBye };
enum Status : uint8_t { kOk = 0, kTimeout = 1 };

// Extra time the client waits beyond a request's own timeout before calling the server lost.
constexpr milliseconds kReplyGrace{3000};

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
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

// Request / reply encoding: little-endian host integers (all peers run the same build),
// strings as u32 length + bytes.
struct Writer {
  std::vector<char> buf;
  template <typename T>
  void pod(T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void bytes(const std::vector<char>& v) {
    pod(uint32_t(v.size()));
    buf.insert(buf.end(), v.begin(), v.end());
  }
  void str(const std::string& s) { bytes(std::vector<char>(s.begin(), s.end())); }
};

struct Reader {
  int fd;
  bool ok = true;
  template <typename T>
  T pod() {
    T v{};
    ok = ok && read_all(fd, &v, sizeof(T));
    return v;
  }
  std::vector<char> bytes() {
    const uint32_t n = pod<uint32_t>();
    if (!ok || n > (1u << 30)) {
      ok = false;
      return {};
    }
    std::vector<char> v(n);
    ok = ok && read_all(fd, v.data(), n);
    return v;
  }
  std::string str() {
    auto v = bytes();
    return std::string(v.begin(), v.end());
  }
};

std::string errno_text(int err) { return std::strerror(err); }

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

// ---- server ----------------------------------------------------------------------------------

struct StoreServer::Impl {
  std::string host;
  int port = 0;
  int listen_fd = -1;
  int wake_pipe[2] = {-1, -1};
  std::thread acceptor;

  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<char>> data;
  std::set<int> lost;
  bool stopping = false;
  std::vector<std::thread> connections;
  std::vector<int> connection_fds;

  void accept_loop() {
    for (;;) {
      pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_pipe[0], POLLIN, 0}};
      const int n = ::poll(fds, 2, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 || (fds[1].revents & POLLIN)) return;
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      connection_fds.push_back(fd);
      connections.emplace_back([this, fd] { serve(fd); });
    }
  }

  // Waits (holding `lock`) until pred() or timeout or shutdown; returns pred().
  template <typename Pred>
  bool wait_for(std::unique_lock<std::mutex>& lock, milliseconds timeout, Pred pred) {
    cv.wait_for(lock, timeout, [&] { return stopping || pred(); });
    return pred();
  }

  void serve(int fd) {
    Reader in{fd};
    int rank = -1;
    bool goodbye = false;
    for (;;) {
      const uint8_t op = in.pod<uint8_t>();
      if (!in.ok) break;
      Writer out;
      if (op == kSet) {
        std::string key = in.str();
        auto value = in.bytes();
        if (!in.ok) break;
        {
          std::lock_guard lock(mu);
          data[key] = std::move(value);
        }
        cv.notify_all();
        out.pod(kOk);
      } else if (op == kGet) {
        const std::string key = in.str();
        const auto timeout = milliseconds(in.pod<int64_t>());
        if (!in.ok) break;
        std::unique_lock lock(mu);
        if (wait_for(lock, timeout, [&] { return data.count(key) > 0; })) {
          out.pod(kOk);
          out.bytes(data[key]);
        } else {
          out.pod(kTimeout);
        }
      } else if (op == kAdd) {
        const std::string key = in.str();
        const int64_t delta = in.pod<int64_t>();
        if (!in.ok) break;
        int64_t value = 0;
        {
          std::lock_guard lock(mu);
          auto& stored = data[key];
          if (stored.size() == sizeof(int64_t)) std::memcpy(&value, stored.data(), sizeof value);
          value += delta;
          stored.resize(sizeof value);
          std::memcpy(stored.data(), &value, sizeof value);
        }
        cv.notify_all();
        out.pod(kOk);
        out.pod(value);
      } else if (op == kCheck) {
        const std::string key = in.str();
        if (!in.ok) break;
        std::lock_guard lock(mu);
        out.pod(uint8_t(data.count(key) ? 1 : 0));
      } else if (op == kWait) {
        const uint32_t n = in.pod<uint32_t>();
        std::vector<std::string> keys;
        for (uint32_t i = 0; i < n && in.ok; ++i) keys.push_back(in.str());
        const auto timeout = milliseconds(in.pod<int64_t>());
        if (!in.ok) break;
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
      } else if (op == kRegister) {
        rank = in.pod<int32_t>();
        if (!in.ok) break;
        out.pod(kOk);
      } else if (op == kLost) {
        const auto wait = milliseconds(in.pod<int64_t>());
        if (!in.ok) break;
        std::unique_lock lock(mu);
        wait_for(lock, wait, [&] { return !lost.empty(); });
        out.pod(kOk);
        out.pod(uint32_t(lost.size()));
        for (int r : lost) out.pod(int32_t(r));
      } else if (op == kBye) {
        goodbye = true;
        break;
      } else {
        break;  // protocol error: drop the connection
      }
      if (!write_all(fd, out.buf.data(), out.buf.size())) break;
    }
    std::lock_guard lock(mu);
    if (!goodbye && !stopping && rank >= 0) {
      lost.insert(rank);
      cv.notify_all();
    }
  }
};

StoreServer::StoreServer(const std::string& host, int port) : impl_(new Impl) {
  impl_->host = host;
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
  std::vector<std::thread> connections;
  {
    std::lock_guard lock(impl_->mu);
    connections.swap(impl_->connections);
    for (int fd : impl_->connection_fds) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : connections) t.join();
  for (int fd : impl_->connection_fds) ::close(fd);
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
  int fd = -1;
  milliseconds socket_timeout{-1};

  [[noreturn]] void fail(const std::string& during, int err) {
    throw PeerLostError("lost the rendezvous store at " + address +
                            " (hosted by worker 0) during " + during + ": " + errno_text(err) +
                            "; worker 0 (rank 0, " + address +
                            ") has probably exited, crashed or hung",
                        0, address);
  }

  // Sends a request and prepares the socket to wait `wait` for the reply.
  void send(const Writer& w, milliseconds wait, const std::string& during,
            milliseconds grace = kReplyGrace) {
    const milliseconds limit = wait + grace;
    if (limit != socket_timeout) {
      timeval tv{};
      tv.tv_sec = limit.count() / 1000;
      tv.tv_usec = (limit.count() % 1000) * 1000;
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      socket_timeout = limit;
    }
    if (!write_all(fd, w.buf.data(), w.buf.size())) fail(during, errno);
  }

  Reader reader() { return Reader{fd}; }
  void check(const Reader& r, const std::string& during) {
    if (!r.ok) fail(during, errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno);
  }
};

StoreClient::StoreClient(const std::string& host, int port, milliseconds timeout)
    : impl_(new Impl) {
  impl_->address = HostPort{host, port}.str();
  impl_->timeout = timeout;
  const auto deadline = Clock::now() + timeout;
  int err = 0;
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
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                ai->ai_protocol);
        if (fd < 0) {
          err = errno;
          continue;
        }
        int rc2 = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc2 != 0 && errno == EINPROGRESS) {
          const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
          pollfd p{fd, POLLOUT, 0};
          const int n =
              ::poll(&p, 1, int(std::max<int64_t>(1, std::min<int64_t>(left.count(), 1000))));
          int so_error = ETIMEDOUT;
          socklen_t len = sizeof so_error;
          if (n > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
          rc2 = so_error == 0 ? 0 : -1;
          errno = so_error;
        }
        if (rc2 == 0) {
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          impl_->fd = fd;
        } else {
          err = errno;
          ::close(fd);
        }
      }
      ::freeaddrinfo(result);
    }
    if (impl_->fd >= 0) break;
    if (Clock::now() >= deadline) {
      const std::string why = !resolve_error.empty() && err == 0 ? resolve_error : errno_text(err);
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
  auto value = r.bytes();
  impl_->check(r, "get('" + key + "')");
  return value;
}

std::string StoreClient::get_string(const std::string& key) {
  auto v = get(key);
  return std::string(v.begin(), v.end());
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
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
  for (uint32_t i = 0; i < n && r.ok; ++i) missing.push_back(r.str());
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
  for (uint32_t i = 0; i < n && r.ok; ++i) ranks.push_back(r.pod<int32_t>());
  impl_->check(r, "lost_ranks");
  return ranks;
}

}  // namespace lockstep::distribute
