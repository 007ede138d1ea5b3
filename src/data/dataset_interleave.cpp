// interleave: cycle_length datasets made by fn from input elements, read round robin in blocks
// of block_length (tf.data's order). In parallel mode pool tasks fetch the next blocks of the
// open datasets ahead of the consumer; the order stays the sequential one unless
// deterministic=false, which lets the consumer take from any dataset that has data ready.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "data/dataset_node.h"

namespace lockstep::data {

namespace {

class InterleaveNode : public DatasetNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(InterleaveNode)
  InterleaveNode(NodePtr in, std::function<Dataset(Element)> fn, InterleaveOptions o)
      : input_(std::move(in)), fn_(std::move(fn)), opts_(std::move(o)) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override;
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    return c == 0 ? 0 : kUnknownCardinality;
  }
  std::optional<ElementSpec> spec() const override { return std::nullopt; }
  std::string label() const override {
    return "interleave(" + opts_.name + ", cycle=" + std::to_string(opts_.cycle_length) +
           ", block=" + std::to_string(opts_.block_length) + ")";
  }
  std::vector<NodePtr> inputs() const override { return {input_}; }

  NodePtr input_;
  std::function<Dataset(Element)> fn_;
  InterleaveOptions opts_;
};

// One open dataset of the cycle. Fields other than `it` are guarded by Shared::mu; `it` is used
// only by whoever moved state to running.
struct Slot {
  enum State { idle, pending, running } state = idle;
  std::unique_ptr<IteratorNode> it;
  std::deque<Result> buf;
  bool ended = false;
};

struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
};

// Fetches up to n elements from a slot whose state the caller set to running.
void fetch(Shared& sh, Slot& s, int n) {
  std::deque<Result> got;
  bool end = false;
  for (int i = 0; i < n; ++i) {
    Result r;
    try {
      if (!s.it->next(r.element)) {
        end = true;
        break;
      }
    } catch (...) {
      r.error = std::current_exception();
    }
    got.push_back(std::move(r));
  }
  {
    std::lock_guard<std::mutex> lock(sh.mu);
    for (auto& r : got) s.buf.push_back(std::move(r));
    s.ended = s.ended || end;
    s.state = Slot::idle;
    sh.running--;
  }
  sh.cv.notify_all();
}

struct InterleaveIt : IteratorNode {
  std::shared_ptr<const InterleaveNode> node;
  std::shared_ptr<IteratorContext> ictx;
  std::unique_ptr<IteratorNode> in;
  uint64_t stream = 0;
  std::shared_ptr<Shared> sh = std::make_shared<Shared>();
  std::vector<std::shared_ptr<Slot>> cycle;
  int block_length = 1, parallel = 0;  // parallel: fetch tasks in flight (0 = sequential)
  bool deterministic = true;
  size_t ci = 0;
  int block_index = 0, num_open = 0;
  int64_t inputs_seen = 0;
  bool input_done = false;

  ~InterleaveIt() override {
    std::unique_lock<std::mutex> lock(sh->mu);
    for (auto& s : cycle)
      if (s && s->state == Slot::pending) s->state = Slot::idle;  // the task will skip it
    sh->cv.wait(lock, [&] { return sh->running == 0; });
  }

  void advance() {
    block_index = 0;
    ci = (ci + 1) % cycle.size();
  }

  // Submits fetches for open slots, nearest-next first, up to `parallel` in flight.
  void schedule() {
    if (parallel <= 0) return;
    std::lock_guard<std::mutex> lock(sh->mu);
    int busy = 0;
    for (auto& s : cycle)
      if (s && s->state != Slot::idle) ++busy;
    for (size_t k = 0; k < cycle.size() && busy < parallel; ++k) {
      auto& s = cycle[(ci + k) % cycle.size()];
      if (!s || s->state != Slot::idle || s->ended || int(s->buf.size()) >= block_length) continue;
      s->state = Slot::pending;
      ++busy;
      pipeline_pool().submit([sh = sh, s, n = block_length] {
        {
          std::lock_guard<std::mutex> lock(sh->mu);
          if (s->state != Slot::pending) return;
          s->state = Slot::running;
          sh->running++;
        }
        fetch(*sh, *s, n);
      });
    }
  }

  // Takes the next result of slot s; false when it is exhausted.
  bool take(Slot& s, Result& r) {
    std::unique_lock<std::mutex> lock(sh->mu);
    while (s.buf.empty() && !s.ended) {
      if (s.state == Slot::running) {
        sh->cv.wait(lock);
      } else {  // idle or pending: fetch here instead of waiting for a pool thread
        s.state = Slot::running;
        sh->running++;
        lock.unlock();
        fetch(*sh, s, 1);
        lock.lock();
      }
    }
    if (s.buf.empty()) return false;
    r = std::move(s.buf.front());
    s.buf.pop_front();
    return true;
  }

  // deterministic=false: any slot with a ready result.
  bool take_any_ready(Result& r) {
    std::lock_guard<std::mutex> lock(sh->mu);
    for (auto& s : cycle)
      if (s && !s->buf.empty()) {
        r = std::move(s->buf.front());
        s->buf.pop_front();
        return true;
      }
    return false;
  }

  bool slot_busy(const Slot& s) {
    std::lock_guard<std::mutex> lock(sh->mu);
    return s.buf.empty() && !s.ended && s.state == Slot::running;
  }

  bool next(Element& out) override {
    for (;;) {
      if (ictx->cancelled) return false;
      if (num_open == 0 && input_done) return false;
      auto& s = cycle[ci];
      if (!s) {
        if (input_done) {
          advance();
          continue;
        }
        Element e;
        if (!in->next(e)) {
          input_done = true;
          continue;
        }
        const int64_t index = inputs_seen++;
        Dataset d;
        try {
          d = node->fn_(std::move(e));
        } catch (...) {
          rethrow_with_context("interleave(" + node->opts_.name + "): input element " +
                               std::to_string(index));
        }
        LS_CHECK(d.valid(), "interleave(", node->opts_.name, "): fn returned an empty Dataset for ",
                 "input element ", index);
        auto slot = std::make_shared<Slot>();
        slot->it =
            DatasetAccess::node(d).make_iterator(ictx, mix_keys(stream, uint64_t(index) + 1));
        s = std::move(slot);
        ++num_open;
        schedule();
        continue;
      }
      Result r;
      if (!deterministic && slot_busy(*s) && take_any_ready(r)) {
        schedule();
        return deliver(r, out);
      }
      if (!take(*s, r)) {
        s.reset();
        --num_open;
        advance();
        continue;
      }
      if (++block_index == block_length) advance();
      schedule();
      return deliver(r, out);
    }
  }

  bool deliver(Result& r, Element& out) {
    if (r.error) std::rethrow_exception(r.error);
    out = std::move(r.element);
    return true;
  }

  void report(std::vector<std::string>& lines) const override { in->report(lines); }
};

std::unique_ptr<IteratorNode> InterleaveNode::make_iterator(std::shared_ptr<IteratorContext> ctx,
                                                            uint64_t stream) const {
  auto it = std::make_unique<InterleaveIt>();
  it->node = std::static_pointer_cast<const InterleaveNode>(shared_from_this());
  it->ictx = ctx;
  it->in = input_->make_iterator(ctx, stream);
  it->stream = stream;
  const int cycle = opts_.cycle_length == AUTOTUNE ? ctx->budget : opts_.cycle_length;
  it->cycle.resize(size_t(std::max(1, cycle)));
  it->block_length = opts_.block_length;
  it->parallel = opts_.num_parallel_calls == AUTOTUNE ? ctx->budget : opts_.num_parallel_calls;
  if (it->parallel == 1) it->parallel = 0;
  // Op determinism (lockstep/core/config.h) overrides deterministic = false.
  it->deterministic =
      config::op_determinism_enabled() || opts_.deterministic.value_or(ctx->options.deterministic);
  return it;
}

}  // namespace

Dataset Dataset::interleave(std::function<Dataset(Element)> fn, InterleaveOptions options) const {
  node();
  LS_CHECK(fn, "interleave: empty function");
  LS_CHECK(options.cycle_length >= 1 || options.cycle_length == AUTOTUNE,
           "interleave: cycle_length must be >= 1 or AUTOTUNE, got ", options.cycle_length);
  LS_CHECK(options.block_length >= 1, "interleave: block_length must be >= 1, got ",
           options.block_length);
  LS_CHECK(options.num_parallel_calls >= 0 || options.num_parallel_calls == AUTOTUNE,
           "interleave: num_parallel_calls must be >= 0 or AUTOTUNE, got ",
           options.num_parallel_calls);
  return wrap(std::make_shared<InterleaveNode>(node_, std::move(fn), std::move(options)));
}

}  // namespace lockstep::data
