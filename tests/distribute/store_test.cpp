// Rendezvous store: set/get/wait/add/check across clients, timeouts that name what is missing,
// lost-rank tracking, unreachable server.
#include "lockstep/distribute/store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "lockstep/distribute/collective.h"

namespace ld = lockstep::distribute;
using namespace std::chrono_literals;

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

TEST(Store, SetGetAddCheckBetweenClients) {
  ld::StoreServer server("127.0.0.1", 0);
  ASSERT_GT(server.port(), 0);
  ld::StoreClient a("127.0.0.1", server.port(), 5s), b("127.0.0.1", server.port(), 5s);
  EXPECT_FALSE(b.check("k"));
  a.set("k", "hello");
  EXPECT_TRUE(b.check("k"));
  EXPECT_EQ(b.get_string("k"), "hello");
  std::vector<char> binary = {0, 1, 2, char(255)};
  b.set("bin", binary);
  EXPECT_EQ(a.get("bin"), binary);
  EXPECT_EQ(a.add("counter", 1), 1);
  EXPECT_EQ(b.add("counter", 5), 6);
  EXPECT_EQ(a.add("counter", -2), 4);
  a.set("k", "overwritten");
  EXPECT_EQ(b.get_string("k"), "overwritten");
}

TEST(Store, GetAndWaitBlockUntilAnotherClientSets) {
  ld::StoreServer server("127.0.0.1", 0);
  ld::StoreClient a("127.0.0.1", server.port(), 5s);
  std::thread writer([&] {
    ld::StoreClient b("127.0.0.1", server.port(), 5s);
    std::this_thread::sleep_for(50ms);
    b.set("x", "1");
    std::this_thread::sleep_for(20ms);
    b.set("y", "2");
  });
  a.wait({"x", "y"});
  // Returned because both keys are there (not a timing check: a loaded machine can stretch
  // or shrink any interval measured here).
  EXPECT_TRUE(a.wait_missing({"x", "y"}, 1ms).empty());
  EXPECT_EQ(a.get_string("y"), "2");
  writer.join();
}

TEST(Store, WaitTimeoutNamesMissingKeys) {
  ld::StoreServer server("127.0.0.1", 0);
  ld::StoreClient a("127.0.0.1", server.port(), 200ms);
  a.set("present", "1");
  try {
    a.wait({"present", "absent1", "absent2"});
    FAIL() << "wait should time out";
  } catch (const ld::CollectiveError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("absent1, absent2"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("present,"), std::string::npos) << msg;
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << msg;
  }
  EXPECT_EQ(a.wait_missing({"present", "nope"}, 10ms), std::vector<std::string>{"nope"});
  EXPECT_THROW(a.get("never"), ld::CollectiveError);
}

TEST(Store, UnreachableServerFailsWithinTimeoutNamingAddress) {
  int port;
  {
    ld::StoreServer probe("127.0.0.1", 0);  // find a port that is free once closed
    port = probe.port();
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    ld::StoreClient c("127.0.0.1", port, 300ms);
    FAIL() << "connect should fail";
  } catch (const ld::PeerLostError& e) {
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("worker 0"), std::string::npos) << e.what();
  }
  // It tried until its deadline (a lower bound a loaded machine cannot break); the upper bound
  // is only a hang guard, 100 times the timeout.
  const double s = seconds_since(start);
  EXPECT_GE(s, 0.25);
  EXPECT_LT(s, 30.0);
}

TEST(Store, ClientConnectsToServerThatStartsLater) {
  int port;
  {
    ld::StoreServer probe("127.0.0.1", 0);
    port = probe.port();
  }
  std::unique_ptr<ld::StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(150ms);
    server = std::make_unique<ld::StoreServer>("127.0.0.1", port);
  });
  ld::StoreClient c("127.0.0.1", port, 5s);
  starter.join();
  c.set("a", "b");
  EXPECT_EQ(c.get_string("a"), "b");
}

TEST(Store, LostRanksAreThoseThatDisconnectWithoutGoodbye) {
  ld::StoreServer server("127.0.0.1", 0);
  ld::StoreClient observer("127.0.0.1", server.port(), 5s);
  {
    ld::StoreClient polite("127.0.0.1", server.port(), 5s);
    polite.register_rank(1);
  }  // says goodbye
  EXPECT_TRUE(observer.lost_ranks(50ms).empty());
  // A client that dies: close its socket without the goodbye, in a child process.
  const pid_t pid = fork();
  if (pid == 0) {
    ld::StoreClient dying("127.0.0.1", server.port(), 5s);
    dying.register_rank(3);
    _exit(0);  // no destructor: the kernel closes the socket
  }
  ASSERT_GT(pid, 0);
  const auto lost = observer.lost_ranks(3s);
  EXPECT_EQ(lost, std::vector<int>{3});
  int status = 0;
  waitpid(pid, &status, 0);
}

TEST(Store, ListenOnBusyPortExplainsWhat) {
  ld::StoreServer server("127.0.0.1", 0);
  try {
    ld::StoreServer second("127.0.0.1", server.port());
    // SO_REUSEADDR does not allow two listeners: must throw.
    FAIL() << "second listener on the same port";
  } catch (const ld::CollectiveError& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(server.port())),
        std::string::npos)
        << e.what();
  }
}
