// One declaration per op (OpDef: name, signature, doc, typed attributes with defaults, shape
// function, gradient, kernel coverage) and the kernels each backend registers for it. The
// declarations are the source of docs/ops.md, and tests/ops/registry_test.cpp checks them
// against the registered kernels and the op table.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockstep/graph/backends.h"
#include "lockstep/graph/fused_activation.h"
#include "lockstep/graph/graph.h"
#include "lockstep/graph/op_ids.h"

namespace lockstep {

/// What a kernel sees at run time. Built once per executable; no allocation per step.
struct StepInfo {
  uint64_t step = 0;     ///< global step counter (RNG counter for dropout etc.)
  uint32_t replica = 0;  ///< replica id (decorrelates per-replica randomness)
  uint64_t seed = 0;     ///< model seed
  /// >= 0 (op determinism, lockstep/core/config.h): the global row of this replica's first
  /// example; random ops then key their draws by (seed, step, global row), not by replica.
  int64_t first_row = -1;
};

/// A kernel's operands for one run(): views of the node's input and output buffers (allocated
/// by the executable with the types the op's shape function inferred), its scratch and the step.
struct KernelArgs {
  const Tensor* inputs = nullptr;  ///< num_inputs tensors, in the node's input order
  int num_inputs = 0;              ///< the node's input count
  Tensor* outputs = nullptr;       ///< num_outputs tensors to write (already allocated)
  int num_outputs = 0;             ///< the node's output count
  void* workspace = nullptr;       ///< workspace_bytes() of scratch, valid during run()
  const StepInfo* step = nullptr;  ///< step counter, seed and replica (random ops read them)
  /// Bit i set: input i holds weights the program keeps between runs (a variable it does not
  /// write, or a value computed from such variables alone), whose contents change only when
  /// *constants_version does. A kernel may keep work derived from them (a reordered copy).
  uint32_t constant_inputs = 0;
  const uint64_t* constants_version = nullptr;         ///< see constant_inputs (null when none)
  const Tensor& in(int i) const { return inputs[i]; }  ///< Input `i` (not bounds-checked).
  Tensor& out(int i) const { return outputs[i]; }      ///< Output `i` (not bounds-checked).
};

/// One node's compiled computation on one backend, built once per program by its
/// KernelFactory (which may precompute from the node's shapes and attributes) and run every step.
class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Bytes of scratch memory run() needs (KernelArgs::workspace); default 0.
  virtual size_t workspace_bytes() const { return 0; }
  /// Computes the outputs from the inputs. Must not allocate: the step's memory is planned.
  virtual void run(const KernelArgs& args) = 0;
  /// Non-empty when a backend's factory handed this node to the reference kernel (shapes its
  /// own kernel does not cover): says why. The executable reports it; strict mode refuses it.
  virtual std::string fallback_reason() const { return {}; }
  /// Non-empty when the kernel chose an algorithm worth knowing (the cpu conv's "winograd"):
  /// the executable's report() lists it as "algorithm: <op> (<node>): <what>".
  virtual std::string algorithm() const { return {}; }
  /// Called once after the factory, before any run, with the KernelArgs::constant_inputs bits
  /// of its node: a kernel that keeps a reordered copy of such inputs allocates it here.
  virtual void set_constant_inputs(uint32_t mask) { (void)mask; }
};

/// Builds a kernel for one node with its concrete input types (shapes known).
using KernelFactory =
    std::function<std::unique_ptr<Kernel>(const Node&, const std::vector<TensorType>&)>;

/// Wraps a stateless lambda as a kernel factory.
template <typename Fn>
KernelFactory simple_kernel(Fn fn) {
  struct K : Kernel {
    Fn fn;
    const Node* node;
    K(Fn f, const Node* n) : fn(f), node(n) {}
    void run(const KernelArgs& a) override { fn(*node, a); }
  };
  return [fn](const Node& n, const std::vector<TensorType>&) -> std::unique_ptr<Kernel> {
    return std::make_unique<K>(fn, &n);
  };
}

/// The f32 kernel `f` builds, run between bf16 -> f32 and f32 -> bf16 conversions of the node's
/// bf16 inputs and outputs: what the executable does for a kernel without bf16 support, and
/// what a bf16-capable factory returns for a dtype mix it does not run natively.
std::unique_ptr<Kernel> bf16_via_f32(const Node& n, const std::vector<TensorType>& in,
                                     const KernelFactory& f);

class GradBuilder;

/// The type of a declared attribute. Reads are lenient where Attrs is: an int is accepted for a
/// float, a bool and (as [v, v]) an int list.
enum class AttrType { i64, f64, boolean, str, i64_list, f64_list };
const char* attr_type_name(AttrType t);  ///< "int", "float", "bool", "string", "int list", ...

/// An attribute without a default is either required (the shape function rejects a node without
/// it) or optional (its absence means something the doc says, e.g. conv2d's `pads`).
enum class NoDefault { required, optional };

/// One declared attribute: {"epsilon", AttrType::f64, 1e-3, "added to the variance"}.
struct AttrDecl {
  /// An attribute with a default (an int literal is accepted for a float attribute).
  AttrDecl(std::string name, AttrType type, AttrValue default_value, std::string doc);
  /// An attribute without a default: NoDefault::required or NoDefault::optional.
  AttrDecl(std::string name, AttrType type, NoDefault none, std::string doc);
  std::string name;                        ///< the key in the node's Attrs
  AttrType type;                           ///< the value's type
  std::optional<AttrValue> default_value;  ///< unset: see `required`
  bool required = false;                   ///< no default, and a node must set it
  std::string doc;                         ///< one line for docs/ops.md and errors
};

/// How the rows of a batch (dim 0) of a node's inputs reach its outputs (OpDef::rows).
enum class RowRule {
  mixed,  ///< may combine rows (batch statistics, losses, matmul over the batch): never tiled
  /// Elementwise: each output element from the same element of each operand (numpy
  /// broadcasting), so row r of y from row r of each operand that has rows.
  pointwise,
  per_row,   ///< input 0's row r gives y's row r, the other inputs being weights or statistics
  by_attrs,  ///< OpDef::keeps_rows decides from the node's attributes (softmax's axis, ...)
};

/// What a fusion pass may do with an op (OpDef::fusion, a bit set).
enum FusionRole : uint32_t {
  kFuseNone = 0,
  /// y = f(x), a FusedActivation (OpDef::fused_as): a producer that declares it in
  /// takes_activations applies it to its own output (fuse_activations, src/ops/fusions.cpp).
  kFuseActivation = 1u << 0,
  /// dx = f'(dy, y) from the activation's output y (relu_grad, relu6_grad): a batch-norm or
  /// pooling gradient with an "activation" attribute masks its own dy (fuse_activation_grads).
  kFuseActivationGrad = 1u << 1,
  kFuseBias = 1u << 2,  ///< y = x + bias[C]: a producer with kFuseTakesBias takes it
  kFuseResidual =
      1u << 3,  ///< y = a + b: a producer with kFuseTakesResidual takes the other operand
  /// Has an "activation" attribute its kernel applies last: the FusedActivations in
  /// OpDef::takes_activations.
  kFuseTakesActivation = 1u << 4,
  kFuseTakesBias = 1u << 5,      ///< has a "fused_bias" attribute (bias as an extra input)
  kFuseTakesResidual = 1u << 6,  ///< has a "residual" attribute (z added before the activation)
  /// An optimizer update with "count" and inputs (var, grad, lr, slots...[, step]): neighbours of
  /// one optimizer merge into one pass over every variable.
  kFuseUpdate = 1u << 7,
  kFuseView = 1u << 8,        ///< identity: what a fused-away node becomes
  kFuseUpdateStep = 1u << 9,  ///< with kFuseUpdate: the last input is a step the run shares
  /// With kFuseActivation: its gradient reads only its output (relu_grad(dy, y)), so a producer
  /// that applies it still has a gradient (conv2d's grad applies the activation's own).
  kFuseGradFromOutput = 1u << 10,
  /// A gradient with an "activation" attribute that masks its own output by the derivative of a
  /// FusedActivation in OpDef::takes_activations, taking a kFuseActivationGrad node's place.
  kFuseTakesActivationGrad = 1u << 11,
};

/// A node that computes nothing (OpDef::source): the program's placeholders and variable reads.
enum class Source {
  none,         ///< computes its outputs from its inputs
  placeholder,  ///< fed each step (input): a buffer live for the whole program
  variable,     ///< a variable's own storage, outside the arena
};

/// The ONNX form of an op (OpDef::onnx). `op` is an ONNX operator (ai.onnx) the exporter writes
/// as one node on the op's input; `recipe` names a small ONNX subgraph the exporter builds instead
/// ("clip:0:6", "x*sigmoid(x)", "erf_gelu", ...: src/onnx/onnx_graph.cpp); `none` says why the op
/// has no ONNX form (a training-only op, say). Exactly one is set on every declared op.
struct OnnxLowering {
  std::string op;      ///< an ai.onnx operator, "Relu"
  std::string recipe;  ///< a subgraph the exporter builds, "x*sigmoid(x)"
  std::string none;    ///< why there is no ONNX form, "training only"
  std::vector<std::pair<std::string, double>> attrs;  ///< float attributes of `op` ("alpha")
  /// True when none of op, recipe and none is set (the registry test refuses that).
  bool empty() const { return op.empty() && recipe.empty() && none.empty(); }
};

/// The StableHLO form of an op (OpDef::xla). Lowered by default: the xla backend registers a
/// lowering keyed by the op's id (src/backends/xla/lowering_*.cpp, register_lowering). `none`
/// says why an op has none (a host-only collective, say); the xla backend names that reason when
/// a graph holds the op. The xla module is optional, so the declaration holds only the reason: the
/// xla build's XlaLowering.EveryOpIsLoweredOrSaysWhyNot holds the two to each other (an op
/// without a lowering must give a reason, an op with a reason must have no lowering).
struct XlaLowering {
  std::string none;  ///< why the op has no StableHLO form; empty: it is lowered
  bool lowered() const { return none.empty(); }  ///< true when `none` is empty
};

/// An op's shape function: the node and its input types -> its output types (OpDef::infer).
using ShapeFn = std::function<std::vector<TensorType>(const Node&, const std::vector<TensorType>&)>;
/// An op's gradient: given the forward node and the gradients `dy` of its outputs, adds nodes
/// through the GradBuilder and returns one gradient per input (an invalid Value: none).
using GradFn =
    std::function<std::vector<Value>(GradBuilder&, const Node&, const std::vector<Value>& dy)>;

/// An op's declaration: everything the graph, the passes, the docs and the exporters need to know
/// about it, in one place. Registered once (OpRegistry::add, in a LOCKSTEP_REGISTER block of its
/// src/ops/ file); kernels are registered separately, per backend.
struct OpDef {
  OpId name;                    ///< op::conv2d: the op's id (op_ids.h), whose name nodes print
  std::string signature;        ///< inputs -> outputs, e.g. "(x[..., C], bias[C]) -> y"
  std::string doc;              ///< one line: what it computes
  std::vector<AttrDecl> attrs;  ///< every attribute a node of this op may carry
  /// Validates inputs/attrs and returns output types. Throw lockstep::Error on bad input;
  /// Graph::add prefixes the op and node name.
  ShapeFn infer;
  /// Builds gradient values for each input from the output gradients; empty = not differentiable.
  GradFn grad;
  bool side_effects = false;  ///< mutates node.variable (scheduled after all pure nodes)
  int alias_input = -1;       ///< output 0 is a view of this input (reshape, identity)
  /// Kernel coverage: the backends that register a kernel for this op ({} for placeholders and
  /// views, which run none). tests/ops/registry_test.cpp holds it to the registered kernels.
  std::vector<std::string> backends = host_backends();
  /// Non-empty: only a reference kernel, on purpose, and why. OpRegistry::add then sets
  /// backends = {"reference"}; a "cpu" executable reports the reason when it falls back.
  std::string reference_only;
  std::string group;  ///< its section of docs/ops.md (src/ops/op_docs.cpp)
  /// Mixed precision: the op also computes in bfloat16. When any input is bf16, Graph::add runs
  /// `infer` with bf16 inputs read as f32 and then gives bf16 to the float outputs listed in
  /// `bf16_outputs` (every float output when empty); the others (batch statistics, say) stay
  /// f32. A kernel registered without bf16 support runs through the executable's conversion
  /// adapter (bf16 -> f32, the f32 kernel, f32 -> bf16), so every such op works on every backend.
  bool bf16 = false;
  std::vector<int> bf16_outputs;  ///< the outputs that become bf16 (see `bf16`); {}: every float
  /// Its kernels walk flat memory and need operands of one shape (no broadcasting): a backend may
  /// hand it any memory layout, the same for every operand and output (the cpu backend's
  /// blocked nChw16c, see src/backends/cpu/layouts.cpp).
  bool layout_agnostic = false;
  /// How the rows of a batch (dim 0) flow through it, for predict's row tiles (RowRule).
  RowRule rows = RowRule::mixed;
  /// rows == RowRule::by_attrs: whether this node keeps rows apart, given its input types.
  /// in_rows[i]: input i carries the batch's rows (else it is a constant: weights, statistics).
  std::function<bool(const Node&, const std::vector<TensorType>& in,
                     const std::vector<bool>& in_rows)>
      keeps_rows;
  /// What fusion passes may do with it (FusionRole bits; the passes read these, never names).
  uint32_t fusion = 0;
  /// kFuseActivation: the FusedActivation this op is when a producer applies it (relu's is
  /// FusedActivation::relu). kFuseActivationGrad: the one whose gradient (from its output) it is.
  FusedActivation fused_as = FusedActivation::linear;
  /// kFuseTakesActivation: the fused activations its kernels apply ("activation" attribute);
  /// kFuseTakesActivationGrad: those whose derivative they mask by.
  FusedActivationSet takes_activations = 0;
  /// The Keras activation names this op implements (`activation="relu"` in a layer config):
  /// nn builds the op for each, and the list of valid activations is the union of these.
  std::vector<std::string> keras_activations;
  /// How the ONNX exporter writes it (OnnxLowering), or why there is no ONNX form.
  OnnxLowering onnx;
  /// Whether the xla backend lowers it to StableHLO, or why not (XlaLowering).
  XlaLowering xla;
  Source source = Source::none;  ///< placeholder / variable read / a real computation

  const AttrDecl* attr(const std::string& name) const;  ///< nullptr when undeclared
  std::string attr_names() const;                       ///< "axis, keepdims" for errors
};

/// The process's ops and kernels: every op's OpDef by name, and each backend's KernelFactory per
/// op. Filled at load time by the LOCKSTEP_REGISTER blocks of src/ops/ and src/backends/.
class OpRegistry {
 public:
  static OpRegistry& get();  ///< The one registry of the process.
  /// Declares an op; an error when the name is already declared. Sets backends = {"reference"}
  /// when def.reference_only is set.
  void add(OpDef def);
  /// The declaration of `id`; an error "unknown op" when it has none.
  const OpDef& op(OpId id) const;
  /// Whether op `id` is declared.
  bool has(OpId id) const { return id.valid() && ops_[size_t(id.code())] != nullptr; }
  /// takes_bf16: the kernel handles bf16 inputs/outputs itself (any mix with f32 its op allows).
  void add_kernel(OpId op, const std::string& backend, KernelFactory f, bool takes_bf16 = false);
  /// The factory `backend` registered for `op`; nullptr when it registered none.
  const KernelFactory* kernel(OpId op, const std::string& backend) const;
  /// Whether that kernel was registered with takes_bf16 (false when there is none).
  bool kernel_takes_bf16(OpId op, const std::string& backend) const;
  /// Every declared op name, sorted.
  std::vector<std::string> op_names() const;
  /// Every declared op, in id order.
  std::vector<const OpDef*> ops() const;
  /// The op declared kFuseActivation as fused activation `a`; nullptr when none is (linear).
  const OpDef* fused_activation_op(FusedActivation a) const;
  /// The op that implements Keras activation `name` ("relu", "silu"), nullptr when none does.
  const OpDef* activation_op(const std::string& name) const;
  /// Every Keras activation name some op declares, sorted.
  std::vector<std::string> activation_names() const;
  /// The backends with a kernel registered for `op` (sorted).
  std::vector<std::string> kernel_backends(OpId op) const;

 private:
  struct Kernels {
    std::unordered_map<std::string, KernelFactory> factory;  // by backend
    std::unordered_map<std::string, bool> takes_bf16;        // by backend
  };
  std::vector<std::unique_ptr<OpDef>> ops_ = std::vector<std::unique_ptr<OpDef>>(kOpCount);
  std::vector<Kernels> kernels_ = std::vector<Kernels>(kOpCount);
};

/// Checks the attributes of a node of `def` against its declaration: every key declared, every
/// value of a compatible type. Throws naming the op, the attribute and the valid ones.
/// (Graph::add runs it for every node.)
void check_attrs(const OpDef& def, const Attrs& attrs);

// ---- attribute reads with the declared defaults ----
/// attr_i(node, "axis"): the node's int attribute `key`, or else the default its op declares. An
/// unset attribute the op does not declare, or a required one, is an error naming the op; so is
/// a value of another type. Kernels read attributes in their factory (once per compile), not in
/// run().
int64_t attr_i(const Node& n, const std::string& key);
/// attr_f(node, "epsilon"): a float attribute (an int value is converted), as attr_i.
double attr_f(const Node& n, const std::string& key);
/// A bool attribute, as attr_i.
bool attr_b(const Node& n, const std::string& key);
/// A string attribute ("padding"), as attr_i.
const std::string& attr_s(const Node& n, const std::string& key);
/// An int-list attribute ("strides"), as attr_i.
const std::vector<int64_t>& attr_ints(const Node& n, const std::string& key);
/// A float-list attribute, as attr_i.
const std::vector<double>& attr_floats(const Node& n, const std::string& key);
/// A fused-activation attribute ("activation", "dw_activation") as the enum; an error naming the
/// op and the valid names when the value is none of them, or one the op does not declare in
/// OpDef::takes_activations.
FusedActivation attr_activation(const Node& n, const std::string& key = "activation");
/// attr_i for an attribute set `a` of op `op` that is not a node (lr_schedule's attrs, evaluated
/// on the host by train's schedule objects).
int64_t attr_i(OpId op, const Attrs& a, const std::string& key);
/// attr_f for an attribute set of op `op` that is not a node.
double attr_f(OpId op, const Attrs& a, const std::string& key);
/// attr_b for an attribute set of op `op` that is not a node.
bool attr_b(OpId op, const Attrs& a, const std::string& key);
/// attr_s for an attribute set of op `op` that is not a node.
const std::string& attr_s(OpId op, const Attrs& a, const std::string& key);
/// attr_ints for an attribute set of op `op` that is not a node.
const std::vector<int64_t>& attr_ints(OpId op, const Attrs& a, const std::string& key);
/// attr_floats for an attribute set of op `op` that is not a node.
const std::vector<double>& attr_floats(OpId op, const Attrs& a, const std::string& key);

// Static registration: LOCKSTEP_REGISTER(unique_id) { ...code run at load time... }
#define LS_CONCAT2(a, b) a##b
#define LS_CONCAT(a, b) LS_CONCAT2(a, b)
#define LOCKSTEP_REGISTER(id)                                                              \
  static void LS_CONCAT(ls_register_, id)();                                               \
  static const bool LS_CONCAT(ls_registered_, id) = (LS_CONCAT(ls_register_, id)(), true); \
  static void LS_CONCAT(ls_register_, id)()

}  // namespace lockstep
