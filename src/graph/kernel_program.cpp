// The program of a kernel backend (graph/internal/kernel_program.h). Contents:
//   KernelProgram        the compiled program: schedule, arena, kernels, run, profile
//   plan_weight_cache()  the nodes computed from unwritten weights alone, run only when stale
//   plan_arena()         buffer lifetimes of the scheduled graph -> plan_memory -> views
//   build_kernel()       a node's kernel: the backend's, the reference fallback, bf16 adapter
//   run_eager()          op by op with fresh buffers (run_eagerly, the test oracle)
#include "graph/internal/kernel_program.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "graph/internal/memory_plan.h"
#include "graph/internal/passes.h"
#include "lockstep/core/config.h"
#include "lockstep/core/device_allocator.h"
#include "lockstep/core/env.h"
#include "lockstep/graph/backends.h"
#include "lockstep/graph/executable.h"

namespace lockstep {

namespace {

struct Step {
  int node = -1;
  std::unique_ptr<Kernel> kernel;
  std::vector<Tensor> in, out;
  KernelArgs args;
  double seconds = 0;  // accumulated when LOCKSTEP_PROFILE is set
};

// LOCKSTEP_PROFILE=1: time every kernel and print a per-op table when the program dies.
bool profiling_enabled() {
  static const bool on = env::flag(env::profile);
  return on;
}

// A node of a `backend` program runs the reference kernel: a report line, or in strict mode an
// error naming the op and the backend.
void note_fallback(const Node& nd, const std::string& backend, const std::string& why, bool strict,
                   std::vector<std::string>* report) {
  LS_CHECK(!strict, "op '", nd.op, "' (", nd.name, ") would run the reference kernel on backend '",
           backend, "' (", why, ") and strict kernels are on (CompileOptions::strict_kernels or ",
           "LOCKSTEP_STRICT_KERNELS=1): compile for backend \"reference\", or turn strict off");
  if (report)
    report->push_back("fallback: " + nd.op + " runs the reference kernel on '" + backend +
                      "': " + why);
}

bool has_bf16(const Node& nd, const std::vector<TensorType>& in_types) {
  for (const TensorType& t : in_types)
    if (t.dtype == DType::bf16) return true;
  for (const TensorType& t : nd.outputs)
    if (t.dtype == DType::bf16) return true;
  return false;
}

// Builds nd's kernel for `backend`. A backend that cannot run it falls back to the reference
// kernel, and so may a backend's own factory for shapes it does not cover: both are noted.
std::unique_ptr<Kernel> build_kernel(const Node& nd, const std::vector<TensorType>& in_types,
                                     const Backend& backend, bool strict,
                                     std::vector<std::string>* report) {
  const OpRegistry& registry = OpRegistry::get();
  std::string why, used = backend.name();
  const KernelFactory* f = nullptr;
  if (backend.can_run(nd, in_types, &why)) {
    f = registry.kernel(nd.op, used);
  } else if (used != kReferenceBackend) {
    f = registry.kernel(nd.op, kReferenceBackend);
    if (f) note_fallback(nd, used, why, strict, report);
    used = kReferenceBackend;
  }
  LS_CHECK(f, "op '", nd.op, "' (", nd.name, ") has no kernel for backend '", backend.name(), "'",
           why.empty() ? "" : ": " + why);
  std::unique_ptr<Kernel> kernel;
  if (has_bf16(nd, in_types) && !registry.kernel_takes_bf16(nd.op, used)) {
    kernel = bf16_via_f32(nd, in_types, *f);
    if (report) report->push_back("bf16: " + nd.op + " runs its f32 kernel between conversions");
  } else {
    kernel = (*f)(nd, in_types);
  }
  if (std::string reason = kernel->fallback_reason(); !reason.empty())
    note_fallback(nd, backend.name(), reason, strict, report);
  return kernel;
}

class KernelProgram final : public CompiledGraph {
 public:
  KernelProgram(Graph g, std::vector<Value> inputs, std::vector<Value> outputs,
                const CompileOptions& options, const StepInfo* step, const Backend& backend)
      : graph_(std::move(g)),
        options_(options),
        backend_(backend),
        step_(step),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {
    allocator_ = &device_allocator(options_.device);  // throws, naming a device with no backend
    LS_CHECK(!options_.eager || allocator_->host_accessible(), "Executable: run_eagerly runs on ",
             "the host; device ", options_.device.str(), " needs a compiled executable");
    strict_ = options_.strict_kernels || env::flag(env::strict_kernels);
    schedule_ = schedule_nodes(graph_, outputs_);
    // Inputs the live graph does not read still get a buffer the caller can write.
    for (Value v : inputs_)
      if (std::find(schedule_.begin(), schedule_.end(), v.node) == schedule_.end())
        schedule_.insert(schedule_.begin(), v.node);
    for (int i : schedule_)
      for (auto& t : graph_.node(i).outputs)
        LS_CHECK(t.shape.is_known(), graph_.node(i).op, " '", graph_.node(i).name,
                 "': output shape ", t.shape.str(), " is not known at compile time");
    if (options_.eager) {
      for (Value v : inputs_)
        input_tensors_.push_back(Tensor::zeros(graph_.type(v).shape, graph_.type(v).dtype));
    } else {
      plan_weight_cache();
      plan_arena();
      build_kernels();
    }
  }
  ~KernelProgram() override {
    if (options_.residence && (uses_constants_ || writes_held_)) options_.residence->forget(this);
    if (profiling_enabled() && step_->step > 0 && !steps_.empty()) print_profile();
    steps_.clear();
    if (arena_) allocator_->deallocate(arena_);
    if (workspace_) allocator_->deallocate(workspace_);
  }

  Tensor& input(int i) override { return input_tensors_[size_t(i)]; }
  int num_inputs() const override { return int(input_tensors_.size()); }
  const Tensor& output(int i) const override { return output_tensors_[size_t(i)]; }
  int num_outputs() const override { return int(output_tensors_.size()); }
  void copy_input_from_host(int i, const Tensor& host) override {
    allocator_->copy_from_host(input_tensors_[size_t(i)].raw(), host.raw(), host.nbytes());
  }
  void copy_output_to_host(int i, Tensor& host) const override {
    allocator_->copy_to_host(host.raw(), output_tensors_[size_t(i)].raw(), host.nbytes());
  }
  void run() override;
  size_t arena_bytes() const override { return arena_bytes_; }
  size_t unplanned_bytes() const override { return unplanned_bytes_; }
  size_t workspace_bytes() const override { return workspace_bytes_; }
  int num_scheduled() const override { return int(schedule_.size()); }
  const Graph& graph() const override { return graph_; }
  const std::vector<std::string>& report() const override { return report_; }

 private:
  void plan_weight_cache();
  void plan_arena();
  void build_kernels();
  void run_steps(size_t begin, size_t end);
  void run_eager();
  void print_profile() const;

  Graph graph_;
  CompileOptions options_;
  const Backend& backend_;
  const StepInfo* step_;
  bool strict_ = false;
  std::vector<Value> inputs_, outputs_;
  std::vector<int> schedule_;
  std::vector<std::vector<Tensor>> values_;  // per node, per output: views
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<Tensor> input_tensors_, output_tensors_;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0, unplanned_bytes_ = 0, workspace_bytes_ = 0;
  void* workspace_ = nullptr;
  DeviceAllocator* allocator_ = nullptr;  // of options_.device: arena and workspace
  std::vector<std::string> report_;
  // The weight cache (plan_weight_cache): per node, whether it is computed from variables the
  // program does not write alone; its steps come first, cached_steps_ of them, and run when
  // the values they read may have changed.
  std::vector<char> cached_;
  size_t cached_steps_ = 0;
  bool writes_held_ = false;     // a side effect writes a variable the residence holds
  bool uses_constants_ = false;  // cached steps, or steps with constant inputs
  uint64_t constants_version_ =
      0;                      // KernelArgs::constants_version: moves at each refill (0: none yet)
  uint64_t cache_epoch_ = 0;  // variable_host_epoch() when the cached steps last ran
};

// The nodes whose values depend on variables alone that no node of this program writes, held by
// the model's DeviceResidence (so every program and host write of them is announced): a batch
// norm folded into its conv's weights, a weight's bf16 cast. Their values stay in the arena
// between runs and are recomputed only when the residence or variable_host_epoch() says a
// variable may have changed. Random ops (a "seed" attribute) and nodes without inputs are not
// cached. The schedule puts them first (their inputs are variables and each other), so one
// prefix of the steps computes them.
void KernelProgram::plan_weight_cache() {
  const std::shared_ptr<DeviceResidence>& residence = options_.residence;
  if (!residence || !env::flag(env::weight_cache)) return;
  const OpRegistry& registry = OpRegistry::get();
  std::set<const Variable*> written;
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    if (!registry.op(nd.op).side_effects) continue;
    if (nd.variable) written.insert(nd.variable.get());
    for (Value v : nd.inputs)
      if (const Node& in = graph_.node(v.node); in.variable) written.insert(in.variable.get());
  }
  for (const Variable* v : written) writes_held_ = writes_held_ || residence->holds(v);
  cached_.assign(size_t(graph_.size()), 0);
  int count = 0;
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = registry.op(nd.op);
    bool c = false;
    if (def.source == Source::variable) {
      c = nd.variable && residence->holds(nd.variable.get()) && !written.count(nd.variable.get());
    } else if (def.source == Source::none && !def.side_effects && !def.attr("seed") &&
               !nd.inputs.empty()) {
      c = true;
      for (Value v : nd.inputs) c = c && cached_[size_t(v.node)];
    }
    cached_[size_t(i)] = c;
    count += c && def.source == Source::none && def.alias_input < 0;
  }
  if (count == 0) return;  // (constant variables alone may still be read: build_kernels)
  std::stable_partition(schedule_.begin(), schedule_.end(),
                        [&](int i) { return cached_[size_t(i)] != 0; });
  report_.push_back("weight cache: " + std::to_string(count) +
                    " nodes computed from unwritten weights run only when they change");
}

// A step bigger than the machine: say so with the planner's figure, before the allocation
// (which the kernel would grant lazily and the step would then die touching).
static void check_fits_in_memory(size_t arena_bytes, size_t unplanned_bytes) {
  const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  LS_CHECK(ram <= 0 || double(arena_bytes) <= ram, "the compiled step's intermediates need ",
           arena_bytes >> 20, " MiB (the memory planner's arena; ", unplanned_bytes >> 20,
           " MiB without reuse) and this machine has ", int64_t(ram) >> 20,
           " MiB: lower the batch size or the sequence length (Model::step_memory(batch) "
           "shows the peak before fit)");
}

void KernelProgram::plan_arena() {
  const OpRegistry& registry = OpRegistry::get();
  std::vector<int> pos(size_t(graph_.size()), -1);
  for (int k = 0; k < int(schedule_.size()); ++k) pos[size_t(schedule_[size_t(k)])] = k;
  const int end = int(schedule_.size());
  // Root buffer of each value (a view shares its input's); variables keep their own storage.
  std::map<std::pair<int, int>, int> buf_of;
  std::vector<BufferLife> bufs;
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = registry.op(nd.op);
    for (int k = 0; k < int(nd.outputs.size()); ++k) {
      if (k == 0 && def.alias_input >= 0) {
        Value src = nd.inputs[size_t(def.alias_input)];
        if (auto it = buf_of.find({src.node, src.index}); it != buf_of.end())
          buf_of[{i, 0}] = it->second;  // (a view of a variable has none)
      } else if (def.source != Source::variable) {
        const TensorType& t = nd.outputs[size_t(k)];
        const int first = def.source == Source::placeholder ? 0 : pos[size_t(i)];
        buf_of[{i, k}] = int(bufs.size());
        bufs.push_back(
            {checked_bytes(t.shape, dtype_size(t.dtype), nd.op + " '" + nd.name + "' output"),
             first, first});
      }
    }
  }
  auto life = [&](Value v) -> BufferLife* {
    auto it = buf_of.find({v.node, v.index});
    return it == buf_of.end() ? nullptr : &bufs[size_t(it->second)];
  };
  for (int i : schedule_)
    for (Value v : graph_.node(i).inputs)
      if (BufferLife* b = life(v))
        // A cached value read by an uncached node is read again by the next runs.
        b->last =
            std::max(b->last, !cached_.empty() && cached_[size_t(v.node)] && !cached_[size_t(i)]
                                  ? end
                                  : pos[size_t(i)]);
  for (const auto& list : {outputs_, inputs_})  // fetched, and written by the caller
    for (Value v : list)
      if (BufferLife* b = life(v)) b->last = end;
  const MemoryPlan plan = plan_memory(bufs, kAlignment);
  arena_bytes_ = plan.arena_bytes;
  unplanned_bytes_ = plan.unplanned_bytes;
  if (allocator_->host_accessible()) check_fits_in_memory(arena_bytes_, unplanned_bytes_);
  arena_ = allocator_->allocate(std::max<size_t>(arena_bytes_, kAlignment));
  allocator_->zero(arena_, arena_bytes_);
  values_.assign(size_t(graph_.size()), {});
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = registry.op(nd.op);
    values_[size_t(i)].resize(nd.outputs.size());
    for (int k = 0; k < int(nd.outputs.size()); ++k) {
      const TensorType& t = nd.outputs[size_t(k)];
      Tensor& v = values_[size_t(i)][size_t(k)];
      if (k == 0 && def.alias_input >= 0) {
        Value src = nd.inputs[size_t(def.alias_input)];
        v = values_[size_t(src.node)][size_t(src.index)].reshape(t.shape);
      } else if (def.source == Source::variable) {
        LS_CHECK(nd.variable && nd.variable->value.defined(), "variable '", nd.name,
                 "' has no value");
        v = nd.variable->value;
      } else {
        const size_t offset = plan.offsets[size_t(buf_of.at({i, k}))];
        v = Tensor::borrow(static_cast<char*>(arena_) + offset, t.shape, t.dtype);
      }
    }
  }
  for (Value v : inputs_) input_tensors_.push_back(values_[size_t(v.node)][size_t(v.index)]);
  for (Value v : outputs_) output_tensors_.push_back(values_[size_t(v.node)][size_t(v.index)]);
  report_.push_back("memory: arena " + std::to_string(arena_bytes_ >> 10) + " KiB (" +
                    std::to_string(unplanned_bytes_ >> 10) + " KiB without reuse), " +
                    std::to_string(schedule_.size()) + " nodes");
}

void KernelProgram::build_kernels() {
  std::vector<std::string> fallbacks;
  const OpRegistry& registry = OpRegistry::get();
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = registry.op(nd.op);
    if (def.source != Source::none || def.alias_input >= 0) continue;
    // The reference fallback reads host memory: no host kernel on a device's arena.
    LS_CHECK(allocator_->host_accessible() || registry.kernel(nd.op, options_.backend), "op '",
             nd.op, "' (", nd.name, ") has no '", options_.backend, "' kernel, and the ",
             "host 'reference' kernel cannot run on ", options_.device.str(), "'s memory");
    auto st = std::make_unique<Step>();
    st->node = i;
    std::vector<TensorType> in_types;
    for (Value v : nd.inputs) {
      st->in.push_back(values_[size_t(v.node)][size_t(v.index)]);
      in_types.push_back(graph_.type(v));
    }
    st->out = values_[size_t(i)];
    st->kernel = build_kernel(nd, in_types, backend_, strict_, &fallbacks);
    if (std::string a = st->kernel->algorithm(); !a.empty())
      report_.push_back("algorithm: " + nd.op + " (" + nd.name + "): " + a);
    workspace_bytes_ = std::max(workspace_bytes_, st->kernel->workspace_bytes());
    if (!cached_.empty() && cached_[size_t(i)]) ++cached_steps_;
    steps_.push_back(std::move(st));
  }
  std::sort(fallbacks.begin(), fallbacks.end());
  fallbacks.erase(std::unique(fallbacks.begin(), fallbacks.end()), fallbacks.end());
  report_.insert(report_.end(), fallbacks.begin(), fallbacks.end());
  if (workspace_bytes_) workspace_ = allocator_->allocate(workspace_bytes_);
  for (auto& st : steps_) {
    st->args = KernelArgs{st->in.data(),       int(st->in.size()), st->out.data(),
                          int(st->out.size()), workspace_,         step_};
    // Inputs the weight cache keeps (unwritten variables and values computed from them alone),
    // read by a step that runs every time: the kernel may keep a reordered copy of them.
    const Node& nd = graph_.node(st->node);
    uint32_t mask = 0;
    for (size_t k = 0; k < nd.inputs.size() && k < 32 && !cached_.empty(); ++k)
      if (cached_[size_t(nd.inputs[k].node)] && !cached_[size_t(st->node)]) mask |= 1u << k;
    if (!mask) continue;
    st->args.constant_inputs = mask;
    st->args.constants_version = &constants_version_;
    st->kernel->set_constant_inputs(mask);
    uses_constants_ = true;
  }
}

void KernelProgram::run() {
  if (options_.eager) return run_eager();
  size_t first = 0;
  if (uses_constants_) {
    // Stale when another program or the host wrote a held variable since the last fill (the
    // residence's version), or host code was handed variables (the epoch).
    const uint64_t epoch = variable_host_epoch();
    const bool stale = options_.residence->before_run(this);
    if (stale || constants_version_ == 0 || epoch != cache_epoch_) {
      run_steps(0, cached_steps_);
      ++constants_version_;  // kernels refresh what they keep of the constant inputs
      cache_epoch_ = epoch;
    }
    first = cached_steps_;
  }
  run_steps(first, steps_.size());
  // This program's writes make the other programs' caches stale.
  if (writes_held_) options_.residence->after_run(this, [] {});
}

void KernelProgram::run_steps(size_t begin, size_t end) {
  if (!profiling_enabled()) {
    for (size_t k = begin; k < end; ++k) steps_[k]->kernel->run(steps_[k]->args);
    return;
  }
  for (size_t k = begin; k < end; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    steps_[k]->kernel->run(steps_[k]->args);
    steps_[k]->seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

void KernelProgram::print_profile() const {
  double total = 0;
  for (auto& st : steps_) total += st->seconds;
  std::vector<const Step*> order;
  for (auto& st : steps_) order.push_back(st.get());
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->seconds > b->seconds; });
  const double steps = double(step_->step);
  std::fprintf(stderr, "profile: %llu steps, %.3f ms/step in kernels\n",
               (unsigned long long)step_->step, 1e3 * total / steps);
  // Per op type first (where a model's time goes), then the costliest single kernels.
  std::map<std::string, std::pair<double, int>> by_op;
  for (const Step* st : order) {
    auto& e = by_op[graph_.node(st->node).op];
    e.first += st->seconds;
    ++e.second;
  }
  std::vector<std::pair<double, std::string>> ops;
  for (auto& [op, e] : by_op) ops.push_back({e.first, op});
  std::sort(ops.rbegin(), ops.rend());
  for (auto& [sec, op] : ops) {
    if (sec < 0.005 * total) break;
    std::fprintf(stderr, "  %6.2f ms %5.1f%%  %-22s x%d\n", 1e3 * sec / steps, 100.0 * sec / total,
                 op.c_str(), by_op[op].second);
  }
  std::fprintf(stderr, "  --\n");
  for (const Step* st : order) {
    if (st->seconds < 0.005 * total) break;
    const Node& nd = graph_.node(st->node);
    std::fprintf(stderr, "  %6.2f ms %5.1f%%  %-22s %s\n", 1e3 * st->seconds / steps,
                 100.0 * st->seconds / total, nd.op.name(), nd.name.c_str());
  }
}

void KernelProgram::run_eager() {
  const OpRegistry& registry = OpRegistry::get();
  std::map<std::pair<int, int>, Tensor> vals;
  for (size_t k = 0; k < inputs_.size(); ++k)
    vals[{inputs_[k].node, inputs_[k].index}] = input_tensors_[k];
  for (int i : schedule_) {
    const Node& nd = graph_.node(i);
    const OpDef& def = registry.op(nd.op);
    if (def.source == Source::placeholder) {
      LS_CHECK(vals.count({i, 0}), "eager: input '", nd.name, "' was not fed");
      continue;
    }
    if (def.source == Source::variable) {
      vals[{i, 0}] = nd.variable->value;
      continue;
    }
    std::vector<Tensor> in, out;
    std::vector<TensorType> in_types;
    for (Value v : nd.inputs) {
      in.push_back(vals.at({v.node, v.index}));
      in_types.push_back(graph_.type(v));
    }
    if (def.alias_input >= 0) {
      vals[{i, 0}] = in[size_t(def.alias_input)].reshape(nd.outputs[0].shape);
      continue;
    }
    for (auto& t : nd.outputs) out.push_back(Tensor::zeros(t.shape, t.dtype));
    auto kernel = build_kernel(nd, in_types, backend_, strict_, nullptr);
    std::vector<char> ws(kernel->workspace_bytes() + kAlignment);
    void* wsp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + kAlignment - 1) &
                                        ~uintptr_t(kAlignment - 1));
    KernelArgs args{in.data(), int(in.size()), out.data(), int(out.size()), wsp, step_};
    kernel->run(args);
    for (int k = 0; k < int(out.size()); ++k) vals[{i, k}] = out[size_t(k)];
  }
  output_tensors_.clear();
  for (Value v : outputs_) output_tensors_.push_back(vals.at({v.node, v.index}));
}

}  // namespace

std::unique_ptr<CompiledGraph> compile_kernel_program(Graph g, std::vector<Value> inputs,
                                                      std::vector<Value> outputs,
                                                      const CompileOptions& options,
                                                      const StepInfo* step,
                                                      const Backend& backend) {
  return std::make_unique<KernelProgram>(std::move(g), std::move(inputs), std::move(outputs),
                                         options, step, backend);
}

}  // namespace lockstep
