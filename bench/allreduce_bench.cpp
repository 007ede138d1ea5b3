// All-reduce bus bandwidth, 2 workers over loopback: Lockstep's Communicator against the
// engines' own all-reduce (Gloo's algorithm classes called directly; MPI_Allreduce under
// mpirun). Medians of several iterations per size; a table, then one JSON line.
//   build/bin/allreduce_bench [--iterations N] [--sizes-mib 1,4,16,64] [--no-mpi]
// Bus bandwidth = 2 (n-1)/n * bytes / seconds (the NCCL-tests convention; = bytes/s for n=2).
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../src/distribute/raw_engine.h"
#include "lockstep/distribute/collective.h"

namespace ld = lockstep::distribute;
using Impl = ld::CollectiveImplementation;

namespace {

constexpr int kWorkers = 2;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int free_port() {
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

ld::ClusterResolver loopback(int rank, int port) {
  std::vector<std::string> workers;
  for (int r = 0; r < kWorkers; ++r) workers.push_back("127.0.0.1:" + std::to_string(port + r));
  return ld::ClusterResolver::make(ld::ClusterResolver::Kind::kTfConfig, kWorkers, rank, workers[0],
                                   workers, "127.0.0.1");
}

int iterations_for(size_t mib, int requested) {
  return requested > 0 ? requested : (mib <= 4 ? 15 : mib <= 16 ? 9 : 5);
}

// One result line: "<engine> <implementation> <mib> <median seconds>".
using Results = std::map<std::string, double>;  // key "engine/impl/mib"

std::string key(const std::string& engine, const std::string& impl, size_t mib) {
  return engine + "/" + impl + "/" + std::to_string(mib);
}

// Runs in a forked worker: ours and raw Gloo for every size; rank 0 writes lines to `out_fd`.
int gloo_worker(int rank, Impl impl, const std::vector<size_t>& sizes, int requested_iters,
                const std::vector<int>& ports, int out_fd) {
  std::ostringstream lines;
  const ld::CommunicationOptions options{.timeout = std::chrono::seconds(60),
                                         .implementation = impl};
  size_t port_index = 0;
  {
    auto comm = ld::connect(loopback(rank, ports[port_index++]), options);
    for (size_t mib : sizes) {
      const size_t count = mib * (1 << 20) / sizeof(float);
      std::vector<float> data(count, 1.0f);
      const int iters = iterations_for(mib, requested_iters);
      for (int i = 0; i < 2; ++i) comm->allreduce_sum(data.data(), count);
      std::vector<double> seconds;
      for (int i = 0; i < iters; ++i) {
        const auto start = std::chrono::steady_clock::now();
        comm->allreduce_sum(data.data(), count);
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      lines << "lockstep " << ld::to_string(impl) << " " << mib << " " << median(seconds) << "\n";
    }
  }
  for (size_t mib : sizes) {
    const size_t count = mib * (1 << 20) / sizeof(float);
    std::vector<float> data(count, 1.0f);
    const auto seconds = ld::detail::raw_gloo_allreduce_seconds(
        loopback(rank, ports[port_index++]), options, data.data(), count, 2,
        iterations_for(mib, requested_iters));
    lines << "gloo_raw " << ld::to_string(impl) << " " << mib << " " << median(seconds) << "\n";
  }
  if (rank == 0) {
    const std::string text = lines.str();
    (void)!::write(out_fd, text.data(), text.size());
  }
  return 0;
}

void parse_lines(const std::string& text, Results& results) {
  std::istringstream in(text);
  std::string engine, impl;
  size_t mib;
  double seconds;
  while (in >> engine >> impl >> mib >> seconds) results[key(engine, impl, mib)] = seconds;
}

bool run_gloo(Impl impl, const std::vector<size_t>& sizes, int iters, Results& results) {
  std::vector<int> ports;
  for (size_t i = 0; i < sizes.size() + 1; ++i) ports.push_back(free_port());
  int fds[2];
  if (::pipe(fds) != 0) return false;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorkers; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      int code = 1;
      try {
        code = gloo_worker(rank, impl, sizes, iters, ports, fds[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "worker %d: %s\n", rank, e.what());
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t k;
  while ((k = ::read(fds[0], buf, sizeof buf)) > 0) text.append(buf, size_t(k));
  ::close(fds[0]);
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  parse_lines(text, results);
  return ok;
}

// Under mpirun: raw MPI_Allreduce and Lockstep's MPI communicator; rank 0 prints lines.
int mpi_worker(const std::vector<size_t>& sizes, int requested_iters) {
  auto comm = ld::connect(ld::ClusterResolver::from_environment(), {.implementation = Impl::kMpi});
  std::ostringstream lines;
  for (size_t mib : sizes) {
    const size_t count = mib * (1 << 20) / sizeof(float);
    std::vector<float> data(count, 1.0f);
    const int iters = iterations_for(mib, requested_iters);
    const auto raw = ld::detail::raw_mpi_allreduce_seconds(data.data(), count, 2, iters);
    for (int i = 0; i < 2; ++i) comm->allreduce_sum(data.data(), count);
    std::vector<double> ours;
    for (int i = 0; i < iters; ++i) {
      const auto start = std::chrono::steady_clock::now();
      comm->allreduce_sum(data.data(), count);
      ours.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    lines << "mpi_raw mpi " << mib << " " << median(raw) << "\n";
    lines << "lockstep mpi " << mib << " " << median(ours) << "\n";
  }
  if (comm->rank() == 0) std::printf("%s", lines.str().c_str());
  return 0;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : "allreduce_bench";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {1, 4, 16, 64};
  int iters = 0;
  bool with_mpi = true, mpi_worker_mode = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--iterations" && i + 1 < argc) {
      iters = std::stoi(argv[++i]);
    } else if (flag == "--sizes-mib" && i + 1 < argc) {
      sizes.clear();
      std::istringstream in(argv[++i]);
      std::string item;
      while (std::getline(in, item, ',')) sizes.push_back(std::stoul(item));
    } else if (flag == "--no-mpi") {
      with_mpi = false;
    } else if (flag == "--mpi-worker") {
      mpi_worker_mode = true;
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--sizes-mib 1,4,16,64] [--no-mpi]\n",
                   argv[0]);
      return 2;
    }
  }
  if (mpi_worker_mode) return mpi_worker(sizes, iters);

  Results results;
  bool ok = true;
  for (Impl impl : {Impl::kRing, Impl::kHalvingDoubling})
    ok = run_gloo(impl, sizes, iters, results) && ok;
  bool mpi_ran = false;
#ifdef LOCKSTEP_HAVE_MPI
  if (with_mpi && std::system("command -v mpirun > /dev/null 2>&1") == 0) {
    std::string command = "mpirun --allow-run-as-root --oversubscribe -np 2 " + self_path() +
                          " --mpi-worker --sizes-mib ";
    for (size_t i = 0; i < sizes.size(); ++i) command += (i ? "," : "") + std::to_string(sizes[i]);
    if (iters > 0) command += " --iterations " + std::to_string(iters);
    if (FILE* pipe = ::popen(command.c_str(), "r")) {
      std::string text;
      char buf[4096];
      size_t k;
      while ((k = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, k);
      mpi_ran = ::pclose(pipe) == 0;
      parse_lines(text, results);
    }
  }
#endif
  auto busbw = [&](size_t mib, double seconds) {
    const double bytes = double(mib) * (1 << 20);
    return seconds > 0 ? 2.0 * (kWorkers - 1) / kWorkers * bytes / seconds / 1e9 : 0.0;
  };
  std::printf("all-reduce, %d workers over loopback, bus bandwidth GB/s (median ms)\n", kWorkers);
  std::printf("%-10s %-18s %-18s %-18s %-18s %-18s %-18s\n", "size", "lockstep ring",
              "gloo raw ring", "lockstep hd", "gloo raw hd", "lockstep mpi", "mpi raw");
  std::string json =
      "{\"bench\": \"allreduce\", \"workers\": 2, \"transport\": \"loopback\", "
      "\"unit\": \"busbw_GBps\", \"results\": [";
  const std::pair<const char*, const char*> columns[] = {{"lockstep", "ring"},
                                                         {"gloo_raw", "ring"},
                                                         {"lockstep", "halving_doubling"},
                                                         {"gloo_raw", "halving_doubling"},
                                                         {"lockstep", "mpi"},
                                                         {"mpi_raw", "mpi"}};
  for (size_t s = 0; s < sizes.size(); ++s) {
    const size_t mib = sizes[s];
    std::printf("%-10s", (std::to_string(mib) + " MiB").c_str());
    json += std::string(s ? ", " : "") + "{\"size_mib\": " + std::to_string(mib);
    for (const auto& [engine, impl] : columns) {
      auto it = results.find(key(engine, impl, mib));
      if (it == results.end()) {
        std::printf(" %-18s", "-");
        continue;
      }
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.2f (%.1f ms)", busbw(mib, it->second), it->second * 1e3);
      std::printf(" %-18s", cell);
      char field[96];
      std::snprintf(field, sizeof field, ", \"%s_%s\": %.3f", engine, impl, busbw(mib, it->second));
      json += field;
    }
    std::printf("\n");
    json += "}";
  }
  json += "], \"mpi\": " + std::string(mpi_ran ? "true" : "false") + "}";
  if (!ok) std::fprintf(stderr, "some Gloo workers failed; see the messages above\n");
  std::printf("%s\n", json.c_str());
  return ok ? 0 : 1;
}
