// A StableHLO text emitter: builds one module with one `func.func @main`, op by op, in MLIR's
// generic syntax ("stablehlo.add"(%a, %b) : (...) -> ...), which every StableHLO parser reads
// whatever its pretty-printing rules. Only long-stable ops (StableHLO 1.x): a PJRT plugin
// accepts text only within its compatibility window (the CPU plugin of PyPI xla-cpu-pjrt
// reads StableHLO 1.13.3, minimum 0.9.0).
//
// Each helper checks its operands, works out the result type and returns the SSA value; the
// caller never writes types by hand. StableHLO does no implicit broadcasting: broadcast with
// broadcast_in_dim first. Every op carries the current location (set_location), so a compile
// error from the plugin names the Lockstep node that produced the op.
//
//   StablehloBuilder b;
//   HloValue x = b.argument({ElemType::f32, {2, 3}});
//   HloValue y = b.exponential(b.negate(x));
//   b.ret({y});
//   std::string mlir = b.module_text();   // PjrtClient::compile(mlir)
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/dtype.h"

namespace lockstep::xla {

enum class ElemType : uint8_t { f32, bf16, f16, i32, i64, i1, u8, u32, u64 };
// The MLIR spelling: f32, bf16, f16, i32, i64, i1, ui8, ui32, ui64.
const char* elem_name(ElemType t);
ElemType elem_of(DType t);
DType dtype_of_elem(ElemType t);  // i1 has no Lockstep dtype: an error
bool is_float(ElemType t);

// A ranked tensor type: tensor<2x3xf32>; no dims = a scalar, tensor<f32>.
struct HloType {
  ElemType elem = ElemType::f32;
  std::vector<int64_t> dims;
  std::string str() const;
  int rank() const { return int(dims.size()); }
  int64_t numel() const;
  HloType with_elem(ElemType e) const { return {e, dims}; }
  bool operator==(const HloType&) const = default;
};

// An SSA value of the module: its name in the text ("%v3", "%arg0", "%v7#1") and type.
struct HloValue {
  std::string name;
  HloType type;
};

enum class Compare { EQ, NE, GE, GT, LE, LT };
// The combiner of a reduce, reduce_window, all_reduce or select_and_scatter scatter.
enum class Reducer { add, max, min, mul };

// Convolution dimension numbers (the raw form): which dim of input, kernel and output is the
// batch, the feature and each spatial dim. nhwc() is Lockstep's conv2d: [b, 0, 1, f] x
// [0, 1, i, o] -> [b, 0, 1, f].
struct ConvDims {
  int64_t input_batch = 0, input_feature = 3;
  std::vector<int64_t> input_spatial = {1, 2};
  int64_t kernel_input_feature = 2, kernel_output_feature = 3;
  std::vector<int64_t> kernel_spatial = {0, 1};
  int64_t output_batch = 0, output_feature = 3;
  std::vector<int64_t> output_spatial = {1, 2};
  static ConvDims nhwc() { return {}; }
  std::string str() const;  // #stablehlo.conv<raw ...>
};

struct ConvWindow {
  std::vector<int64_t> strides;                      // per spatial dim; empty = all 1
  std::vector<std::pair<int64_t, int64_t>> padding;  // (low, high) per spatial dim; empty = 0
  std::vector<int64_t> lhs_dilation;                 // input dilation; empty = all 1
  std::vector<int64_t> rhs_dilation;                 // kernel dilation; empty = all 1
  int64_t feature_group_count = 1;
  int64_t batch_group_count = 1;
};

// reduce_window / select_and_scatter windows over every dim of the operand.
struct Window {
  std::vector<int64_t> dims;                         // window extent per dim
  std::vector<int64_t> strides;                      // empty = all 1
  std::vector<std::pair<int64_t, int64_t>> padding;  // empty = none
};

class StablehloBuilder {
 public:
  // ---- the function ----
  // A new argument of @main. alias_output >= 0: the argument's buffer may be reused for that
  // result (tf.aliasing_output), so a donated argument is updated in place.
  HloValue argument(const HloType& type, int alias_output = -1);
  // Sets (or changes) the result argument `index` aliases, once the results are known.
  void set_argument_alias(int index, int alias_output);
  // Ends @main returning `results` (call once, last).
  void ret(const std::vector<HloValue>& results);
  // The location attached to the ops emitted from now on (a Lockstep node: "op 'name' #id").
  void set_location(const std::string& loc) { location_ = loc; }
  // The replicas the module is compiled for (module attribute mhlo.num_replicas; default 1).
  void set_num_replicas(int n) { num_replicas_ = n; }
  // SPMD partitions (module attribute mhlo.num_partitions; default 1), and text placed at the
  // top of the module, before @main (Shardy's `sdy.mesh`).
  void set_num_partitions(int n) { num_partitions_ = n; }
  void set_module_preamble(const std::string& text) { preamble_ = text; }
  // Extra attributes of argument `index` / result `index` of @main, the text inside their
  // {...} ("mhlo.sharding = \"{replicated}\""); set after ret() for results.
  void set_argument_attributes(int index, const std::string& attrs);
  void set_result_attributes(int index, const std::string& attrs);
  std::string module_text() const;
  const std::vector<HloType>& result_types() const { return result_types_; }

  // ---- any op, in the generic syntax (the helpers below go through it) ----
  // `attrs` is the text inside {...} (empty: none). Returns one value per result type.
  std::vector<HloValue> op(const std::string& name, const std::vector<HloValue>& operands,
                           const std::vector<HloType>& results, const std::string& attrs = "");
  // A region of an op: its block's argument types, and `body`, which emits the region's ops
  // and returns what the region's stablehlo.return yields.
  using RegionBody = std::function<std::vector<HloValue>(const std::vector<HloValue>& args)>;
  struct Region {
    std::vector<HloType> block_args;
    RegionBody body;
  };
  std::vector<HloValue> op_with_regions(const std::string& name,
                                        const std::vector<HloValue>& operands,
                                        const std::vector<HloType>& results,
                                        const std::vector<Region>& regions,
                                        const std::string& attrs = "");
  // The region of a reduction: two scalars of `t` combined with `reducer`.
  Region reducer_region(ElemType t, Reducer reducer);

  // ---- constants and generators ----
  HloValue constant(const HloType& type, double value);  // every element = value
  HloValue constant(const HloType& type, const std::vector<double>& values);  // row-major
  HloValue iota(const HloType& type, int64_t dimension);

  // ---- elementwise (operands of one type; compare and select as StableHLO has them) ----
  HloValue add(const HloValue& a, const HloValue& b);
  HloValue subtract(const HloValue& a, const HloValue& b);
  HloValue multiply(const HloValue& a, const HloValue& b);
  HloValue divide(const HloValue& a, const HloValue& b);
  HloValue maximum(const HloValue& a, const HloValue& b);
  HloValue minimum(const HloValue& a, const HloValue& b);
  HloValue power(const HloValue& a, const HloValue& b);
  HloValue negate(const HloValue& x);
  HloValue exponential(const HloValue& x);
  HloValue exponential_minus_one(const HloValue& x);  // e^x - 1, exact near 0
  HloValue log(const HloValue& x);
  HloValue log_plus_one(const HloValue& x);
  HloValue sqrt(const HloValue& x);
  HloValue rsqrt(const HloValue& x);
  HloValue tanh(const HloValue& x);
  HloValue logistic(const HloValue& x);
  HloValue abs(const HloValue& x);
  HloValue sign(const HloValue& x);
  HloValue floor(const HloValue& x);
  HloValue ceil(const HloValue& x);
  HloValue round_nearest_afz(const HloValue& x);  // halves away from zero (llround)
  HloValue cosine(const HloValue& x);
  HloValue bitwise_xor(const HloValue& a, const HloValue& b);                 // integers
  HloValue shift_right_logical(const HloValue& a, const HloValue& b);         // integers
  HloValue compare(const HloValue& a, const HloValue& b, Compare direction);  // -> i1
  HloValue select(const HloValue& pred, const HloValue& on_true, const HloValue& on_false);
  HloValue convert(const HloValue& x, ElemType to);

  // ---- shapes ----
  // x broadcast to `dims`; x's dim i becomes result dim broadcast_dims[i].
  HloValue broadcast_in_dim(const HloValue& x, const std::vector<int64_t>& dims,
                            const std::vector<int64_t>& broadcast_dims);
  HloValue reshape(const HloValue& x, const std::vector<int64_t>& dims);
  HloValue transpose(const HloValue& x, const std::vector<int64_t>& permutation);
  HloValue slice(const HloValue& x, const std::vector<int64_t>& start,
                 const std::vector<int64_t>& limit, const std::vector<int64_t>& strides = {});
  HloValue concatenate(const std::vector<HloValue>& xs, int64_t dimension);
  // x[start[0] : start[0] + sizes[0], ...] with run-time starts (integer scalars of one type,
  // clamped into range as StableHLO does); and x with `update` written at those starts.
  HloValue dynamic_slice(const HloValue& x, const std::vector<HloValue>& start,
                         const std::vector<int64_t>& sizes);
  HloValue dynamic_update_slice(const HloValue& x, const HloValue& update,
                                const std::vector<HloValue>& start);

  // ---- control flow ----
  // stablehlo.while: `carry` starts as `init`; while cond(carry) (an i1 scalar), carry =
  // body(carry). Returns the final carry. Both functions emit their region's ops.
  std::vector<HloValue> while_loop(const std::vector<HloValue>& init, const RegionBody& cond,
                                   const RegionBody& body);
  HloValue reverse(const HloValue& x, const std::vector<int64_t>& dims);
  HloValue pad(const HloValue& x, const HloValue& pad_value, const std::vector<int64_t>& low,
               const std::vector<int64_t>& high, const std::vector<int64_t>& interior = {});

  // ---- contractions ----
  // `accumulate`: the result's element type when it differs from the operands' (bf16 operands
  // with a float32 result: JAX's preferred_element_type, what a GPU's or TPU's matrix units
  // take); none keeps the operands' type.
  HloValue dot_general(const HloValue& a, const HloValue& b, const std::vector<int64_t>& batch_a,
                       const std::vector<int64_t>& batch_b, const std::vector<int64_t>& contract_a,
                       const std::vector<int64_t>& contract_b,
                       std::optional<ElemType> accumulate = std::nullopt);
  HloValue convolution(const HloValue& input, const HloValue& kernel, const ConvDims& dims,
                       const ConvWindow& window, std::optional<ElemType> accumulate = std::nullopt);

  // ---- reductions ----
  // x reduced over `dims` with `reducer`, starting from `init` (a scalar of x's element type).
  HloValue reduce(const HloValue& x, const HloValue& init, const std::vector<int64_t>& dims,
                  Reducer reducer);
  // The general form: several inputs reduced together, `body` combining (acc..., x...).
  std::vector<HloValue> reduce(const std::vector<HloValue>& xs, const std::vector<HloValue>& inits,
                               const std::vector<int64_t>& dims, const RegionBody& body);
  HloValue reduce_window(const HloValue& x, const HloValue& init, const Window& window,
                         Reducer reducer);
  // The max-pool gradient: source scattered (summed) onto the position each window of operand
  // selects with GE (its first maximum).
  HloValue select_and_scatter(const HloValue& operand, const HloValue& source, const HloValue& init,
                              const Window& window);
  // Sum (or other reducer) over the replicas of each group, e.g. {{0, 1}}.
  HloValue all_reduce(const HloValue& x, const std::vector<std::vector<int64_t>>& replica_groups,
                      Reducer reducer = Reducer::add);

  // ---- batch normalisation (x's feature dim `feature_index`) ----
  // -> (y, batch mean, batch variance (biased))
  std::vector<HloValue> batch_norm_training(const HloValue& x, const HloValue& scale,
                                            const HloValue& offset, double epsilon,
                                            int64_t feature_index);
  HloValue batch_norm_inference(const HloValue& x, const HloValue& scale, const HloValue& offset,
                                const HloValue& mean, const HloValue& variance, double epsilon,
                                int64_t feature_index);
  // -> (dx, dscale, doffset)
  std::vector<HloValue> batch_norm_grad(const HloValue& x, const HloValue& scale,
                                        const HloValue& mean, const HloValue& variance,
                                        const HloValue& dy, double epsilon, int64_t feature_index);

  // A scalar of `t`'s element type.
  HloValue scalar(ElemType t, double value) { return constant(HloType{t, {}}, value); }

 private:
  HloValue unary(const char* name, const HloValue& x);
  HloValue binary(const char* name, const HloValue& a, const HloValue& b);
  std::string fresh();
  std::string type_signature(const std::vector<HloValue>& operands,
                             const std::vector<HloType>& results) const;
  void emit_region(const Region& region);
  std::string loc() const;

  struct Argument {
    HloType type;
    int alias_output = -1;
    std::string attrs;  // more attributes (set_argument_attributes)
  };
  std::vector<std::string> result_attrs_;
  std::string preamble_;
  int num_partitions_ = 1;
  std::vector<Argument> args_;
  std::vector<std::string> body_;  // op lines of @main
  std::vector<HloType> result_types_;
  std::string location_;
  int next_ = 0, indent_ = 2, num_replicas_ = 1;
  bool returned_ = false;
};

// Text helpers shared by the emitter's files: array<i64: 1, 2>, dense<[[0, 0], [1, 1]]>.
std::string i64_array(const std::vector<int64_t>& v);
std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& padding);
// A float literal MLIR reads back exactly for `t` (hex for infinities and NaN).
std::string float_literal(double v, ElemType t);

}  // namespace lockstep::xla
