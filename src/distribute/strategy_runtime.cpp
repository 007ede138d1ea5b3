// Strategy run time: replica threads with their own OpenMP teams, the communicators (in-process
// group for local replicas, Gloo/MPI across workers) and the bucketed gradient all-reduce.
#include "distribute/internal/strategy_runtime.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "lockstep/core/thread_pool.h"
#include "lockstep/graph/op_ids.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace lockstep::distribute {

// ----------------------------------------------------------------------------- ReplicaThreads

ReplicaThreads::ReplicaThreads(int replicas, int threads_per_replica,
                               std::vector<std::vector<int>> cores)
    : errors_(size_t(replicas)),
      threads_per_replica_(threads_per_replica),
      cores_(std::move(cores)) {
  for (int r = 0; r < replicas; ++r) threads_.emplace_back([this, r] { loop(r); });
}

ReplicaThreads::~ReplicaThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaThreads::loop(int r) {
  if (!cores_.empty() && !cores_[size_t(r)].empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cores_[size_t(r)]) CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
  }
#ifdef _OPENMP
  omp_set_num_threads(threads_per_replica_);  // this thread's team only
#endif
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    std::exception_ptr error;
    try {
      (*fn)(r);
    } catch (...) {
      error = std::current_exception();
      std::string reason = "replica " + std::to_string(r) + " failed";
      try {
        throw;
      } catch (const std::exception& e) {
        reason += ": " + std::string(e.what());
      } catch (...) {
      }
      if (on_error_) on_error_(reason);
    }
    std::lock_guard<std::mutex> lock(mu_);
    errors_[size_t(r)] = error;
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void ReplicaThreads::run(const std::function<void(int)>& fn,
                         const std::function<void(const std::string&)>& on_error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    on_error_ = on_error;
    pending_ = int(threads_.size());
    for (auto& e : errors_) e = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  // The root cause first: a replica whose error is not the abort the others saw.
  std::exception_ptr first;
  for (auto& e : errors_) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const PeerLostError&) {
      if (!first) first = e;
    } catch (const CollectiveError&) {
      if (!first) first = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first) std::rethrow_exception(first);
}

// ----------------------------------------------------------------------------- LocalExchange

LocalExchange::LocalExchange(int replicas, std::chrono::milliseconds timeout)
    : n_(replicas), timeout_(timeout), rounds_(size_t(replicas)), arrived_(size_t(replicas)) {
  for (auto& parity : slots_) parity.resize(size_t(replicas));
  for (auto& parity : views_) parity.resize(size_t(replicas));
  for (auto& a : arrived_) a.store(0, std::memory_order_relaxed);
}

void LocalExchange::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return;
  reason_ = reason;
  aborted_.store(true, std::memory_order_release);
}

// Spins (pause, then yield) until every replica published round `round`.
void LocalExchange::wait_for_all(uint64_t round) {
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < n_; ++r) {
    for (uint64_t spins = 0; arrived_[size_t(r)].load(std::memory_order_acquire) < round; ++spins) {
      if (aborted_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(mu_);
        throw CollectiveError("synchronized batch norm: a replica failed (" + reason_ +
                              "), so the exchange between replicas was aborted");
      }
      if (spins < 2048) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      std::this_thread::yield();
      if ((spins & 1023) == 0 && std::chrono::steady_clock::now() - start > timeout_)
        throw PeerLostError("synchronized batch norm: replica " + std::to_string(r) +
                                " did not reach the exchange within " +
                                std::to_string(timeout_.count()) +
                                " ms (CommunicationOptions::timeout)",
                            r, "thread");
    }
  }
}

const double* const* LocalExchange::gather(int replica, const double* mine, size_t n) {
  const uint64_t round = ++rounds_[size_t(replica)];
  const int parity = int(round & 1);
  auto& slot = slots_[parity][size_t(replica)];
  slot.assign(mine, mine + n);  // (no allocation once a slot held the largest n)
  views_[parity][size_t(replica)] = slot.data();
  arrived_[size_t(replica)].store(round, std::memory_order_release);
  if (n_ > 1) wait_for_all(round);
  return views_[parity].data();
}

// ----------------------------------------------------------------------------- devices

std::vector<std::vector<int>> device_cores(const std::vector<std::string>& devices) {
  int n = int(std::thread::hardware_concurrency());
  if (n < 1) n = 1;
  const int d = int(devices.size());
  std::vector<std::vector<int>> out;
  for (int k = 0; k < d; ++k) {
    std::vector<int> cores;
    if (d <= n) {
      for (int c = k * n / d; c < (k + 1) * n / d; ++c) cores.push_back(c);
    } else {
      cores.push_back(k % n);
    }
    out.push_back(cores);
  }
  return out;
}

// ----------------------------------------------------------------------------- StrategyImpl

StrategyImpl::StrategyImpl(std::string name_, std::vector<std::string> devices_,
                           StrategyOptions options_, const ClusterResolver& resolver_,
                           bool connect_workers)
    : name(std::move(name_)), devices(std::move(devices_)), options(options_), resolver(resolver_) {
  LS_CHECK(!devices.empty(), name, ": needs at least one device");
  for (auto& dev : devices)
    LS_CHECK(dev.rfind("cpu:", 0) == 0 && dev.size() > 4 &&
                 dev.find_first_not_of("0123456789", 4) == std::string::npos,
             name, ": unknown device '", dev,
             "' (this build has CPU devices \"cpu:0\", \"cpu:1\", ...)");
  local_replicas = int(devices.size());
  LS_CHECK(options.all_reduce_dtype == DType::f32 || options.all_reduce_dtype == DType::bf16, name,
           ": StrategyOptions::all_reduce_dtype is ", dtype_name(options.all_reduce_dtype),
           "; the gradient all-reduce runs in float32 or bfloat16 (DType::f32 or DType::bf16)");
  if (connect_workers) {
    num_workers = resolver.num_workers();
    worker_index = resolver.task_index();
    if (num_workers > 1) global_ = connect(resolver, options.communication);
  }
  if (local_replicas > 1)
    local_ = make_in_process_communicators(local_replicas, options.communication);
  exchange_ = std::make_unique<LocalExchange>(local_replicas, options.communication.timeout);
  for (int r = 0; r < local_replicas; ++r) {
    Communicator* c = local_replicas > 1 ? local_[size_t(r)].get() : global_.get();
    if (c) async_.push_back(std::make_unique<AsyncCollectives>(*c));
  }
  if (local_replicas > 1) {
    const int per = options.threads_per_replica > 0 ? options.threads_per_replica
                                                    : std::max(1, num_threads() / local_replicas);
    replica_threads = per;
    threads_ = std::make_unique<ReplicaThreads>(
        local_replicas, per,
        options.pin_threads ? device_cores(devices) : std::vector<std::vector<int>>{});
  }
}

StrategyImpl::~StrategyImpl() {
  async_.clear();
  threads_.reset();
}

void StrategyImpl::abort(const std::string& reason) {
  exchange_->abort(reason);
  for (auto& c : local_) c->abort(reason);
}

void StrategyImpl::run_replicas(const std::function<void(int)>& fn) {
  if (!threads_) {
    fn(0);
    return;
  }
  threads_->run(fn, [this](const std::string& reason) { abort(reason); });
}

// The sum across workers: bf16 on the wire for gradient buckets when the options ask for it.
static void reduce_workers(Communicator& c, float* data, size_t count, bool bf16) {
  const FloatBuffer buffer{data, count};
  if (bf16)
    c.allreduce_sum_bf16(std::span<const FloatBuffer>(&buffer, 1));
  else
    c.allreduce_sum(data, count);
}

void StrategyImpl::reduce_bucket(int replica, float* data, size_t count, bool bf16) {
  if (local_replicas > 1) {
    local_[size_t(replica)]->allreduce_sum(data, count);
    if (global_ && replica == 0) reduce_workers(*global_, data, count, bf16);
    if (global_) local_[size_t(replica)]->broadcast(data, count, 0);
  } else if (global_) {
    reduce_workers(*global_, data, count, bf16);
  }
}

std::future<void> StrategyImpl::start_allreduce(int replica, float* data, size_t count,
                                                bool gradient) {
  if (async_.empty()) {
    std::promise<void> p;
    p.set_value();
    return p.get_future();
  }
  const bool bf16 = gradient && options.all_reduce_dtype == DType::bf16;
  if (local_replicas == 1 && !bf16) return async_[0]->allreduce_sum({FloatBuffer{data, count}});
  return async_[size_t(replica)]->submit([this, replica, data, count, bf16](Communicator&) {
    reduce_bucket(replica, data, count, bf16);
  });
}

void StrategyImpl::allreduce_now(int replica, float* data, size_t count) {
  start_allreduce(replica, data, count).get();
}

void StrategyImpl::allreduce_workers(double* data, size_t count) {
  if (global_) global_->allreduce_sum(data, count);
}

void StrategyImpl::broadcast_from_chief(float* data, size_t count) {
  if (global_) global_->broadcast(data, count, 0);
}

std::vector<std::string> StrategyImpl::allgather_workers(const std::string& bytes) {
  if (!global_) return {bytes};
  std::vector<std::string> out;
  for (auto& part : global_->allgather_bytes(bytes.data(), bytes.size()))
    out.emplace_back(part.begin(), part.end());
  return out;
}

// ----------------------------------------------------------------------------- GradientReducer

namespace {
std::mutex g_reducers_mu;
std::map<int64_t, GradientReducer*>& reducers() {
  static std::map<int64_t, GradientReducer*> m;
  return m;
}
std::atomic<int64_t> g_next_group{1};
}  // namespace

GradientReducer::GradientReducer(StrategyImpl& strategy)
    : strategy_(strategy), group_(g_next_group++) {
  weights_.assign(size_t(strategy.local_replicas), 1.f / float(strategy.replicas_in_sync()));
  pending_.resize(size_t(strategy.local_replicas));
  started_.resize(size_t(strategy.local_replicas));
  std::lock_guard<std::mutex> lock(g_reducers_mu);
  reducers()[group_] = this;
  ReplicaExchange::set(group_, this);
}

GradientReducer::~GradientReducer() {
  for (auto& per : pending_)
    for (auto& f : per)
      if (f.valid()) f.wait();
  ReplicaExchange::set(group_, nullptr);
  std::lock_guard<std::mutex> lock(g_reducers_mu);
  reducers().erase(group_);
}

GradientReducer* GradientReducer::lookup(int64_t group) {
  std::lock_guard<std::mutex> lock(g_reducers_mu);
  auto it = reducers().find(group);
  LS_CHECK(it != reducers().end(), "all_reduce: gradient reducer ", group,
           " no longer exists (the strategy or model was destroyed)");
  return it->second;
}

std::vector<Value> GradientReducer::insert(Graph& g, const std::vector<Value>& grads, int replica,
                                           Value loss, Value* nonfinite,
                                           std::vector<Value>* started) {
  // Gradients in the order backward produces them (their node index).
  std::vector<size_t> order;
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i].valid()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return grads[a].node < grads[b].node; });
  const int64_t pack = strategy_.options.bytes_per_pack;
  std::vector<std::vector<size_t>> buckets;
  int64_t bytes = 0;
  for (size_t i : order) {
    if (buckets.empty() || (pack > 0 && bytes >= pack)) buckets.emplace_back(), bytes = 0;
    buckets.back().push_back(i);
    bytes += g.type(grads[i]).shape.numel() * 4;
  }
  LS_CHECK(num_buckets_ < 0 || num_buckets_ == int(buckets.size()),
           "all_reduce: programs of one model disagree on the gradient buckets");
  num_buckets_ = int(buckets.size());
  for (auto& p : pending_) p.resize(buckets.size());
  for (auto& s : started_) s.resize(buckets.size());
  set_shards_per_replica(shards_);  // (sizes the shard buckets)
  std::vector<Value> out = grads;
  for (int b = 0; b < int(buckets.size()); ++b) {
    std::vector<Value> ins;
    for (size_t i : buckets[size_t(b)]) {
      LS_CHECK(g.type(grads[i]).dtype == DType::f32, "all_reduce: gradients must be float32");
      ins.push_back(grads[i]);
    }
    const bool flag = b + 1 == int(buckets.size()) && loss.valid();
    const size_t num_grads = ins.size();
    if (flag) ins.push_back(loss);
    Attrs a{{"group", group_},
            {"bucket", int64_t(b)},
            {"replica", int64_t(replica)},
            {"schedule_early", true},
            {"nonfinite_flag", flag}};
    Value packed = g.add(op::all_reduce_start, ins, a, "all_reduce/bucket_" + std::to_string(b));
    if (started) {
      started->push_back(packed);
      continue;
    }
    Attrs w{{"group", group_},
            {"bucket", int64_t(b)},
            {"replica", int64_t(replica)},
            {"nonfinite_flag", flag}};
    std::vector<int64_t> shapes_flat, ranks;
    for (size_t k = 0; k < num_grads; ++k) {
      const Value v = ins[k];
      const Shape& s = g.type(v).shape;
      ranks.push_back(s.rank());
      for (int d = 0; d < s.rank(); ++d) shapes_flat.push_back(s[d]);
    }
    w.set("ranks", ranks);
    w.set("shapes", shapes_flat);
    auto reduced =
        g.add_multi(op::all_reduce_wait, {packed}, w, "all_reduce/wait_" + std::to_string(b));
    for (size_t k = 0; k < buckets[size_t(b)].size(); ++k) out[buckets[size_t(b)][k]] = reduced[k];
    if (flag && nonfinite) *nonfinite = reduced.back();
  }
  return out;
}

void GradientReducer::set_shards_per_replica(int k) {
  LS_CHECK(k >= 1, "GradientReducer: shards per replica must be >= 1, got ", k);
  shards_ = k;
  shard_buckets_.resize(size_t(strategy_.local_replicas));
  for (auto& per_replica : shard_buckets_) {
    per_replica.resize(size_t(std::max(num_buckets_, 0)));
    for (auto& shards : per_replica) shards.resize(size_t(k - 1));
  }
}

namespace {

// out[0..len) = the sum of parts[a..b) at offset `at`, as a balanced binary tree in part order:
// sum(a, b) = sum(a, m) + sum(m, b), m = a + (b - a) / 2. out may be the last part's own
// memory (the right half is summed first, into a scratch block).
void tree_sum(const std::vector<const float*>& parts, int a, int b, size_t at, size_t len,
              float* out) {
  if (b - a == 1) {
    if (out != parts[size_t(a)] + at) std::memcpy(out, parts[size_t(a)] + at, len * sizeof(float));
    return;
  }
  const int m = a + (b - a) / 2;
  float right[512];
  tree_sum(parts, m, b, at, len, right);
  tree_sum(parts, a, m, at, len, out);
  for (size_t i = 0; i < len; ++i) out[i] += right[i];
}

}  // namespace

void GradientReducer::start(int replica, int bucket, float* data, size_t count) {
  const int local = strategy_.local_replicas;
  if (shards_ > 1 && replica >= local) {  // an earlier shard: keep its bucket for the last one
    const int owner = (replica - local) / (shards_ - 1), shard = (replica - local) % (shards_ - 1);
    shard_buckets_.at(size_t(owner))
        .at(size_t(bucket))
        .at(size_t(shard))
        .assign(data, data + count);
    return;
  }
  if (shards_ > 1) {  // the last shard: the replica's shards summed in the fixed order
    std::vector<const float*> parts;
    for (auto& kept : shard_buckets_.at(size_t(replica)).at(size_t(bucket))) {
      LS_CHECK(kept.size() == count, "all_reduce: shard bucket ", bucket, " of replica ", replica,
               " has ", kept.size(), " values, expected ", count);
      parts.push_back(kept.data());
    }
    parts.push_back(data);
    for (size_t at = 0; at < count; at += 512)
      tree_sum(parts, 0, int(parts.size()), at, std::min<size_t>(512, count - at), data + at);
  }
  started_[size_t(replica)][size_t(bucket)] = std::chrono::steady_clock::now();
  pending_[size_t(replica)][size_t(bucket)] =
      strategy_.start_allreduce(replica, data, count, /*gradient=*/true);
}

void GradientReducer::sum_now(int replica, float* data, size_t count) {
  strategy_.allreduce_now(replica, data, count);
}

void GradientReducer::wait(int replica, int bucket) {
  auto& f = pending_[size_t(replica)][size_t(bucket)];
  LS_CHECK(f.valid(), "all_reduce_wait: bucket ", bucket, " was never started");
  auto t0 = std::chrono::steady_clock::now();
  f.get();
  if (replica == 0) {
    auto t1 = std::chrono::steady_clock::now();
    wait_seconds_ += std::chrono::duration<double>(t1 - t0).count();
    reduce_seconds_ += std::chrono::duration<double>(t1 - started_[0][size_t(bucket)]).count();
  }
}

}  // namespace lockstep::distribute
