// prefetch: one producer thread per iterator keeps a bounded buffer of ready elements, so the
// consumer (the training loop) overlaps with everything upstream.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "data/dataset_node.h"

namespace lockstep::data {

namespace {

class PrefetchNode : public DatasetNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(PrefetchNode)
  PrefetchNode(NodePtr in, int n) : input_(std::move(in)), n_(n) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  std::string label() const override { return "prefetch"; }  // buffering changes no element
  std::vector<NodePtr> inputs() const override { return {input_}; }

  NodePtr input_;
  int n_;
};

struct PrefetchIt : IteratorNode {
  std::shared_ptr<IteratorContext> ctx;
  std::unique_ptr<IteratorNode> in;
  std::mutex mu;
  std::condition_variable not_empty, not_full;
  std::deque<Result> buf;
  int capacity = 1, max_capacity = 1;
  bool autotune = false;
  bool end = false;   // the producer saw the input's end
  bool stop = false;  // the iterator is going away
  std::thread producer;

  void start() {
    producer = std::thread([this] { produce(); });
  }

  ~PrefetchIt() override {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    not_full.notify_all();
    // The producer may be inside in->next(); that returns after at most one upstream element
    // (upstream stages never block on queued work), then it sees `stop`.
    if (producer.joinable()) producer.join();
  }

  // Marks the end for the consumer. Every way out of produce() goes through here: a consumer
  // waiting in next() — the producer of a prefetch further down, when two are nested — must
  // wake up. (It used to return on a cancel without this; the outer producer then waited in
  // this next() forever and the iterator's destructor, joining it, hung: issue 25, item 8.)
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu);
      end = true;
    }
    not_empty.notify_all();
  }

  void produce() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        not_full.wait(lock, [&] { return stop || int(buf.size()) < capacity; });
        if (stop) break;
      }
      if (ctx->cancelled) break;
      Result r;
      bool got = false;
      try {
        got = in->next(r.element);
      } catch (...) {
        r.error = std::current_exception();
        got = true;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!got)
          end = true;
        else
          buf.push_back(std::move(r));
      }
      not_empty.notify_one();
      if (!got) return;
    }
    finish();
  }

  bool next(Element& out) override {
    Result r;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (buf.empty() && !end) {
        // Autotune: the consumer caught up with the producer; a deeper buffer absorbs bursts
        // (e.g. a slow image) up to the limit.
        if (autotune && capacity < max_capacity) capacity = std::min(max_capacity, capacity * 2);
        not_full.notify_one();
        not_empty.wait(lock, [&] { return !buf.empty() || end; });
      }
      if (buf.empty()) return false;
      r = std::move(buf.front());
      buf.pop_front();
    }
    not_full.notify_one();
    if (r.error) std::rethrow_exception(r.error);
    out = std::move(r.element);
    return true;
  }

  void report(std::vector<std::string>& lines) const override {
    in->report(lines);
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu));
    lines.push_back("prefetch: buffer " + std::to_string(capacity) + "/" +
                    std::to_string(max_capacity) + (autotune ? " (autotuned)" : ""));
  }
};

std::unique_ptr<IteratorNode> PrefetchNode::make_iterator(std::shared_ptr<IteratorContext> ctx,
                                                          uint64_t stream) const {
  auto it = std::make_unique<PrefetchIt>();
  it->ctx = ctx;
  it->in = input_->make_iterator(ctx, stream);
  const int max_prefetch = std::max(1, ctx->options.max_prefetch);
  if (n_ == AUTOTUNE) {
    it->autotune = ctx->options.autotune;
    it->max_capacity = max_prefetch;
    it->capacity = it->autotune ? 1 : max_prefetch;
  } else {
    it->capacity = it->max_capacity = n_;
  }
  it->start();
  return it;
}

}  // namespace

Dataset Dataset::prefetch(int buffer_size) const {
  node();
  LS_CHECK(buffer_size >= 1 || buffer_size == AUTOTUNE,
           "prefetch: buffer_size must be >= 1 or AUTOTUNE (-1), got ", buffer_size);
  return wrap(std::make_shared<PrefetchNode>(node_, buffer_size));
}

}  // namespace lockstep::data
