// Dataset plumbing: construction, iteration, introspection, the pipeline pool, hashing.
#include "lockstep/data/dataset.h"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "data/dataset_node.h"

namespace lockstep::data {

// ---------------------------------------------------------------------------------------------
// helpers

void Hasher::bytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = h_;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  h_ = h;
}

static uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hasher::digest() const { return splitmix(h_); }

uint64_t mix_keys(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = splitmix(a);
  h = splitmix(h ^ b);
  h = splitmix(h ^ c);
  return splitmix(h ^ d);
}

uint64_t MapContext::key() const {
  return mix_keys(seed, uint64_t(epoch), stream, uint64_t(index));
}
Philox MapContext::rng() const { return Philox(key()); }

void rethrow_with_context(const std::string& where) {
  try {
    throw;
  } catch (const std::exception& e) {
    throw Error(where + ": " + e.what());
  } catch (...) {
    throw Error(where + ": unknown exception (not derived from std::exception)");
  }
}

int resolve_budget(const Options& options) {
  int b = options.max_threads > 0 ? options.max_threads
                                  : int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, b);
}

ThreadPool& pipeline_pool() {
  static ThreadPool pool(int(std::max(2u, std::thread::hardware_concurrency())));
  return pool;
}

NodePtr DatasetNode::with_inputs(std::vector<NodePtr> in, const std::string&) const {
  LS_CHECK(in.empty() && inputs().empty(), "dataset stage '", label(),
           "' cannot be rebuilt on new inputs");
  return shared_from_this();
}

namespace {
bool any_file_source(const NodePtr& node) {
  if (node->reads_files()) return true;
  for (auto& p : node->inputs())
    if (any_file_source(p)) return true;
  return false;
}
}  // namespace

bool Dataset::reads_files() const { return any_file_source(node().shared_from_this()); }

Dataset Dataset::shard_files(int64_t num_shards, int64_t index) const {
  LS_CHECK(reads_files(), "shard_files: the pipeline ", node().describe(),
           " has no file source (list_files, image_dataset_from_directory or "
           "from_tensor_slices of paths); shard by element with shard() instead");
  LS_CHECK(num_shards >= 1 && index >= 0 && index < num_shards, "shard_files: index ", index,
           " out of range for num_shards ", num_shards);
  std::string variant = "shard-";
  variant.append(std::to_string(index)).append("-of-").append(std::to_string(num_shards));
  // The graph below `n` with shard(num_shards, index) right after every file source.
  std::function<NodePtr(const NodePtr&)> rewrite = [&](const NodePtr& n) -> NodePtr {
    if (n->reads_files()) return wrap(n).shard(num_shards, index).node_;
    auto in = n->inputs();
    bool changed = false;
    for (auto& p : in) {
      NodePtr q = rewrite(p);
      changed |= q != p;
      p = std::move(q);
    }
    return changed ? n->with_inputs(std::move(in), variant) : n;
  };
  return wrap(rewrite(node_));
}

std::string DatasetNode::describe() const {
  // Built with append(): GCC 12 -O3 warns falsely (-Wrestrict) on chained operator+ here.
  std::string out;
  auto in = inputs();
  if (in.size() == 1) {
    out.append(in[0]->describe()).append(" -> ");
  } else if (in.size() > 1) {
    out.append("[");
    for (size_t i = 0; i < in.size(); ++i) out.append(i ? " | " : "").append(in[i]->describe());
    out.append("] -> ");
  }
  return out.append(label());
}

static void hash_tree(const DatasetNode& n, Hasher& h) {
  h.str(n.label());
  n.hash_source(h);
  for (const auto& in : n.inputs()) hash_tree(*in, h);
}

uint64_t DatasetNode::fingerprint() const {
  Hasher h;
  h.str(describe());
  hash_tree(*this, h);
  return h.digest();
}

// ---------------------------------------------------------------------------------------------
// Iterator

Iterator::Iterator(std::unique_ptr<IteratorNode> root, std::shared_ptr<IteratorContext> ctx)
    : root_(std::move(root)), ctx_(std::move(ctx)) {}
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&& o) noexcept {
  if (this != &o) {
    if (ctx_) ctx_->cancelled = true;
    root_ = std::move(o.root_);
    ctx_ = std::move(o.ctx_);
  }
  return *this;
}

Iterator::~Iterator() {
  // Cancel first so that producers stop pulling, then tear the stages down (each joins its own
  // threads / waits for its running tasks in its destructor).
  if (ctx_) ctx_->cancelled = true;
  root_.reset();
}

bool Iterator::next(Element& out) {
  LS_CHECK(root_, "Iterator::next on a moved-from iterator");
  return root_->next(out);
}

std::optional<Element> Iterator::next() {
  Element e;
  if (!next(e)) return std::nullopt;
  return e;
}

int64_t Iterator::epoch() const { return ctx_ ? ctx_->epoch : 0; }
int64_t Iterator::errors_skipped() const { return ctx_ ? ctx_->errors_skipped.load() : 0; }

std::string Iterator::autotune_report() const {
  std::vector<std::string> lines;
  if (root_) root_->report(lines);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? "; " : "") + lines[i];
  return out;
}

Iterator::Cursor Iterator::begin() {
  Cursor c;
  c.it_ = this;
  c.current_ = next();
  return c;
}

// ---------------------------------------------------------------------------------------------
// Dataset

Dataset::Dataset(std::shared_ptr<const DatasetNode> node, Options options)
    : node_(std::move(node)),
      options_(options),
      iterations_(std::make_shared<std::atomic<int64_t>>(0)) {}

Dataset Dataset::wrap(std::shared_ptr<const DatasetNode> node) const {
  return Dataset(std::move(node), options_);
}

const DatasetNode& Dataset::node() const {
  LS_CHECK(node_,
           "use of an empty Dataset (default-constructed); build one with a source such "
           "as Dataset::from_tensor_slices or Dataset::list_files");
  return *node_;
}

Dataset Dataset::with_options(Options options) const {
  node();
  return Dataset(node_, options);
}

Iterator Dataset::iterator(int64_t epoch) const {
  auto ctx = std::make_shared<IteratorContext>();
  ctx->options = options_;
  ctx->epoch = epoch;
  ctx->budget = resolve_budget(options_);
  auto root = node().make_iterator(ctx, 0);
  return Iterator(std::move(root), std::move(ctx));
}

Iterator Dataset::iterator() const {
  node();
  return iterator(iterations_->fetch_add(1));
}

std::vector<Element> Dataset::collect(int64_t epoch) const {
  LS_CHECK(cardinality() != kInfiniteCardinality, "collect() on an infinite dataset (",
           description(), "); add take(n)");
  std::vector<Element> out;
  Iterator it = iterator(epoch);
  Element e;
  while (it.next(e)) out.push_back(std::move(e));
  return out;
}

int64_t Dataset::cardinality() const { return node().cardinality(); }
std::optional<ElementSpec> Dataset::element_spec() const { return node().spec(); }
std::string Dataset::description() const { return node().describe(); }

ElementSpec Dataset::probe_element_spec() const {
  if (auto s = element_spec()) return *s;
  Iterator it = iterator(0);
  Element e;
  LS_CHECK(it.next(e), "probe_element_spec: dataset ", description(),
           " is empty, so its element spec cannot be observed");
  return spec_of(e);
}

}  // namespace lockstep::data
