// Dataset: a tf.data-style input pipeline. Lazy (nothing runs until an Iterator pulls),
// composable (every transformation returns a new Dataset sharing the upstream), and
// iterator-based (each Iterator is one independent pass, an "epoch").
//
//   auto ds = data::Dataset::list_files("photos/*/*.jpg", {.seed = 7})
//                 .map(decode, {.num_parallel_calls = data::AUTOTUNE})
//                 .cache("/tmp/photos.cache")
//                 .shuffle(1000, {.seed = 1})
//                 .batch(32, {.drop_remainder = true})
//                 .prefetch(data::AUTOTUNE);
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     data::Iterator it = ds.iterator(epoch);
//     while (auto batch = it.next()) train_step(batch->tensor(0), batch->tensor(1));
//   }
//
// Threads. Parallel work (map calls, interleave fetches) runs as short tasks on one
// process-wide pipeline pool (`pipeline_pool()`), separate from the OpenMP threads of the
// compute kernels. prefetch() owns one producer thread per iterator. No task ever blocks on
// a task still queued: a consumer that needs a result whose task has not started runs it
// itself, so a saturated pool slows the pipeline down but never deadlocks it.
// Destroying an Iterator cancels queued work, waits for tasks already running (at most one
// call of the user's function each) and joins its threads.
//
// Determinism. With the default Options, the output order depends only on the pipeline and
// its seeds, never on thread count or timing. Random map functions get a MapContext whose
// (seed, epoch, index) key a counter-based Philox stream, so seeded augmentation reproduces
// bit for bit at any parallelism.
//
// Distribution hooks:
//  - by element: `ds.shard(num_workers, worker_index)` keeps elements i with
//    i % num_workers == worker_index (place it early, before expensive maps).
//  - by file: shard the *file list* before reading it, so each worker opens only its files:
//      Dataset::list_files(pattern, {.shuffle = false})   // same order on every worker
//          .shard(num_workers, worker_index)
//          .interleave(read_records, {.cycle_length = 4})  // or .map(decode_file, ...)
//    list_files must then be deterministic across workers: shuffle=false, or a fixed seed.
//    `ds.shard_files(num_workers, worker_index)` does that rewrite on a finished pipeline
//    (what distribute_dataset's FILE / AUTO policies use).
//  - `split_batch(global_batch, num_replicas)` cuts a batch into per-replica batches.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/core/rng.h"
#include "lockstep/core/tensor.h"
#include "lockstep/core/thread_pool.h"

namespace lockstep::data {

/// Pass as num_parallel_calls, prefetch buffer size or cycle_length to let the pipeline choose
/// (see Options for the policy).
inline constexpr int AUTOTUNE = -1;

/// cardinality() results (same values as tf.data).
inline constexpr int64_t kInfiniteCardinality = -1;
/// cardinality() when it cannot be known without iterating (after filter, for instance).
inline constexpr int64_t kUnknownCardinality = -2;

// ---------------------------------------------------------------------------------------------
// Elements

/// One batch of strings (a "string tensor" of rank 1): what batch() makes of a string component.
using Strings = std::vector<std::string>;
/// A component is a Tensor, a single string (e.g. a file path), or a batch of strings.
using Component = std::variant<Tensor, std::string, Strings>;

/// One element of a dataset: a tuple of components, e.g. {image, label} or {path}.
/// Tensors in elements may be views that share storage with the source (from_tensor_slices
/// slices without copying, cache replays the same tensors): map functions must treat their
/// input tensors as read-only and write results into new tensors.
struct Element {
  std::vector<Component> parts;  ///< the components, in order

  Element() = default;  ///< no components
  /// `Element{image, label}`.
  Element(std::initializer_list<Component> components) : parts(components) {}
  /// From a vector of components.
  explicit Element(std::vector<Component> components) : parts(std::move(components)) {}

  size_t size() const { return parts.size(); }             ///< the number of components
  Component& operator[](size_t i) { return parts.at(i); }  ///< component i (bounds-checked)
  /// Component i (bounds-checked).
  const Component& operator[](size_t i) const { return parts.at(i); }
  ///@{
  /// Typed access; throws lockstep::Error naming the index and the actual kind on mismatch.
  const Tensor& tensor(size_t i) const;
  Tensor& tensor(size_t i);
  const std::string& string(size_t i) const;
  const Strings& strings(size_t i) const;
  ///@}
  /// Whether component i is a Tensor.
  bool is_tensor(size_t i) const { return std::holds_alternative<Tensor>(parts.at(i)); }
  /// Short description for messages: (float32[28,28,1], int32[], "a/b.jpg").
  std::string str() const;
};

/// What a component holds: a Tensor, one string, or a batch of strings (Strings).
enum class ComponentKind : uint8_t { tensor, string, strings };

/// Static type of one component. For tensors: dtype and shape, -1 where a dimension is unknown
/// (e.g. the batch dimension of batch() without drop_remainder). For strings: shape is (),
/// for Strings: (batch).
struct ComponentSpec {
  ComponentKind kind = ComponentKind::tensor;             ///< tensor, string or strings
  DType dtype = DType::f32;                               ///< a tensor's dtype
  Shape shape;                                            ///< its shape (-1: unknown)
  bool operator==(const ComponentSpec&) const = default;  ///< same kind, dtype and shape
  std::string str() const;  ///< "float32(None, 28, 28, 1)", "string()", "strings(32,)"
};

/// Static type of an element: one ComponentSpec per component (tf.data's element_spec).
struct ElementSpec {
  std::vector<ComponentSpec> components;                ///< in order
  bool operator==(const ElementSpec&) const = default;  ///< the same components
  std::string str() const;  ///< "(float32(None, 28, 28, 1), int32(None,))"
};

/// The spec of a concrete element (all dims known).
ElementSpec spec_of(const Element& element);

/// Splits a global batch into num_replicas per-replica batches along dimension 0 (views, no
/// copy; Strings are split too, single strings are copied to every replica). Throws
/// lockstep::Error if the batch size is not divisible by num_replicas or the components disagree
/// on the batch size.
std::vector<Element> split_batch(const Element& global_batch, int num_replicas);

/// Stacks elements of identical spec along a new dimension 0 (what batch() does): tensors are
/// stacked, strings become Strings. Throws naming the first mismatching element / component.
Element stack_elements(const std::vector<Element>& elements);

// ---------------------------------------------------------------------------------------------
// Options

/// Pipeline-wide options, set with Dataset::with_options and read by every stage of an
/// iterator (the options of the dataset the iterator is made from win).
///
/// Autotune policy (documented, deliberately simple):
///  - A CPU budget B = max_threads (0: std::thread::hardware_concurrency()). A map with
///    num_parallel_calls = AUTOTUNE starts with 1 call in flight and adds one each time the
///    consumer has to wait for its next result, up to B. prefetch(AUTOTUNE) starts with a
///    buffer of 1 and doubles it each time the consumer finds it empty after the producer
///    had been running, up to max_prefetch. interleave cycle_length = AUTOTUNE means B.
///  - Nothing shrinks: input rate in training is stationary enough that a high-water mark
///    is what we want, and shrinking would oscillate.
struct Options {
  /// false: stages may emit results as soon as they are ready (map, interleave), trading
  /// order for throughput. Per-stage `deterministic` settings override this.
  bool deterministic = true;
  /// CPU budget for parallel stages (0 = hardware concurrency).
  int max_threads = 0;
  /// Upper bound for AUTOTUNE prefetch buffers, in elements.
  int max_prefetch = 16;
  /// false: AUTOTUNE values resolve to their maxima at once (B calls, max_prefetch buffer).
  bool autotune = true;
};

/// What a map function may know about the element it is given: enough to key a random
/// stream that is identical at any thread count.
struct MapContext {
  uint64_t seed = 0;  ///< MapOptions::seed
  int64_t epoch = 0;  ///< the iterator's epoch (Dataset::iterator(epoch))
  int64_t index = 0;  ///< position of the element in this map's input, counted from 0 per epoch
  /// Distinguishes re-instantiations of this stage within one epoch: 0 for the first pass;
  /// repeat()'s k-th pass and interleave's per-input datasets get distinct values, so a seeded
  /// map before repeat() still draws fresh numbers on every repetition.
  uint64_t stream = 0;
  /// A Philox stream unique to (seed, epoch, stream, index).
  Philox rng() const;
  /// A 64-bit key unique to (seed, epoch, stream, index), e.g. to derive several streams.
  uint64_t key() const;
};

/// A map function: one element in, one out (Dataset::map).
using MapFn = std::function<Element(Element)>;
/// A map function that also gets the element's MapContext (seeded randomness).
using MapFnWithContext = std::function<Element(Element, const MapContext&)>;
/// A filter's test: keep the element when it returns true (Dataset::filter).
using Predicate = std::function<bool(const Element&)>;

/// Dataset::map's options (tf.data's num_parallel_calls, deterministic, name).
struct MapOptions {
  int num_parallel_calls = 0;         ///< 0 or 1: sequential; N: N calls in flight; AUTOTUNE
  std::optional<bool> deterministic;  ///< unset: Options::deterministic
  uint64_t seed = 0;                  ///< MapContext::seed
  /// Identifies the function in the pipeline description that keys file caches: change it
  /// (e.g. "decode_v2") when the function's behaviour changes, so old cache files are rebuilt.
  std::string name = "map";
  std::optional<ElementSpec> output_spec;  ///< lets element_spec() see through this map
};

/// Dataset::shuffle's options (tf.data's seed, reshuffle_each_iteration).
struct ShuffleOptions {
  std::optional<uint64_t> seed;  ///< unset: a random seed drawn when the dataset is built
  /// true: each epoch gets its own order (seed mixed with the epoch); false: every epoch the same.
  bool reshuffle_each_iteration = true;
};

/// Dataset::batch's options.
struct BatchOptions {
  bool drop_remainder = false;  ///< drop a last batch smaller than batch_size
};

/// Dataset::interleave's options (tf.data's names and defaults).
struct InterleaveOptions {
  int cycle_length = AUTOTUNE;        ///< input elements open at once; AUTOTUNE = CPU budget
  int block_length = 1;               ///< consecutive elements taken from each before moving on
  int num_parallel_calls = 0;         ///< 0: sequential; N or AUTOTUNE: fetch blocks on the pool
  std::optional<bool> deterministic;  ///< unset: Options::deterministic
  std::string name = "interleave";    ///< keys file caches, like MapOptions::name
};

/// Dataset::list_files's options.
struct ListFilesOptions {
  bool shuffle = true;           ///< like tf.data: sorted, then shuffled
  std::optional<uint64_t> seed;  ///< unset with shuffle=true: a random seed
};

/// Dataset::from_generator's options.
struct GeneratorOptions {
  std::string name = "generator";          ///< keys file caches, like MapOptions::name
  std::optional<ElementSpec> output_spec;  ///< lets element_spec() know the elements
};

// ---------------------------------------------------------------------------------------------
// Iterator

class IteratorNode;  ///< internal
struct IteratorContext;

/// One pass over a dataset. Move-only. Not thread-safe: call next() from one thread.
class Iterator {
 public:
  Iterator(Iterator&&) noexcept;             ///< moves the pass (the source is left empty)
  Iterator& operator=(Iterator&&) noexcept;  ///< moves the pass
  ~Iterator();  ///< cancels pending work, joins threads; prints the ignore_errors warning

  /// The next element, or nullopt at the end. Errors from user functions or sources are
  /// rethrown as lockstep::Error with the original message and the failing element's position;
  /// the iterator stays usable after an error (the failing element is dropped).
  std::optional<Element> next();
  bool next(Element& out);  ///< false at the end

  int64_t epoch() const;  ///< the epoch this pass was made for
  /// Elements dropped by ignore_errors() so far.
  int64_t errors_skipped() const;
  /// One line per tuned stage, e.g. "map(decode): parallelism 2/2; prefetch: buffer 4/16".
  std::string autotune_report() const;

  /// Range-for support: for (const Element& e : it) ...
  class Sentinel {};
  /// The range-for position: the current element.
  class Cursor {
   public:
    const Element& operator*() const { return *current_; }    ///< the current element
    const Element* operator->() const { return &*current_; }  ///< the current element
    /// Moves to the next element.
    Cursor& operator++() {
      current_ = it_->next();
      return *this;
    }
    bool operator==(Sentinel) const { return !current_.has_value(); }  ///< at the end

   private:
    friend class Iterator;
    Iterator* it_ = nullptr;
    std::optional<Element> current_;
  };
  Cursor begin();                ///< fetches the first element
  Sentinel end() { return {}; }  ///< the end of the pass

 private:
  friend class Dataset;
  Iterator(std::unique_ptr<IteratorNode> root, std::shared_ptr<IteratorContext> ctx);
  std::unique_ptr<IteratorNode> root_;
  std::shared_ptr<IteratorContext> ctx_;
};

// ---------------------------------------------------------------------------------------------
// Dataset

class DatasetNode;  ///< internal

/// tf.data's Dataset: a pipeline of elements (each a tuple of components: tensors or
/// strings), built from sources and transformations, each returning a new Dataset. Cheap to
/// copy (the pipeline is shared); iterate with iterator(), or hand it to Model::fit.
class Dataset {
 public:
  // --- sources

  /// Slices every component along dimension 0: element i is {c0[i], c1[i], ...} (tensor views,
  /// no copy; a Strings component gives its i-th string). All components need the same dim 0.
  static Dataset from_tensor_slices(std::vector<Component> components);
  /// One tensor sliced along dimension 0: elements {t[i]}.
  static Dataset from_tensor_slices(const Tensor& t) { return from_tensor_slices({Component(t)}); }
  /// Strings one by one: elements {s[i]} (file paths, say).
  static Dataset from_tensor_slices(const Strings& s) { return from_tensor_slices({Component(s)}); }
  /// One element.
  static Dataset from_tensors(Element element);
  /// i64 scalars start, start+step, ... < stop (or > stop for negative step).
  static Dataset range(int64_t stop) { return range(0, stop, 1); }
  /// i64 scalars start, start + step, ... before stop.
  static Dataset range(int64_t start, int64_t stop, int64_t step = 1);
  /// File paths (one string component) matching a glob pattern (*, ?, [...] in any path
  /// component, POSIX glob(3)), sorted by name, then shuffled if options.shuffle. Throws if
  /// nothing matches, naming the pattern.
  static Dataset list_files(const std::string& pattern, ListFilesOptions options = {});
  /// factory() is called once per iterator and returns a generator; the generator returns the
  /// next element or nullopt at the end. It runs on whichever thread pulls (never concurrently).
  using Generator = std::function<std::optional<Element>()>;
  /// A dataset of what factory()'s generators return (tf.data.Dataset.from_generator).
  static Dataset from_generator(std::function<Generator()> factory, GeneratorOptions options = {});
  /// Elements of all datasets side by side: {a..., b..., ...} (components concatenated); ends
  /// with the shortest.
  static Dataset zip(std::vector<Dataset> datasets);

  // --- transformations (each returns a new Dataset; this one is unchanged)

  /// fn applied to each element, num_parallel_calls at a time (in order unless deterministic
  /// is false and op determinism is off).
  Dataset map(MapFn fn, MapOptions options = {}) const;
  /// map with each element's MapContext (a Philox stream keyed by seed, epoch and index).
  Dataset map(MapFnWithContext fn, MapOptions options = {}) const;
  /// The elements for which predicate returns true.
  Dataset filter(Predicate predicate) const;
  /// Fills a buffer of buffer_size elements, emits a uniformly random one and refills.
  Dataset shuffle(int64_t buffer_size, ShuffleOptions options = {}) const;
  /// Stacks batch_size consecutive elements (see stack_elements); the last smaller batch is
  /// kept unless drop_remainder.
  Dataset batch(int64_t batch_size, BatchOptions options = {}) const;
  /// Inverse of batch: splits every component along dimension 0.
  Dataset unbatch() const;
  /// A background producer thread keeps up to buffer_size elements ready (AUTOTUNE: tuned).
  Dataset prefetch(int buffer_size = AUTOTUNE) const;
  /// filename empty: in memory. The first pass that runs to the end fills the cache; later
  /// passes (of any iterator of this dataset) replay it without running the upstream.
  /// With a filename: the first full pass writes the file (to filename + ".tmp-<pid>-<n>", then
  /// an atomic rename), later passes and later runs read it. A file whose fingerprint (hash of
  /// the upstream pipeline description: stage names/parameters, source data or the sizes and
  /// mtimes of listed files) differs, or which is truncated/incomplete, is rebuilt, with one
  /// line on stderr saying why. User functions are known by their MapOptions/GeneratorOptions
  /// name only: rename (e.g. "decode_v2") after changing one. A shuffle without a seed upstream
  /// draws a new seed per run and so invalidates the file every run: cache before shuffling.
  Dataset cache(const std::string& filename = "") const;
  /// count < 0: forever.
  Dataset repeat(int64_t count = -1) const;
  Dataset take(int64_t count) const;  ///< count < 0: all
  Dataset skip(int64_t count) const;  ///< count < 0: all
  /// Keeps elements i with i % num_shards == index.
  Dataset shard(int64_t num_shards, int64_t index) const;
  /// fn turns each input element into a dataset; cycle_length of them are read round robin,
  /// block_length elements at a time.
  Dataset interleave(std::function<Dataset(Element)> fn, InterleaveOptions options = {}) const;
  /// Prepends an i64 scalar counter: {i, components...}.
  Dataset enumerate(int64_t start = 0) const;
  /// Drops elements whose production threw (upstream map, generator, decoder), counts them
  /// (Iterator::errors_skipped) and prints one warning line on stderr when the iterator ends or
  /// is destroyed. Place it after the stage that may fail and before batch().
  Dataset ignore_errors() const;
  /// This dataset with the pipeline options replaced (tf.data's with_options).
  Dataset with_options(Options options) const;

  // --- distribution (AutoShardPolicy::FILE)

  /// True when a source of this pipeline enumerates files or paths: list_files, the path list
  /// of image_dataset_from_directory, from_tensor_slices of strings.
  bool reads_files() const;
  /// This pipeline with shard(num_shards, index) placed right after each file source, so a
  /// worker opens and decodes only its share of the files; everything downstream (map,
  /// shuffle, batch, cache to a per-shard file) runs on that share. Throws without a file
  /// source. File sources must list the same files in the same order on every worker.
  Dataset shard_files(int64_t num_shards, int64_t index) const;

  // --- iteration

  /// A fresh pass for the given epoch (keys reshuffle_each_iteration and MapContext::epoch).
  Iterator iterator(int64_t epoch) const;
  /// A fresh pass; the epoch counts the iterators made from this Dataset value (and its
  /// copies) so far: 0, 1, 2, ... (tf.data's behaviour for `for x in ds`).
  Iterator iterator() const;
  /// All elements of one pass (epoch 0 unless given); throws for an infinite dataset.
  std::vector<Element> collect(int64_t epoch = 0) const;

  // --- introspection

  /// Number of elements when known statically; kInfiniteCardinality or kUnknownCardinality.
  int64_t cardinality() const;
  /// Static element spec; nullopt when a stage hides it (map/generator/interleave without
  /// output_spec).
  std::optional<ElementSpec> element_spec() const;
  /// element_spec(), or the spec of the first element of a fresh epoch-0 pass when unknown
  /// (runs the pipeline for one element).
  ElementSpec probe_element_spec() const;
  /// Pipeline description, e.g. "range(0,10,1) -> map(decode, 2) -> batch(4)".
  std::string description() const;
  const Options& options() const { return options_; }  ///< the pipeline options

  Dataset() = default;                             ///< an empty, invalid dataset; any use throws
  bool valid() const { return node_ != nullptr; }  ///< not default-constructed

 private:
  friend struct DatasetAccess;  ///< internal stages that open nested datasets (interleave)
  explicit Dataset(std::shared_ptr<const DatasetNode> node, Options options = {});
  Dataset wrap(std::shared_ptr<const DatasetNode> node) const;
  const DatasetNode& node() const;

  std::shared_ptr<const DatasetNode> node_;
  Options options_;
  std::shared_ptr<std::atomic<int64_t>> iterations_;  ///< for iterator() without an epoch
};

/// The process-wide pool that runs pipeline tasks (sized to hardware concurrency, at least 2).
ThreadPool& pipeline_pool();

}  // namespace lockstep::data
