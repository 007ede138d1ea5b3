// Helpers for multi-process collective tests: run a function in forked worker processes,
// collect their exit codes and messages, pick free TCP ports.
#pragma once
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace lockstep::distribute::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct WorkerResult {
  int exit_code = -1;  // -1: killed by the parent (took too long) or by a signal
  std::string message;
  double seconds = 0;  // from fork to exit
};

// Forks one child per rank; child r runs body(r, message) and exits with its return value
// (an uncaught exception exits 99 with what() as the message). Children still running after
// `limit` are killed: a hang guard only, generous so that a busy machine never reaches it.
inline std::vector<WorkerResult> run_workers(
    int n, const std::function<int(int rank, std::string& message)>& body,
    std::chrono::milliseconds limit = std::chrono::seconds(120)) {
  struct Child {
    pid_t pid;
    int pipe_fd;
  };
  std::vector<Child> children;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) return {};
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      std::string message;
      int code = 0;
      try {
        code = body(r, message);
      } catch (const std::exception& e) {
        message = e.what();
        code = 99;
      }
      (void)!::write(fds[1], message.data(), message.size());
      ::close(fds[1]);
      ::_exit(code);
    }
    ::close(fds[1]);
    children.push_back({pid, fds[0]});
  }
  std::vector<WorkerResult> results(n);
  std::vector<bool> done(n, false);
  int remaining = n;
  while (remaining > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (::waitpid(children[r].pid, &status, WNOHANG) == children[r].pid) {
        done[r] = true;
        --remaining;
        results[r].seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        char buf[4096];
        ssize_t k;
        while ((k = ::read(children[r].pipe_fd, buf, sizeof buf)) > 0) {
          results[r].message.append(buf, size_t(k));
        }
        ::close(children[r].pipe_fd);
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() - start > limit) {
      for (int r = 0; r < n; ++r) {
        if (!done[r]) ::kill(children[r].pid, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return results;
}

}  // namespace lockstep::distribute::testing

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

namespace lockstep::distribute::testing {

// Runs a shell command, returns its exit status (-1 if it could not run) and fills `output`
// with stdout and stderr.
inline int run_command(const std::string& command, std::string* output = nullptr) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::string text;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, k);
  const int status = ::pclose(pipe);
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The collective_worker example next to the test binary, or "" when it was not built.
inline std::string collective_worker_path() {
#ifdef LOCKSTEP_BINARY_DIR
  const std::string path = std::string(LOCKSTEP_BINARY_DIR) + "/bin/collective_worker";
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return path;
#endif
  return "";
}

inline int count_occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace lockstep::distribute::testing
