// The StableHLO emitter: types, the function, the generic op syntax, constants and elementwise
// ops (shape ops are in stablehlo_emitter_shapes.cpp; contractions, reductions, windows, batch
// norm and collectives in stablehlo_emitter_nn.cpp).
#include "backends/xla/stablehlo_emitter.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "lockstep/core/error.h"

namespace lockstep::xla {

// ---- types and text helpers ----

const char* elem_name(ElemType t) {
  switch (t) {
    case ElemType::f32:
      return "f32";
    case ElemType::bf16:
      return "bf16";
    case ElemType::f16:
      return "f16";
    case ElemType::i32:
      return "i32";
    case ElemType::i64:
      return "i64";
    case ElemType::i1:
      return "i1";
    case ElemType::u8:
      return "ui8";
    case ElemType::u32:
      return "ui32";
    case ElemType::u64:
      return "ui64";
  }
  return "?";
}

ElemType elem_of(DType t) {
  switch (t) {
    case DType::f32:
      return ElemType::f32;
    case DType::bf16:
      return ElemType::bf16;
    case DType::f16:
      return ElemType::f16;
    case DType::i32:
      return ElemType::i32;
    case DType::i64:
      return ElemType::i64;
    case DType::u8:
      return ElemType::u8;
  }
  LS_FAIL("no StableHLO element type for dtype ", dtype_name(t));
}

DType dtype_of_elem(ElemType t) {
  switch (t) {
    case ElemType::f32:
      return DType::f32;
    case ElemType::bf16:
      return DType::bf16;
    case ElemType::f16:
      return DType::f16;
    case ElemType::i32:
      return DType::i32;
    case ElemType::i64:
      return DType::i64;
    case ElemType::u8:
      return DType::u8;
    case ElemType::i1:
    case ElemType::u32:
    case ElemType::u64:
      break;
  }
  LS_FAIL("StableHLO element type ", elem_name(t), " has no Lockstep dtype");
}

bool is_float(ElemType t) {
  return t == ElemType::f32 || t == ElemType::bf16 || t == ElemType::f16;
}

std::string HloType::str() const {
  std::string s = "tensor<";
  for (int64_t d : dims) s += std::to_string(d) + "x";
  return s + elem_name(elem) + ">";
}

int64_t HloType::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string i64_array(const std::vector<int64_t>& v) {
  std::string s = "array<i64";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : ": ") + std::to_string(v[i]);
  return s + ">";
}

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& padding) {
  std::string s = "dense<[";
  for (size_t i = 0; i < padding.size(); ++i)
    s += (i ? ", [" : "[") + std::to_string(padding[i].first) + ", " +
         std::to_string(padding[i].second) + "]";
  return s + "]> : tensor<" + std::to_string(padding.size()) + "x2xi64>";
}

std::string float_literal(double v, ElemType t) {
  if (!std::isfinite(v)) {
    const bool neg = std::signbit(v), nan = std::isnan(v);
    switch (t) {
      case ElemType::bf16:
        return nan ? "0x7FC0" : neg ? "0xFF80" : "0x7F80";
      case ElemType::f16:
        return nan ? "0x7E00" : neg ? "0xFC00" : "0x7C00";
      default:
        return nan ? "0x7FC00000" : neg ? "0xFF800000" : "0x7F800000";
    }
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9e", v);
  return buf;
}

namespace {

std::string element_literal(double v, ElemType t) {
  if (is_float(t)) return float_literal(v, t);
  if (t == ElemType::i1) return v != 0 ? "true" : "false";
  return std::to_string(int64_t(v));
}

// Nested [..] of `values` (row-major) over dims[d...].
void nested_literal(const std::vector<double>& values, const std::vector<int64_t>& dims, size_t d,
                    size_t& k, ElemType t, std::string& out) {
  if (d == dims.size()) {
    out += element_literal(values[k++], t);
    return;
  }
  out += "[";
  for (int64_t i = 0; i < dims[d]; ++i) {
    if (i) out += ", ";
    nested_literal(values, dims, d + 1, k, t, out);
  }
  out += "]";
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n') ? ' ' : c;
  }
  return out;
}

const char* reducer_op(Reducer r) {
  switch (r) {
    case Reducer::add:
      return "stablehlo.add";
    case Reducer::max:
      return "stablehlo.maximum";
    case Reducer::min:
      return "stablehlo.minimum";
    case Reducer::mul:
      return "stablehlo.multiply";
  }
  return "?";
}

}  // namespace

// ---- the function and the generic op ----

std::string StablehloBuilder::fresh() { return "%v" + std::to_string(next_++); }

std::string StablehloBuilder::loc() const {
  return location_.empty() ? "" : " loc(\"" + escape(location_) + "\")";
}

HloValue StablehloBuilder::argument(const HloType& type, int alias_output) {
  LS_CHECK(body_.empty(), "StablehloBuilder: add every argument before the first op");
  HloValue v{"%arg" + std::to_string(args_.size()), type};
  args_.push_back({type, alias_output});
  return v;
}

void StablehloBuilder::set_argument_alias(int index, int alias_output) {
  LS_CHECK(index >= 0 && index < int(args_.size()), "StablehloBuilder: no argument ", index);
  args_[size_t(index)].alias_output = alias_output;
}

void StablehloBuilder::set_argument_attributes(int index, const std::string& attrs) {
  LS_CHECK(index >= 0 && index < int(args_.size()), "StablehloBuilder: no argument ", index);
  args_[size_t(index)].attrs = attrs;
}

void StablehloBuilder::set_result_attributes(int index, const std::string& attrs) {
  LS_CHECK(returned_ && index >= 0 && index < int(result_types_.size()),
           "StablehloBuilder: no result ", index, " (set result attributes after ret())");
  result_attrs_.resize(result_types_.size());
  result_attrs_[size_t(index)] = attrs;
}

void StablehloBuilder::ret(const std::vector<HloValue>& results) {
  LS_CHECK(!returned_, "StablehloBuilder: ret() called twice");
  returned_ = true;
  std::string names, types;
  for (size_t i = 0; i < results.size(); ++i) {
    names += (i ? ", " : "") + results[i].name;
    types += (i ? ", " : "") + results[i].type.str();
    result_types_.push_back(results[i].type);
  }
  body_.push_back(std::string(indent_, ' ') + "return" +
                  (results.empty() ? "" : " " + names + " : " + types));
}

std::string StablehloBuilder::module_text() const {
  LS_CHECK(returned_, "StablehloBuilder: call ret() before module_text()");
  std::string s =
      "module @lockstep attributes {mhlo.num_replicas = " + std::to_string(num_replicas_) +
      " : i32, mhlo.num_partitions = " + std::to_string(num_partitions_) + " : i32} {\n";
  s += preamble_;
  s += "func.func @main(";
  for (size_t i = 0; i < args_.size(); ++i) {
    s += (i ? ", %arg" : "%arg") + std::to_string(i) + ": " + args_[i].type.str();
    std::string attrs;
    if (args_[i].alias_output >= 0)
      attrs = "tf.aliasing_output = " + std::to_string(args_[i].alias_output) + " : i32";
    if (!args_[i].attrs.empty()) attrs += (attrs.empty() ? "" : ", ") + args_[i].attrs;
    if (!attrs.empty()) s += " {" + attrs + "}";
  }
  s += ") -> (";
  for (size_t i = 0; i < result_types_.size(); ++i) {
    s += (i ? ", " : "") + result_types_[i].str();
    if (i < result_attrs_.size() && !result_attrs_[i].empty()) s += " {" + result_attrs_[i] + "}";
  }
  s += ") {\n";
  for (const std::string& line : body_) s += line + "\n";
  return s + "}\n}\n";
}

std::string StablehloBuilder::type_signature(const std::vector<HloValue>& operands,
                                             const std::vector<HloType>& results) const {
  std::string s = "(";
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i].type.str();
  s += ") -> ";
  if (results.size() == 1) return s + results[0].str();
  s += "(";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].str();
  return s + ")";
}

std::vector<HloValue> StablehloBuilder::op(const std::string& name,
                                           const std::vector<HloValue>& operands,
                                           const std::vector<HloType>& results,
                                           const std::string& attrs) {
  return op_with_regions(name, operands, results, {}, attrs);
}

void StablehloBuilder::emit_region(const Region& region) {
  std::vector<HloValue> args;
  std::string head = std::string(indent_, ' ') + "^bb0(";
  for (size_t i = 0; i < region.block_args.size(); ++i) {
    args.push_back({fresh(), region.block_args[i]});
    head += (i ? ", " : "") + args.back().name + ": " + args.back().type.str();
  }
  body_.push_back(head + "):");
  indent_ += 2;
  std::vector<HloValue> yielded = region.body(args);
  std::string line = std::string(indent_, ' ') + "\"stablehlo.return\"(";
  for (size_t i = 0; i < yielded.size(); ++i) line += (i ? ", " : "") + yielded[i].name;
  line += ") : (";
  for (size_t i = 0; i < yielded.size(); ++i) line += (i ? ", " : "") + yielded[i].type.str();
  body_.push_back(line + ") -> ()");
  indent_ -= 2;
}

std::vector<HloValue> StablehloBuilder::op_with_regions(const std::string& name,
                                                        const std::vector<HloValue>& operands,
                                                        const std::vector<HloType>& results,
                                                        const std::vector<Region>& regions,
                                                        const std::string& attrs) {
  LS_CHECK(!returned_, "StablehloBuilder: ", name, " after ret()");
  const std::string id = fresh();
  std::vector<HloValue> out;
  for (size_t i = 0; i < results.size(); ++i)
    out.push_back({results.size() == 1 ? id : id + "#" + std::to_string(i), results[i]});
  std::string line = std::string(indent_, ' ');
  if (results.size() == 1) line += id + " = ";
  if (results.size() > 1) line += id + ":" + std::to_string(results.size()) + " = ";
  line += "\"" + name + "\"(";
  for (size_t i = 0; i < operands.size(); ++i) line += (i ? ", " : "") + operands[i].name;
  line += ")";
  const std::string tail =
      (attrs.empty() ? "" : " {" + attrs + "}") + " : " + type_signature(operands, results) + loc();
  if (regions.empty()) {
    body_.push_back(line + tail);
    return out;
  }
  body_.push_back(line + " ({");
  indent_ += 2;
  for (size_t r = 0; r < regions.size(); ++r) {
    if (r) body_.push_back(std::string(indent_ - 2, ' ') + "}, {");
    emit_region(regions[r]);
  }
  indent_ -= 2;
  body_.push_back(std::string(indent_, ' ') + "})" + tail);
  return out;
}

StablehloBuilder::Region StablehloBuilder::reducer_region(ElemType t, Reducer reducer) {
  HloType s{t, {}};
  return {{s, s}, [this, s, reducer](const std::vector<HloValue>& a) {
            return op(reducer_op(reducer), {a[0], a[1]}, {s});
          }};
}

// ---- constants and generators ----

HloValue StablehloBuilder::constant(const HloType& type, double value) {
  return op("stablehlo.constant", {}, {type},
            "value = dense<" + element_literal(value, type.elem) + "> : " + type.str())[0];
}

HloValue StablehloBuilder::constant(const HloType& type, const std::vector<double>& values) {
  LS_CHECK(int64_t(values.size()) == type.numel(), "constant ", type.str(), ": ", values.size(),
           " values for ", type.numel(), " elements");
  std::string text;
  size_t k = 0;
  nested_literal(values, type.dims, 0, k, type.elem, text);
  return op("stablehlo.constant", {}, {type}, "value = dense<" + text + "> : " + type.str())[0];
}

HloValue StablehloBuilder::iota(const HloType& type, int64_t dimension) {
  LS_CHECK(dimension >= 0 && dimension < type.rank(), "iota ", type.str(), ": dimension ",
           dimension, " out of range");
  return op("stablehlo.iota", {}, {type},
            "iota_dimension = " + std::to_string(dimension) + " : i64")[0];
}

// ---- elementwise ----

HloValue StablehloBuilder::unary(const char* name, const HloValue& x) {
  return op(name, {x}, {x.type})[0];
}

HloValue StablehloBuilder::binary(const char* name, const HloValue& a, const HloValue& b) {
  LS_CHECK(a.type == b.type, name, ": operand types differ, ", a.type.str(), " and ", b.type.str(),
           " (broadcast with broadcast_in_dim first)", loc());
  return op(name, {a, b}, {a.type})[0];
}

HloValue StablehloBuilder::add(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.add", a, b);
}
HloValue StablehloBuilder::subtract(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.subtract", a, b);
}
HloValue StablehloBuilder::multiply(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.multiply", a, b);
}
HloValue StablehloBuilder::divide(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.divide", a, b);
}
HloValue StablehloBuilder::maximum(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.maximum", a, b);
}
HloValue StablehloBuilder::minimum(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.minimum", a, b);
}
HloValue StablehloBuilder::power(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.power", a, b);
}
HloValue StablehloBuilder::negate(const HloValue& x) { return unary("stablehlo.negate", x); }
HloValue StablehloBuilder::exponential(const HloValue& x) {
  return unary("stablehlo.exponential", x);
}
HloValue StablehloBuilder::exponential_minus_one(const HloValue& x) {
  return unary("stablehlo.exponential_minus_one", x);
}
HloValue StablehloBuilder::log(const HloValue& x) { return unary("stablehlo.log", x); }
HloValue StablehloBuilder::log_plus_one(const HloValue& x) {
  return unary("stablehlo.log_plus_one", x);
}
HloValue StablehloBuilder::sqrt(const HloValue& x) { return unary("stablehlo.sqrt", x); }
HloValue StablehloBuilder::rsqrt(const HloValue& x) { return unary("stablehlo.rsqrt", x); }
HloValue StablehloBuilder::tanh(const HloValue& x) { return unary("stablehlo.tanh", x); }
HloValue StablehloBuilder::logistic(const HloValue& x) { return unary("stablehlo.logistic", x); }
HloValue StablehloBuilder::abs(const HloValue& x) { return unary("stablehlo.abs", x); }
HloValue StablehloBuilder::sign(const HloValue& x) { return unary("stablehlo.sign", x); }
HloValue StablehloBuilder::floor(const HloValue& x) { return unary("stablehlo.floor", x); }
HloValue StablehloBuilder::ceil(const HloValue& x) { return unary("stablehlo.ceil", x); }
HloValue StablehloBuilder::round_nearest_afz(const HloValue& x) {
  return unary("stablehlo.round_nearest_afz", x);
}
HloValue StablehloBuilder::cosine(const HloValue& x) { return unary("stablehlo.cosine", x); }

HloValue StablehloBuilder::bitwise_xor(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.xor", a, b);
}
HloValue StablehloBuilder::shift_right_logical(const HloValue& a, const HloValue& b) {
  return binary("stablehlo.shift_right_logical", a, b);
}

HloValue StablehloBuilder::compare(const HloValue& a, const HloValue& b, Compare direction) {
  LS_CHECK(a.type == b.type, "stablehlo.compare: operand types differ, ", a.type.str(), " and ",
           b.type.str(), loc());
  static const char* names[] = {"EQ", "NE", "GE", "GT", "LE", "LT"};
  const ElemType e = a.type.elem;
  const bool is_unsigned =
      e == ElemType::i1 || e == ElemType::u8 || e == ElemType::u32 || e == ElemType::u64;
  const char* kind = is_float(e) ? "FLOAT" : is_unsigned ? "UNSIGNED" : "SIGNED";
  return op("stablehlo.compare", {a, b}, {a.type.with_elem(ElemType::i1)},
            std::string("comparison_direction = #stablehlo<comparison_direction ") +
                names[int(direction)] + ">, compare_type = #stablehlo<comparison_type " + kind +
                ">")[0];
}

HloValue StablehloBuilder::select(const HloValue& pred, const HloValue& on_true,
                                  const HloValue& on_false) {
  LS_CHECK(on_true.type == on_false.type, "stablehlo.select: branch types differ, ",
           on_true.type.str(), " and ", on_false.type.str(), loc());
  LS_CHECK(pred.type.elem == ElemType::i1 &&
               (pred.type.dims.empty() || pred.type.dims == on_true.type.dims),
           "stablehlo.select: the predicate ", pred.type.str(), " must be i1 of shape ",
           on_true.type.str(), " or a scalar", loc());
  return op("stablehlo.select", {pred, on_true, on_false}, {on_true.type})[0];
}

HloValue StablehloBuilder::convert(const HloValue& x, ElemType to) {
  if (x.type.elem == to) return x;
  return op("stablehlo.convert", {x}, {x.type.with_elem(to)})[0];
}

}  // namespace lockstep::xla
