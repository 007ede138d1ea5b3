// Internal interfaces of the Dataset implementation: a Dataset is an immutable graph of
// DatasetNodes; an Iterator is a tree of IteratorNodes made from it for one pass.
#pragma once
#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/config.h"
#include "lockstep/data/dataset.h"

namespace lockstep::data {

// State shared by all stages of one Iterator.
struct IteratorContext {
  Options options;
  int64_t epoch = 0;
  int budget = 1;  // resolved Options::max_threads
  std::atomic<int64_t> errors_skipped{0};
  std::atomic<bool> cancelled{false};  // set when the Iterator is being destroyed
};

class IteratorNode {
 public:
  virtual ~IteratorNode() = default;
  // Next element into out; false at the end. May throw; must stay usable after throwing.
  virtual bool next(Element& out) = 0;
  // Appends one line per autotuned stage (this one and its inputs).
  virtual void report(std::vector<std::string>& lines) const {}
};

// 64-bit FNV-1a with a final avalanche; stable across processes (keys file caches).
class Hasher {
 public:
  void bytes(const void* data, size_t n);
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  uint64_t digest() const;

 private:
  uint64_t h_ = 1469598103934665603ull;
};

// splitmix64-style mixing of several words into one key (seeds per epoch, stream, element).
uint64_t mix_keys(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0);

class DatasetNode : public std::enable_shared_from_this<DatasetNode> {
 public:
  virtual ~DatasetNode() = default;
  // stream: distinguishes re-instantiations within one epoch (see MapContext::stream).
  virtual std::unique_ptr<IteratorNode> make_iterator(std::shared_ptr<IteratorContext> ctx,
                                                      uint64_t stream) const = 0;
  virtual int64_t cardinality() const = 0;
  virtual std::optional<ElementSpec> spec() const = 0;
  // This stage alone, e.g. "batch(32, drop_remainder)".
  virtual std::string label() const = 0;
  virtual std::vector<std::shared_ptr<const DatasetNode>> inputs() const { return {}; }
  // Source data that the label does not capture (tensor bytes, file sizes and mtimes).
  virtual void hash_source(Hasher& h) const {}
  // A copy of this stage reading from `inputs` (same parameters, fresh caches), for graph
  // rewrites such as auto-sharding by file. `variant` tells stages that keep side files (a file
  // cache) to use a distinct file for the rewritten graph. Sources return themselves.
  virtual std::shared_ptr<const DatasetNode> with_inputs(
      std::vector<std::shared_ptr<const DatasetNode>> inputs, const std::string& variant) const;
  // True for sources that enumerate files or paths (list_files, the path list of
  // image_dataset_from_directory, from_tensor_slices of strings): sharding by FILE shards them.
  virtual bool reads_files() const { return false; }

  std::string describe() const;  // whole upstream chain
  uint64_t fingerprint() const;  // describe() + hash_source() of every node
};

using NodePtr = std::shared_ptr<const DatasetNode>;

// with_inputs for a copyable stage T with one `input_` member.
template <class T>
NodePtr copy_with_input(const T& self, const std::vector<NodePtr>& inputs) {
  auto c = std::make_shared<T>(self);
  c->input_ = inputs.at(0);
  return c;
}
#define LOCKSTEP_DATASET_UNARY_REWRITE(T)                                           \
  NodePtr with_inputs(std::vector<NodePtr> in, const std::string&) const override { \
    return copy_with_input(*this, in);                                              \
  }

// Rethrows the current exception as lockstep::Error with `where` prepended to the message
// (non-std exceptions become "unknown exception").
[[noreturn]] void rethrow_with_context(const std::string& where);

// A produced element or the error its production raised.
struct Result {
  Element element;
  std::exception_ptr error;
};

int resolve_budget(const Options& options);

struct DatasetAccess {
  static const DatasetNode& node(const Dataset& d) { return d.node(); }
};

// Rows along dimension 0 shared by all components (Tensors, Strings); throws naming `who`.
int64_t element_rows(const Element& e, const char* who);
// Rows [begin, end) of every component; squeeze drops dimension 0 (begin + 1 == end).
Element element_rows_slice(const Element& e, int64_t begin, int64_t end, bool squeeze);

// A random seed for a stage the user gave none (`what` names it and its seed argument, e.g.
// "shuffle (ShuffleOptions::seed)"). Under op determinism (lockstep/core/config.h) a drawn seed
// would change every run, so this throws, asking for one.
uint64_t draw_seed(const char* what);

}  // namespace lockstep::data
