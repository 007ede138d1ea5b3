// A fixed-size worker pool for host-side work (the input pipeline). Compute kernels use
// oneDNN's OpenMP runtime instead, so the two never oversubscribe the cores.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace lockstep {

/// A pool of `num_threads` worker threads running submitted tasks in FIFO order.
class ThreadPool {
 public:
  /// Starts `num_threads` workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  ///< finishes queued work, joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()); }  ///< the number of workers
  /// Queues `task`; the future is ready (or holds its exception) when it has run.
  std::future<void> submit(std::function<void()> task);
  /// Runs fn(i) for i in [0, n) across the pool and the calling thread; rethrows the first error.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);
  static ThreadPool& shared();  ///< process-wide pool sized to hardware_concurrency

 private:
  void loop();
  std::vector<std::thread> workers_;
  std::deque<std::packaged_task<void()>> queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

/// Threads used by compute kernels (OpenMP + oneDNN). 0 = leave the runtime default.
void set_num_threads(int n);
/// The threads compute kernels use (the OpenMP runtime's maximum).
int num_threads();

}  // namespace lockstep
