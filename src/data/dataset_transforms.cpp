// Sequential transformations: filter, shuffle, batch, unbatch, repeat, take, skip, shard,
// enumerate, ignore_errors.
#include <cstdio>
#include <deque>
#include <random>

#include "data/dataset_node.h"

namespace lockstep::data {

namespace {

// A stage with one input whose iterator holds the input's iterator.
class UnaryNode : public DatasetNode {
 public:
  explicit UnaryNode(NodePtr input) : input_(std::move(input)) {}
  std::vector<NodePtr> inputs() const override { return {input_}; }
  std::optional<ElementSpec> spec() const override { return input_->spec(); }
  int64_t cardinality() const override { return input_->cardinality(); }

 public:  // (internal) copy_with_input rebinds it
  NodePtr input_;
};

struct UnaryIt : IteratorNode {
  std::unique_ptr<IteratorNode> in;
  void report(std::vector<std::string>& lines) const override { in->report(lines); }
};

bool finite(int64_t c) { return c >= 0; }

// ----- filter ------------------------------------------------------------------------------

class FilterNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(FilterNode)
  FilterNode(NodePtr in, Predicate p) : UnaryNode(std::move(in)), pred_(std::move(p)) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      std::shared_ptr<const FilterNode> node;
      int64_t index = 0;
      bool next(Element& out) override {
        Element e;
        while (in->next(e)) {
          bool keep;
          try {
            keep = node->pred_(e);
          } catch (...) {
            rethrow_with_context("filter: predicate failed on element " + std::to_string(index++) +
                                 " " + e.str());
          }
          ++index;
          if (keep) {
            out = std::move(e);
            return true;
          }
        }
        return false;
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->node = std::static_pointer_cast<const FilterNode>(shared_from_this());
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    return c == kInfiniteCardinality ? c : kUnknownCardinality;
  }
  std::string label() const override { return "filter"; }

 private:
  Predicate pred_;
};

// ----- shuffle -----------------------------------------------------------------------------

class ShuffleNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(ShuffleNode)
  ShuffleNode(NodePtr in, int64_t buffer, uint64_t seed, bool reshuffle)
      : UnaryNode(std::move(in)), buffer_(buffer), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      int64_t capacity;
      std::vector<Element> buf;
      bool input_done = false;
      Philox rng{0};
      bool next(Element& out) override {
        while (!input_done && int64_t(buf.size()) < capacity) {
          Element e;
          if (!in->next(e)) {
            input_done = true;
            break;
          }
          buf.push_back(std::move(e));
        }
        if (buf.empty()) return false;
        // Uniform index in [0, size) from 64 random bits (bias < 2^-40 for any sane buffer).
        const size_t r = size_t(rng.next_u64() % buf.size());
        out = std::move(buf[r]);
        if (r != buf.size() - 1) buf[r] = std::move(buf.back());
        buf.pop_back();
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->capacity = buffer_;
    const uint64_t key = reshuffle_ ? mix_keys(seed_, uint64_t(ctx->epoch), stream) : seed_;
    it->rng = Philox(key, 0x5348554646ull);  // "SHUFF"
    it->buf.reserve(size_t(std::min<int64_t>(buffer_, 1 << 16)));
    return it;
  }
  std::string label() const override {
    return "shuffle(" + std::to_string(buffer_) + ", seed=" + std::to_string(seed_) +
           (reshuffle_ ? "" : ", fixed") + ")";
  }

 private:
  int64_t buffer_;
  uint64_t seed_;
  bool reshuffle_;
};

// ----- batch / unbatch ---------------------------------------------------------------------

class BatchNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(BatchNode)
  BatchNode(NodePtr in, int64_t size, bool drop)
      : UnaryNode(std::move(in)), size_(size), drop_(drop) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      int64_t size;
      bool drop;
      bool done = false;
      std::vector<Element> pending;
      bool next(Element& out) override {
        if (done) return false;
        pending.clear();
        while (int64_t(pending.size()) < size) {
          Element e;
          bool got;
          try {
            got = in->next(e);
          } catch (...) {
            pending.clear();  // an error costs the whole batch (like tf.data)
            throw;
          }
          if (!got) {
            done = true;
            break;
          }
          pending.push_back(std::move(e));
        }
        if (pending.empty() || (drop && int64_t(pending.size()) < size)) return false;
        out = stack_elements(pending);
        pending.clear();
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->size = size_;
    it->drop = drop_;
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (!finite(c)) return c;
    return drop_ ? c / size_ : (c + size_ - 1) / size_;
  }
  std::optional<ElementSpec> spec() const override {
    auto s = input_->spec();
    if (!s) return s;
    const int64_t dim0 =
        drop_ || cardinality() == kInfiniteCardinality ||
                (finite(input_->cardinality()) && input_->cardinality() % size_ == 0)
            ? size_
            : -1;
    for (auto& c : s->components) {
      LS_CHECK(c.kind != ComponentKind::strings, "batch: a component is already Strings");
      Shape shape;
      shape.push_back(dim0);
      if (c.kind == ComponentKind::tensor)
        for (int64_t d : c.shape) shape.push_back(d);
      c.shape = shape;
      if (c.kind == ComponentKind::string) c.kind = ComponentKind::strings;
    }
    return s;
  }
  std::string label() const override {
    return "batch(" + std::to_string(size_) + (drop_ ? ", drop_remainder" : "") + ")";
  }

 private:
  int64_t size_;
  bool drop_;
};

class UnbatchNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(UnbatchNode)
  using UnaryNode::UnaryNode;
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      Element current;
      int64_t rows = 0, row = 0;
      bool next(Element& out) override {
        while (row >= rows) {
          if (!in->next(current)) return false;
          rows = element_rows(current, "unbatch");
          row = 0;
        }
        out = element_rows_slice(current, row, row + 1, /*squeeze=*/true);
        ++row;
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    return c == kInfiniteCardinality || c == 0 ? c : kUnknownCardinality;
  }
  std::optional<ElementSpec> spec() const override {
    auto s = input_->spec();
    if (!s) return s;
    for (auto& c : s->components) {
      if (c.kind == ComponentKind::strings) {
        c.kind = ComponentKind::string;
        c.shape = Shape{};
      } else if (c.kind == ComponentKind::tensor && c.shape.rank() >= 1) {
        c.shape = Shape(std::vector<int64_t>(c.shape.begin() + 1, c.shape.end()));
      }
    }
    return s;
  }
  std::string label() const override { return "unbatch"; }
};

// ----- repeat ------------------------------------------------------------------------------

class RepeatNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(RepeatNode)
  RepeatNode(NodePtr in, int64_t count) : UnaryNode(std::move(in)), count_(count) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      std::shared_ptr<const RepeatNode> node;
      std::shared_ptr<IteratorContext> ctx;
      uint64_t stream;
      int64_t pass = 0;
      bool produced_this_pass = false;
      bool next(Element& out) override {
        for (;;) {
          if (node->count_ >= 0 && pass >= node->count_) return false;
          if (!in) {
            // Pass k > 0 gets its own stream so shuffles and seeded maps differ per repetition.
            in = node->input_->make_iterator(ctx, pass == 0 ? stream : mix_keys(stream, pass));
            produced_this_pass = false;
          }
          if (in->next(out)) {
            produced_this_pass = true;
            return true;
          }
          in.reset();
          ++pass;
          // An empty input repeated forever would spin: stop instead (tf.data does the same).
          if (!produced_this_pass) return false;
          if (ctx->cancelled) return false;
        }
      }
    };
    auto it = std::make_unique<It>();
    it->node = std::static_pointer_cast<const RepeatNode>(shared_from_this());
    it->ctx = ctx;
    it->stream = stream;
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c == 0 || count_ == 0) return 0;
    if (count_ < 0) return c == kUnknownCardinality ? c : kInfiniteCardinality;
    return finite(c) ? c * count_ : c;
  }
  std::string label() const override { return "repeat(" + std::to_string(count_) + ")"; }

 private:
  int64_t count_;
};

// ----- take / skip / shard / enumerate -----------------------------------------------------

class TakeNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(TakeNode)
  TakeNode(NodePtr in, int64_t n) : UnaryNode(std::move(in)), n_(n) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      int64_t left;
      bool next(Element& out) override {
        if (left == 0) return false;
        if (!in->next(out)) return false;
        if (left > 0) --left;
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->left = n_;
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (n_ < 0) return c;
    if (c == kInfiniteCardinality) return n_;
    if (c == kUnknownCardinality) return c;
    return std::min(c, n_);
  }
  std::string label() const override { return "take(" + std::to_string(n_) + ")"; }

 private:
  int64_t n_;
};

class SkipNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(SkipNode)
  SkipNode(NodePtr in, int64_t n) : UnaryNode(std::move(in)), n_(n) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      int64_t to_skip;
      bool next(Element& out) override {
        while (to_skip != 0) {
          if (!in->next(out)) return false;
          if (to_skip > 0) --to_skip;
        }
        return in->next(out);
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->to_skip = n_;
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (n_ < 0) return c == kInfiniteCardinality ? c : 0;
    return finite(c) ? std::max<int64_t>(0, c - n_) : c;
  }
  std::string label() const override { return "skip(" + std::to_string(n_) + ")"; }

 private:
  int64_t n_;
};

class ShardNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(ShardNode)
  ShardNode(NodePtr in, int64_t n, int64_t i) : UnaryNode(std::move(in)), n_(n), i_(i) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      int64_t n, i, pos = 0;
      bool next(Element& out) override {
        // Position counts every input element, so worker i sees exactly i, i+n, i+2n, ...
        for (;;) {
          if (!in->next(out)) return false;
          const int64_t p = pos++;
          if (p % n == i) return true;
        }
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->n = n_;
    it->i = i_;
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (!finite(c)) return c;
    return c / n_ + (i_ < c % n_ ? 1 : 0);
  }
  std::string label() const override {
    return "shard(" + std::to_string(n_) + "," + std::to_string(i_) + ")";
  }

 private:
  int64_t n_, i_;
};

class EnumerateNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(EnumerateNode)
  EnumerateNode(NodePtr in, int64_t start) : UnaryNode(std::move(in)), start_(start) {}
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      int64_t i;
      bool next(Element& out) override {
        Element e;
        if (!in->next(e)) return false;
        Tensor t = Tensor::empty(Shape{}, DType::i64);
        *t.data<int64_t>() = i++;
        out.parts.clear();
        out.parts.reserve(e.size() + 1);
        out.parts.emplace_back(std::move(t));
        for (auto& p : e.parts) out.parts.push_back(std::move(p));
        return true;
      }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->i = start_;
    return it;
  }
  std::optional<ElementSpec> spec() const override {
    auto s = input_->spec();
    if (!s) return s;
    s->components.insert(s->components.begin(),
                         ComponentSpec{ComponentKind::tensor, DType::i64, Shape{}});
    return s;
  }
  std::string label() const override { return "enumerate(" + std::to_string(start_) + ")"; }

 private:
  int64_t start_;
};

// ----- ignore_errors -----------------------------------------------------------------------

class IgnoreErrorsNode : public UnaryNode {
 public:
  LOCKSTEP_DATASET_UNARY_REWRITE(IgnoreErrorsNode)
  using UnaryNode::UnaryNode;
  std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                              uint64_t stream) const override {
    struct It : UnaryIt {
      std::shared_ptr<IteratorContext> ctx;
      int64_t skipped = 0;
      std::string first_error;
      bool warned = false;
      bool next(Element& out) override {
        for (;;) {
          try {
            if (in->next(out)) return true;
            warn();
            return false;
          } catch (const std::exception& e) {
            note(e.what());
          } catch (...) {
            note("unknown exception");
          }
        }
      }
      void note(const char* what) {
        if (skipped++ == 0) first_error = what;
        ctx->errors_skipped.fetch_add(1);
      }
      // One line per pass, printed at the end or when the pass is abandoned.
      void warn() {
        if (warned || skipped == 0) return;
        warned = true;
        std::fprintf(stderr,
                     "lockstep.data warning: ignore_errors skipped %lld element%s (first: %s)\n",
                     (long long)skipped, skipped == 1 ? "" : "s", first_error.c_str());
      }
      ~It() override { warn(); }
    };
    auto it = std::make_unique<It>();
    it->in = input_->make_iterator(ctx, stream);
    it->ctx = ctx;
    return it;
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    return c == kInfiniteCardinality ? c : kUnknownCardinality;
  }
  std::string label() const override { return "ignore_errors"; }
};

}  // namespace

uint64_t draw_seed(const char* what) {
  LS_CHECK(!config::op_determinism_enabled(), what,
           ": no seed given, and op determinism is enabled (config::enable_op_determinism): a "
           "drawn seed would give a different order on every run; pass a seed");
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

Dataset Dataset::filter(Predicate predicate) const {
  LS_CHECK(predicate, "filter: empty predicate");
  return wrap(std::make_shared<FilterNode>(node_, std::move(predicate)));
}

Dataset Dataset::shuffle(int64_t buffer_size, ShuffleOptions options) const {
  node();
  LS_CHECK(buffer_size >= 1, "shuffle: buffer_size must be >= 1, got ", buffer_size);
  const uint64_t seed = options.seed ? *options.seed : draw_seed("shuffle (ShuffleOptions::seed)");
  return wrap(
      std::make_shared<ShuffleNode>(node_, buffer_size, seed, options.reshuffle_each_iteration));
}

Dataset Dataset::batch(int64_t batch_size, BatchOptions options) const {
  node();
  LS_CHECK(batch_size >= 1, "batch: batch_size must be >= 1, got ", batch_size);
  return wrap(std::make_shared<BatchNode>(node_, batch_size, options.drop_remainder));
}

Dataset Dataset::unbatch() const {
  node();
  return wrap(std::make_shared<UnbatchNode>(node_));
}

Dataset Dataset::repeat(int64_t count) const {
  node();
  return wrap(std::make_shared<RepeatNode>(node_, count < 0 ? -1 : count));
}

Dataset Dataset::take(int64_t count) const {
  node();
  return wrap(std::make_shared<TakeNode>(node_, count < 0 ? -1 : count));
}

Dataset Dataset::skip(int64_t count) const {
  node();
  return wrap(std::make_shared<SkipNode>(node_, count < 0 ? -1 : count));
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  node();
  LS_CHECK(num_shards >= 1, "shard: num_shards must be >= 1, got ", num_shards);
  LS_CHECK(index >= 0 && index < num_shards, "shard: index ", index,
           " out of range for num_shards ", num_shards, " (need 0 <= index < num_shards)");
  return wrap(std::make_shared<ShardNode>(node_, num_shards, index));
}

Dataset Dataset::enumerate(int64_t start) const {
  node();
  return wrap(std::make_shared<EnumerateNode>(node_, start));
}

Dataset Dataset::ignore_errors() const {
  node();
  return wrap(std::make_shared<IgnoreErrorsNode>(node_));
}

}  // namespace lockstep::data
