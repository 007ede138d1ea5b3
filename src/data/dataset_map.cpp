// map: sequential, or parallel on the pipeline pool with in-order (default) or out-of-order
// results and an autotuned number of calls in flight.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "data/dataset_node.h"

namespace lockstep::data {

namespace {

class MapNode : public DatasetNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(MapNode)
  MapNode(NodePtr in, MapFnWithContext fn, MapOptions opts)
      : input_(std::move(in)),
        fn_(std::make_shared<const MapFnWithContext>(std::move(fn))),
        opts_(std::move(opts)) {}

  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::optional<ElementSpec> spec() const override { return opts_.output_spec; }
  std::string label() const override {
    // The parallelism is left out on purpose: it does not change the elements, so a file cache
    // stays valid when only the thread count changes.
    return "map(" + opts_.name + ", seed=" + std::to_string(opts_.seed) + ")";
  }
  std::vector<NodePtr> inputs() const override { return {input_}; }

  NodePtr input_;
  std::shared_ptr<const MapFnWithContext> fn_;
  MapOptions opts_;
};

std::string where(const MapNode& n, int64_t index) {
  return "map(" + n.opts_.name + "): element " + std::to_string(index);
}

// ----- sequential --------------------------------------------------------------------------

struct SequentialMapIt : IteratorNode {
  std::shared_ptr<const MapNode> node;
  std::unique_ptr<IteratorNode> in;
  MapContext mc;
  bool next(Element& out) override {
    Element e;
    if (!in->next(e)) return false;
    const MapContext c = mc;
    mc.index++;
    try {
      out = (*node->fn_)(std::move(e), c);
    } catch (...) {
      rethrow_with_context(where(*node, c.index));
    }
    return true;
  }
  void report(std::vector<std::string>& lines) const override { in->report(lines); }
};

// ----- parallel ----------------------------------------------------------------------------

// One call in flight. All fields are guarded by Shared::mu.
struct Call {
  enum State { pending, running, done, cancelled } state = pending;
  MapContext ctx;
  Element input, output;
  std::exception_ptr error;
  bool from_input = false;
};

// What pool tasks share with the iterator; tasks hold it by shared_ptr, so it outlives an
// iterator that is destroyed while a task is queued.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
};

// Runs one call if still pending. Called by a pool worker, or inline by the consumer when the
// call has not started yet (so a busy pool never blocks the pipeline).
void run_call(Shared& sh, Call& call, const MapFnWithContext& fn) {
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    if (call.state != Call::pending) return;
    call.state = Call::running;
    sh.running++;
  }
  Element out;
  std::exception_ptr err;
  try {
    out = fn(std::move(call.input), call.ctx);
  } catch (...) {
    err = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    call.output = std::move(out);
    call.error = err;
    call.state = Call::done;
    call.input = Element();
    sh.running--;
  }
  sh.cv.notify_all();
}

struct ParallelMapIt : IteratorNode {
  std::shared_ptr<const MapNode> node;
  std::shared_ptr<IteratorContext> ictx;
  std::unique_ptr<IteratorNode> in;
  std::shared_ptr<Shared> sh = std::make_shared<Shared>();
  std::deque<std::shared_ptr<Call>> calls;  // in input order
  MapContext mc;
  bool deterministic = true;
  bool autotune = false;
  std::atomic<int> parallelism{1};  // read by report() from another thread
  int max_parallelism = 1;
  bool input_done = false;

  ~ParallelMapIt() override {
    // Cancel what has not started; wait for what is running (it may use the user's captures).
    std::unique_lock<std::mutex> lock(sh->mu);
    for (auto& c : calls)
      if (c->state == Call::pending) c->state = Call::cancelled;
    sh->cv.wait(lock, [&] { return sh->running == 0; });
  }

  // Pulls inputs and submits calls until `parallelism` are in flight.
  void refill() {
    while (!input_done && int(calls.size()) < parallelism && !ictx->cancelled) {
      auto call = std::make_shared<Call>();
      call->ctx = mc;
      try {
        if (!in->next(call->input)) {
          input_done = true;
          break;
        }
      } catch (...) {
        // The input failed: keep the error in order, as this element's result.
        call->error = std::current_exception();
        call->from_input = true;
        call->state = Call::done;
        calls.push_back(std::move(call));
        continue;  // no index consumed: the map never saw an element
      }
      mc.index++;
      calls.push_back(call);
      pipeline_pool().submit([sh = sh, call, fn = node->fn_] { run_call(*sh, *call, *fn); });
    }
  }

  bool next(Element& out) override {
    refill();
    if (calls.empty()) return false;
    size_t pick = 0;
    bool waited = false;
    {
      std::unique_lock<std::mutex> lock(sh->mu);
      for (;;) {
        if (deterministic) {
          if (calls.front()->state == Call::done) break;
        } else {
          size_t i = 0;
          while (i < calls.size() && calls[i]->state != Call::done) ++i;
          if (i < calls.size()) {
            pick = i;
            break;
          }
        }
        waited = true;
        // Not ready. If the oldest call has not started, run it here rather than wait for a
        // pool thread (which may be busy with other pipelines' work).
        std::shared_ptr<Call> oldest_pending;
        for (auto& c : calls)
          if (c->state == Call::pending) {
            oldest_pending = c;
            break;
          }
        if (oldest_pending && (!deterministic || oldest_pending == calls.front())) {
          lock.unlock();
          run_call(*sh, *oldest_pending, *node->fn_);
          lock.lock();
        } else {
          sh->cv.wait(lock);
        }
      }
    }
    std::shared_ptr<Call> call = calls[pick];
    calls.erase(calls.begin() + pick);
    // Autotune: the consumer had to wait, so more calls in flight would have helped.
    if (waited && autotune && parallelism < max_parallelism) ++parallelism;
    refill();  // keep the pool busy while the consumer works on this element
    if (call->error) {
      // An error from the input (no map call was made) passes through unchanged.
      if (call->from_input) std::rethrow_exception(call->error);
      try {
        std::rethrow_exception(call->error);
      } catch (...) {
        rethrow_with_context(where(*node, call->ctx.index));
      }
    }
    out = std::move(call->output);
    return true;
  }

  void report(std::vector<std::string>& lines) const override {
    in->report(lines);
    lines.push_back("map(" + node->opts_.name + "): parallelism " +
                    std::to_string(parallelism.load()) + "/" + std::to_string(max_parallelism) +
                    (autotune ? " (autotuned)" : ""));
  }
};

std::unique_ptr<IteratorNode> MapNode::make_iterator(std::shared_ptr<IteratorContext> ctx,
                                                     uint64_t stream) const {
  MapContext mc;
  mc.seed = opts_.seed;
  mc.epoch = ctx->epoch;
  mc.stream = stream;
  auto self = std::static_pointer_cast<const MapNode>(shared_from_this());
  const int n = opts_.num_parallel_calls;
  if (n == 0 || n == 1) {
    auto it = std::make_unique<SequentialMapIt>();
    it->node = self;
    it->in = input_->make_iterator(ctx, stream);
    it->mc = mc;
    return it;
  }
  auto it = std::make_unique<ParallelMapIt>();
  it->node = self;
  it->ictx = ctx;
  it->in = input_->make_iterator(ctx, stream);
  it->mc = mc;
  // Op determinism (lockstep/core/config.h) overrides deterministic = false.
  it->deterministic =
      config::op_determinism_enabled() || opts_.deterministic.value_or(ctx->options.deterministic);
  if (n == AUTOTUNE) {
    it->max_parallelism = ctx->budget;
    it->autotune = ctx->options.autotune;
    it->parallelism = it->autotune ? 1 : ctx->budget;
  } else {
    it->parallelism = it->max_parallelism = n;
  }
  return it;
}

}  // namespace

Dataset Dataset::map(MapFnWithContext fn, MapOptions options) const {
  node();
  LS_CHECK(fn, "map: empty function");
  LS_CHECK(options.num_parallel_calls >= 0 || options.num_parallel_calls == AUTOTUNE,
           "map: num_parallel_calls must be >= 0 or AUTOTUNE (-1), got ",
           options.num_parallel_calls);
  return wrap(std::make_shared<MapNode>(node_, std::move(fn), std::move(options)));
}

Dataset Dataset::map(MapFn fn, MapOptions options) const {
  LS_CHECK(fn, "map: empty function");
  return map(MapFnWithContext(
                 [fn = std::move(fn)](Element e, const MapContext&) { return fn(std::move(e)); }),
             std::move(options));
}

}  // namespace lockstep::data
