// The rendezvous store as an attacker and a careless network see it: a stranger without the
// job token is refused while the job completes; oversized lengths and garbage close only that
// connection and allocate nothing up front; a thousand open-and-close connections and a low
// descriptor limit leave the store able to serve (and the acceptor does not spin); idle
// connections, with a token or without, are cut first when the store is full, and one peer holds
// a bounded number of them; worker 0's store listens only on the address the cluster names.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "distribute/collective_test_util.h"
#include "lockstep/distribute/cluster.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/store.h"
#include "test_util.h"

namespace ld = lockstep::distribute;
using namespace std::chrono_literals;

namespace {

// The store's wire format (src/distribute/store.cpp): one op byte, strings as u32 length +
// bytes, host byte order.
enum : uint8_t { kSet = 1, kGet = 2, kWait = 5 };

// Sets (or unsets, value == nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// No job token from the environment for this scope.
struct NoTokenEnv {
  ScopedEnv token{"LOCKSTEP_JOB_TOKEN", nullptr};
  ScopedEnv file{"LOCKSTEP_JOB_SECRET_FILE", nullptr};
};

int raw_connect(const char* ip, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, ip, &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

struct Bytes {
  std::vector<char> b;
  Bytes& op(uint8_t v) { return raw(&v, 1); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& i64(int64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) { return u32(uint32_t(s.size())).raw(s.data(), s.size()); }
  Bytes& raw(const void* p, size_t n) {
    b.insert(b.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    return *this;
  }
};

bool send_bytes(int fd, const Bytes& bytes) {
  return ::send(fd, bytes.b.data(), bytes.b.size(), MSG_NOSIGNAL) == ssize_t(bytes.b.size());
}

// True when the server closes the connection within `wait` (EOF or reset); whatever it sends
// before that is read and ignored.
bool closed_by_server(int fd, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) return false;
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
}

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Resident memory of this process in KiB (VmRSS).
long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// A few store clients doing what a job's workers do at rendezvous: each announces itself,
// waits for all the others and reads their values.
void run_job(int port, int workers) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      ld::StoreClient c("127.0.0.1", port, 5s);
      c.register_rank(r);
      c.set("job/worker/" + std::to_string(r), "addr" + std::to_string(r));
      std::vector<std::string> keys;
      for (int k = 0; k < workers; ++k) keys.push_back("job/worker/" + std::to_string(k));
      c.wait(keys);
      bool all = true;
      for (int k = 0; k < workers; ++k)
        all = all && c.get_string(keys[k]) == "addr" + std::to_string(k);
      c.add("job/done", 1);
      if (all) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), workers);
}

}  // namespace

TEST(StoreHardening, StrangerWithoutTheTokenIsRefusedAndTheJobCompletes) {
  ScopedEnv token("LOCKSTEP_JOB_TOKEN", "test-job-token-7f3a9c2e51d84b06");
  ScopedEnv file("LOCKSTEP_JOB_SECRET_FILE", nullptr);
  ld::StoreServer server("127.0.0.1", 0);
  // A stranger speaks the protocol without proving it belongs to the job: it tries to fake a
  // worker's arrival and to read the worker list.
  const int fd = raw_connect("127.0.0.1", server.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_bytes(fd, Bytes().op(kSet).str("job/worker/9").str("evil")));
  EXPECT_TRUE(closed_by_server(fd, 2s)) << "the store answered a connection without the token";
  ::close(fd);
  const int reader = raw_connect("127.0.0.1", server.port());
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(send_bytes(reader, Bytes().op(kGet).str("job/worker/0").i64(100)));
  EXPECT_TRUE(closed_by_server(reader, 2s));
  ::close(reader);

  run_job(server.port(), 3);
  ld::StoreClient observer("127.0.0.1", server.port(), 5s);
  EXPECT_FALSE(observer.check("job/worker/9")) << "the stranger's write reached the store";
  EXPECT_EQ(observer.add("job/done", 0), 3);
}

TEST(StoreHardening, OversizedLengthsAndGarbageCloseOnlyThatConnection) {
  NoTokenEnv env;
  ld::StoreServer server("127.0.0.1", 0);
  ld::StoreClient job("127.0.0.1", server.port(), 5s);
  job.set("before", "1");
  struct Case {
    const char* what;
    Bytes bytes;
  };
  std::vector<Case> cases;
  cases.push_back({"key length 1 GiB", Bytes().op(kSet).u32((1u << 30) - 1)});
  cases.push_back({"value length 16 MiB + 1", Bytes().op(kSet).str("k").u32((16u << 20) + 1)});
  cases.push_back({"value length 4 GiB - 1", Bytes().op(kSet).str("k").u32(0xFFFFFFFFu)});
  cases.push_back({"wait for 4 billion keys", Bytes().op(kWait).u32(0xFFFFFFFFu)});
  cases.push_back({"key length 64 KiB in a get", Bytes().op(kGet).u32(64u << 10)});
  Bytes garbage;
  for (int i = 0; i < 64; ++i) garbage.op(uint8_t(0xE7 ^ (i * 37)));
  cases.push_back({"garbage", garbage});
  for (const Case& c : cases) {
    const int fd = raw_connect("127.0.0.1", server.port());
    ASSERT_GE(fd, 0) << c.what;
    ASSERT_TRUE(send_bytes(fd, c.bytes)) << c.what;
    EXPECT_TRUE(closed_by_server(fd, 2s)) << c.what << ": connection not closed";
    ::close(fd);
  }
  // The job's own connection and new ones still work.
  job.set("after", "2");
  EXPECT_EQ(job.get_string("before"), "1");
  ld::StoreClient late("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(late.get_string("after"), "2");
}

TEST(StoreHardening, ClaimedLengthsAllocateOnlyAsBytesArrive) {
  NoTokenEnv env;
  ld::StoreServer server("127.0.0.1", 0);
  const long before = rss_kib();
  ASSERT_GT(before, 0);
  // Twelve connections each announce a value of almost 16 MiB (192 MiB in all) and send 5 bytes.
  std::vector<int> fds;
  for (int i = 0; i < 12; ++i) {
    const int fd = raw_connect("127.0.0.1", server.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_bytes(
        fd, Bytes().op(kSet).str("big" + std::to_string(i)).u32((16u << 20) - 1).raw("12345", 5)));
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(500ms);
  const long grown_mib = (rss_kib() - before) / 1024;
  EXPECT_LT(grown_mib, 64) << "the store allocated what the lengths claimed, not what arrived";
  for (int fd : fds) ::close(fd);
  ld::StoreClient c("127.0.0.1", server.port(), 5s);
  c.set("x", "y");
  EXPECT_EQ(c.get_string("x"), "y");
}

TEST(StoreHardening, AThousandOpenAndCloseConnectionsLeaveTheStoreServing) {
  NoTokenEnv env;
  ld::StoreServer server("127.0.0.1", 0);
  ld::StoreClient job("127.0.0.1", server.port(), 5s);
  const int baseline = open_fds();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    const int fd = raw_connect("127.0.0.1", server.port());
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    if (i % 2) send_bytes(fd, Bytes().op(kSet).str("half"));  // half a request, then gone
    if (i % 4 == 1) {  // some wait for the store to close its side first
      ::shutdown(fd, SHUT_WR);
      ASSERT_TRUE(closed_by_server(fd, 2s)) << "connection " << i << " not closed by the store";
    }
    ::close(fd);
  }
  std::printf("[  NOTE    ] 1000 connections opened and closed in %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  // The server closes its side of every connection.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (open_fds() > baseline + 8 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  EXPECT_LE(open_fds(), baseline + 8) << "the store keeps closed connections' descriptors";
  job.set("still", "here");
  ld::StoreClient late("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(late.get_string("still"), "here");
}

TEST(StoreHardening, LowDescriptorLimitNeitherSpinsNorStopsTheStore) {
  if (lockstep::test_util::kSanitizerBuild)
    GTEST_SKIP()
        << "a tiny descriptor limit starves the sanitizer runtime; runs in the release suite";
  NoTokenEnv env;
  // In a child: the limit applies to the whole process.
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    try {
      ld::StoreServer server("127.0.0.1", 0);
      rlimit lim{};
      ::getrlimit(RLIMIT_NOFILE, &lim);
      rlimit low = lim;
      low.rlim_cur = rlim_t(open_fds() + 12);
      ::setrlimit(RLIMIT_NOFILE, &low);
      // Connect until this process runs out of descriptors: the last connections wait in the
      // listen backlog while the store's accept() fails with EMFILE.
      std::vector<int> fds;
      for (int i = 0; i < 64; ++i) {
        const int fd = raw_connect("127.0.0.1", server.port());
        if (fd < 0) break;
        fds.push_back(fd);
      }
      std::this_thread::sleep_for(200ms);
      const double t0 = cpu_seconds();
      std::this_thread::sleep_for(1s);
      const double busy = cpu_seconds() - t0;
      if (busy > 0.3) {
        std::fprintf(stderr, "the acceptor spun: %.2f s of CPU in 1 s\n", busy);
        code = 3;
      }
      for (int fd : fds) ::close(fd);
      ld::StoreClient c("127.0.0.1", server.port(), 5s);
      c.set("after", "limit");
      if (c.get_string("after") != "limit") code = 4;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 5;
    }
    ::_exit(code);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: acceptor spun, 4: wrong value, 5: store failed";
}

#ifdef LOCKSTEP_HAVE_GLOO
// Worker 0's store listens on the host the cluster names for it, not on every interface.
TEST(StoreHardening, WorkerZerosStoreListensOnlyOnItsConfiguredAddress) {
  NoTokenEnv env;
  const int p0 = ld::testing::free_port(), p1 = ld::testing::free_port();
  const std::vector<std::string> workers = {"127.0.0.1:" + std::to_string(p0),
                                            "127.0.0.1:" + std::to_string(p1)};
  auto resolver = [&](int rank) {
    return ld::ClusterResolver::make(ld::ClusterResolver::Kind::kTfConfig, 2, rank, workers[0],
                                     workers, "127.0.0.1");
  };
  ld::CommunicationOptions options;
  options.timeout = 10s;
  options.implementation = ld::CollectiveImplementation::kRing;
  std::unique_ptr<ld::Communicator> c1;
  std::thread other([&] { c1 = ld::connect(resolver(1), options); });
  auto c0 = ld::connect(resolver(0), options);
  other.join();
  ASSERT_TRUE(c0 && c1);
  // Linux routes all of 127.0.0.0/8 to the loopback device: a store bound to every interface
  // answers on 127.0.0.2 too.
  const int fd = raw_connect("127.0.0.2", p0);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  EXPECT_LT(fd, 0) << "worker 0's store answers on 127.0.0.2 (it listens on all interfaces)";
  if (fd < 0) {
    EXPECT_EQ(err, ECONNREFUSED) << std::strerror(err);
  }
  // And the kernel's socket table says where it listens: 127.0.0.1, not 0.0.0.0.
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  char port_hex[8];
  std::snprintf(port_hex, sizeof port_hex, "%04X", p0);
  bool found = false;
  while (std::getline(tcp, line)) {
    std::istringstream s(line);
    std::string sl, local, remote, state;
    s >> sl >> local >> remote >> state;
    if (state != "0A" || local.size() < 5 || local.substr(local.size() - 4) != port_hex) continue;
    found = true;
    EXPECT_EQ(local.substr(0, 8), "0100007F") << "listening on " << local;
  }
  EXPECT_TRUE(found) << "no listening socket on port " << p0;
  std::thread closer([&] { c1->close(); });  // close() is a rendezvous of both workers
  c0->close();
  closer.join();
}
#else
TEST(StoreHardening, WorkerZerosStoreListensOnlyOnItsConfiguredAddress) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
#endif

// ---- the token and the limits through the API ------------------------------------------------

TEST(StoreHardening, WrongOrMissingTokenIsRefusedAtOnceWithAClearMessage) {
  ld::StoreServerOptions options;
  options.token = "the-right-token-0123456789abcdef";
  ld::StoreServer server("127.0.0.1", 0, options);
  for (const std::string token : {"the-wrong-token-0123456789abcdef", "", "the-right-token"}) {
    const auto start = std::chrono::steady_clock::now();
    try {
      ld::StoreClient c("127.0.0.1", server.port(), 120s, token);
      ADD_FAILURE() << "connected with token '" << token << "'";
    } catch (const ld::CollectiveError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("refused"), std::string::npos) << msg;
      EXPECT_NE(msg.find("LOCKSTEP_JOB_TOKEN"), std::string::npos) << msg;
      EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << msg;
    }
    // A hang guard, not a timing check: retrying until the timeout would take 120 s.
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0)
        << "a refused token must not be retried until the timeout";
  }
  ld::StoreClient good("127.0.0.1", server.port(), 5s, options.token);
  good.set("k", "v");
  EXPECT_EQ(good.get_string("k"), "v");
}

TEST(StoreHardening, AConnectionThatNeverPresentsItsTokenIsClosed) {
  ld::StoreServerOptions options;
  options.token = "token-for-the-handshake-test-0001";
  options.handshake_timeout = 300ms;
  ld::StoreServer server("127.0.0.1", 0, options);
  const int fd = raw_connect("127.0.0.1", server.port());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(closed_by_server(fd, 3s)) << "a silent connection holds its slot forever";
  ::close(fd);
  // A wrong token in a well-formed hello is answered "denied" and closed.
  const int bad = raw_connect("127.0.0.1", server.port());
  ASSERT_GE(bad, 0);
  ASSERT_TRUE(send_bytes(bad, Bytes().op(9).str("not-the-token")));
  EXPECT_TRUE(closed_by_server(bad, 2s));
  ::close(bad);
}

TEST(StoreHardening, OversizedRequestsAfterTheHelloAreCutToo) {
  ld::StoreServerOptions options;
  options.token = "token-for-the-limits-test-000002";
  ld::StoreServer server("127.0.0.1", 0, options);
  ld::StoreClient job("127.0.0.1", server.port(), 5s, options.token);
  for (uint32_t claimed : {uint32_t(ld::kStoreMaxKeyBytes + 1), 0xFFFFFFFFu}) {
    const int fd = raw_connect("127.0.0.1", server.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_bytes(fd, Bytes().op(9).str(options.token)));
    ASSERT_TRUE(send_bytes(fd, Bytes().op(kSet).u32(claimed)));
    EXPECT_TRUE(closed_by_server(fd, 2s)) << claimed;
    ::close(fd);
  }
  job.set("ok", "1");
  EXPECT_EQ(job.get_string("ok"), "1");
  // The client refuses to send what the server would refuse, naming the limit.
  try {
    job.set(std::string(ld::kStoreMaxKeyBytes + 1, 'k'), "v");
    ADD_FAILURE() << "oversized key accepted";
  } catch (const ld::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("limited to 4096"), std::string::npos) << e.what();
  }
  EXPECT_THROW(job.set("big", std::vector<char>(ld::kStoreMaxValueBytes + 1)), ld::CollectiveError);
  EXPECT_EQ(job.get_string("ok"), "1");  // the connection survived both
}

TEST(StoreHardening, TheNumberOfConnectionsIsBounded) {
  ld::StoreServerOptions options;
  options.max_connections = 8;
  ld::StoreServer server("127.0.0.1", 0, options);
  std::vector<int> fds;
  int closed = 0;
  for (int i = 0; i < 20; ++i) {
    const int fd = raw_connect("127.0.0.1", server.port());
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
  }
  for (int fd : fds) closed += closed_by_server(fd, 300ms) ? 1 : 0;
  EXPECT_EQ(closed, 12) << "connections beyond max_connections must be closed at once";
  for (int fd : fds) ::close(fd);
  // Once they are gone the store serves again (the client retries while it is full).
  ld::StoreClient c("127.0.0.1", server.port(), 5s, "");
  c.set("after", "bound");
  EXPECT_EQ(c.get_string("after"), "bound");
}

// A chief host name that does not resolve is named as such, not blamed on a missing job token.
TEST(StoreHardening, AnUnresolvableHostIsNamedNotBlamedOnTheToken) {
  try {
    ld::job_token_from_environment("no-such-chief.invalid", ld::Environment{});
    ADD_FAILURE() << "an unresolvable host was accepted";
  } catch (const ld::CollectiveError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'no-such-chief.invalid' does not resolve"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("LOCKSTEP_JOB_TOKEN"), std::string::npos) << msg;
  }
}

TEST(StoreHardening, JobTokenComesFromTheEnvironmentAndIsRequiredOffLoopback) {
  ld::Environment none;
  EXPECT_EQ(ld::job_token_from_environment("127.0.0.1", none), "");
  EXPECT_EQ(ld::job_token_from_environment("localhost", none), "");
  EXPECT_EQ(ld::job_token_from_environment("127.0.0.5", none), "");
  for (const std::string host : {"192.0.2.1", "0.0.0.0", ""}) {
    try {
      ld::job_token_from_environment(host, none);
      ADD_FAILURE() << "no token required for '" << host << "'";
    } catch (const ld::CollectiveError& e) {
      const std::string msg = e.what();
      for (const char* name :
           {"LOCKSTEP_JOB_TOKEN", "LOCKSTEP_JOB_SECRET_FILE", "LOCKSTEP_ALLOW_UNAUTHENTICATED"})
        EXPECT_NE(msg.find(name), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(ld::job_token_from_environment("192.0.2.1", {{"LOCKSTEP_ALLOW_UNAUTHENTICATED", "1"}}),
            "");
  EXPECT_THROW(
      ld::job_token_from_environment("192.0.2.1", {{"LOCKSTEP_ALLOW_UNAUTHENTICATED", "maybe"}}),
      ld::CollectiveError);
  EXPECT_EQ(ld::job_token_from_environment("192.0.2.1", {{"LOCKSTEP_JOB_TOKEN", "abc"}}), "abc");
  // A secret file: its content without the trailing newline; the variable wins over the file.
  const std::string secret =
      (std::filesystem::temp_directory_path() / ("lockstep_secret_" + std::to_string(::getpid())))
          .string();
  std::ofstream(secret) << "s3cret-from-a-file\n";
  EXPECT_EQ(ld::job_token_from_environment("192.0.2.1", {{"LOCKSTEP_JOB_SECRET_FILE", secret}}),
            "s3cret-from-a-file");
  EXPECT_EQ(ld::job_token_from_environment(
                "192.0.2.1", {{"LOCKSTEP_JOB_SECRET_FILE", secret}, {"LOCKSTEP_JOB_TOKEN", "env"}}),
            "env");
  std::filesystem::remove(secret);
  try {
    ld::job_token_from_environment("127.0.0.1", {{"LOCKSTEP_JOB_SECRET_FILE", secret}});
    ADD_FAILURE() << "a missing secret file was accepted";
  } catch (const ld::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find(secret), std::string::npos) << e.what();
  }
}

#ifdef LOCKSTEP_HAVE_GLOO
// connect() off loopback without a token fails at once with the message, instead of exposing
// the store (worker 0) or timing out (the others).
TEST(StoreHardening, ConnectOffLoopbackWithoutATokenIsRefusedAtOnce) {
  NoTokenEnv env;
  ScopedEnv opt_out("LOCKSTEP_ALLOW_UNAUTHENTICATED", nullptr);
  const std::vector<std::string> workers = {"192.0.2.1:29500", "192.0.2.2:29501"};
  ld::CommunicationOptions options;
  options.timeout = 120s;  // refused at once: far sooner than this
  for (int rank : {0, 1}) {
    const auto start = std::chrono::steady_clock::now();
    try {
      ld::connect(ld::ClusterResolver::make(ld::ClusterResolver::Kind::kTfConfig, 2, rank,
                                            workers[0], workers, workers[rank].substr(0, 9)),
                  options);
      ADD_FAILURE() << "rank " << rank << " connected";
    } catch (const lockstep::Error& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_JOB_TOKEN"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              60.0);  // a hang guard: waiting for the timeout would take 120 s
  }
}

// Two workers with the same token in the environment connect and all-reduce.
TEST(StoreHardening, WorkersWithTheSameTokenConnect) {
  ScopedEnv token("LOCKSTEP_JOB_TOKEN", "shared-job-token-for-two-workers-03");
  ScopedEnv file("LOCKSTEP_JOB_SECRET_FILE", nullptr);
  const int p0 = ld::testing::free_port(), p1 = ld::testing::free_port();
  const std::vector<std::string> workers = {"127.0.0.1:" + std::to_string(p0),
                                            "127.0.0.1:" + std::to_string(p1)};
  ld::CommunicationOptions options;
  options.timeout = 10s;
  options.implementation = ld::CollectiveImplementation::kRing;
  auto resolver = [&](int rank) {
    return ld::ClusterResolver::make(ld::ClusterResolver::Kind::kTfConfig, 2, rank, workers[0],
                                     workers, "127.0.0.1");
  };
  std::vector<float> x1(5, 2.f);
  std::thread other([&] {
    auto c1 = ld::connect(resolver(1), options);
    c1->allreduce_sum(x1.data(), x1.size());
    c1->close();
  });
  auto c0 = ld::connect(resolver(0), options);
  std::vector<float> x0(5, 1.f);
  c0->allreduce_sum(x0.data(), x0.size());
  c0->close();
  other.join();
  EXPECT_EQ(x0, std::vector<float>(5, 3.f));
  EXPECT_EQ(x1, std::vector<float>(5, 3.f));
}
#else
TEST(StoreHardening, ConnectOffLoopbackWithoutATokenIsRefusedAtOnce) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
TEST(StoreHardening, WorkersWithTheSameTokenConnect) {
  GTEST_SKIP() << "Lockstep was built without Gloo (install libgloo-dev, reconfigure)";
}
#endif

// Issue 25, item 7: the handshake is bounded as a whole, not per read. A client dripping one
// byte of its hello every 100 ms never waits a whole per-read timeout, and used to hold its slot
// for as long as it liked; now it is cut once handshake_timeout has passed since it connected.
// (The 20 s below only guards against a hang; the bound itself is 500 ms.)
TEST(StoreHardening, ADrippingHandshakeIsCutAtTheDeadline) {
  ld::StoreServerOptions options;
  options.token = "token-for-the-drip-test-00000003";
  options.handshake_timeout = 500ms;
  ld::StoreServer server("127.0.0.1", 0, options);
  const int fd = raw_connect("127.0.0.1", server.port());
  ASSERT_GE(fd, 0);
  const Bytes hello = Bytes().op(9).str(std::string(1000, 'x'));
  bool cut = false;
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  for (size_t i = 0; i < hello.b.size() && std::chrono::steady_clock::now() < give_up; ++i) {
    if (::send(fd, &hello.b[i], 1, MSG_NOSIGNAL) != 1 || closed_by_server(fd, 100ms)) {
      cut = true;
      break;
    }
  }
  EXPECT_TRUE(cut) << "a client dripping its hello kept its connection";
  ::close(fd);
}

// When every slot is taken by connections that have not presented the token, the oldest is cut
// to let a new one in: strangers cannot keep a worker of the job out. Connections that did
// present it are never cut; a full store of members refuses newcomers at once.
TEST(StoreHardening, StrangersAreEvictedFirstWhenTheStoreIsFull) {
  ld::StoreServerOptions options;
  options.token = "token-for-the-eviction-test-0004";
  options.max_connections = 4;
  options.handshake_timeout = 60s;  // the strangers would hold their slots for a minute
  ld::StoreServer server("127.0.0.1", 0, options);
  std::vector<int> strangers;
  for (int i = 0; i < 4; ++i) {
    strangers.push_back(raw_connect("127.0.0.1", server.port()));
    ASSERT_GE(strangers.back(), 0);
  }
  std::vector<std::unique_ptr<ld::StoreClient>> members;
  for (int i = 0; i < 4; ++i) {
    members.push_back(
        std::make_unique<ld::StoreClient>("127.0.0.1", server.port(), 30s, options.token));
    members.back()->set("m" + std::to_string(i), "joined");
  }
  for (int fd : strangers) {
    EXPECT_TRUE(closed_by_server(fd, 20s)) << "a stranger kept its slot";
    ::close(fd);
  }
  // Full of members: a newcomer is closed at once and the members keep working.
  const int late = raw_connect("127.0.0.1", server.port());
  ASSERT_GE(late, 0);
  EXPECT_TRUE(closed_by_server(late, 20s));
  ::close(late);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(members[size_t(i)]->get_string("m0"), "joined");
}

// Issue 25 item 7: a real worker that cannot join because every slot is held by the job's
// members is told the store is full, not to check that worker 0 is running (the old
// "Connection refused" text pointed the wrong way).
TEST(StoreHardening, AWorkerShutOutOfAFullStoreIsToldItIsFull) {
  ld::StoreServerOptions options;
  options.token = "token-for-the-full-store-test-05";
  options.max_connections = 2;
  ld::StoreServer server("127.0.0.1", 0, options);
  std::vector<std::unique_ptr<ld::StoreClient>> members;
  for (int i = 0; i < 2; ++i) {
    members.push_back(
        std::make_unique<ld::StoreClient>("127.0.0.1", server.port(), 30s, options.token));
    members.back()->set("m" + std::to_string(i), "joined");
  }
  std::string error;
  try {
    ld::StoreClient late("127.0.0.1", server.port(), 1500ms, options.token);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_FALSE(error.empty()) << "a third client joined a store limited to 2 connections";
  EXPECT_NE(error.find("it is full"), std::string::npos) << error;
  EXPECT_NE(error.find("max_connections"), std::string::npos) << error;
  EXPECT_NE(error.find("not unreachable"), std::string::npos) << error;
  EXPECT_EQ(error.find("check that worker 0"), std::string::npos) << error;
  EXPECT_NE(error.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << error;
  for (int i = 0; i < 2; ++i) EXPECT_EQ(members[size_t(i)]->get_string("m1"), "joined");
}

// Without LOCKSTEP_JOB_TOKEN (loopback), idle connections that never sent a request held every
// slot until the job's timeout (about 1,100 did it at the default bound): a worker could not
// join. Now a connection without a token is a stranger until it completes a first request, so
// strangers are cut first when the store is full, and workers join and are never cut.
TEST(StoreHardening, IdleConnectionsWithoutATokenAreEvictedFirstWhenTheStoreIsFull) {
  NoTokenEnv env;
  ld::StoreServerOptions options;
  options.max_connections = 4;
  options.handshake_timeout = 60s;  // the idle ones would hold their slots for a minute
  ld::StoreServer server("127.0.0.1", 0, options);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(raw_connect("127.0.0.1", server.port()));
    ASSERT_GE(idle.back(), 0);
  }
  std::vector<std::unique_ptr<ld::StoreClient>> workers;
  for (int i = 0; i < 4; ++i) {
    workers.push_back(std::make_unique<ld::StoreClient>("127.0.0.1", server.port(), 5s));
    workers.back()->set("w" + std::to_string(i), "joined");
  }
  for (int fd : idle) {
    EXPECT_TRUE(closed_by_server(fd, 20s)) << "an idle connection kept its slot";
    ::close(fd);
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(workers[size_t(i)]->get_string("w3"), "joined");
}

// One peer address holds at most max_strangers_per_peer connections that have not shown they
// belong to the job: past it, that peer's oldest is cut (so one host cannot hold the slots).
TEST(StoreHardening, StrangersPerPeerAreBounded) {
  NoTokenEnv env;
  ld::StoreServerOptions options;
  options.max_connections = 64;
  options.max_strangers_per_peer = 3;
  options.handshake_timeout = 60s;
  ld::StoreServer server("127.0.0.1", 0, options);
  std::vector<int> idle;
  for (int i = 0; i < 5; ++i) {
    idle.push_back(raw_connect("127.0.0.1", server.port()));
    ASSERT_GE(idle.back(), 0);
  }
  // The fifth accept cuts the second: then all five were accepted and the newest three kept.
  EXPECT_TRUE(closed_by_server(idle[0], 20s)) << "the oldest of 5 strangers from one peer stayed";
  EXPECT_TRUE(closed_by_server(idle[1], 20s));
  for (size_t i = 2; i < 5; ++i) EXPECT_FALSE(closed_by_server(idle[i], 200ms)) << i;
  // A worker from the same peer joins (its connection cuts the oldest stranger left) and works.
  ld::StoreClient worker("127.0.0.1", server.port(), 5s);
  worker.set("k", "v");
  EXPECT_EQ(worker.get_string("k"), "v");
  EXPECT_TRUE(closed_by_server(idle[2], 20s));
  for (int fd : idle) ::close(fd);
}
