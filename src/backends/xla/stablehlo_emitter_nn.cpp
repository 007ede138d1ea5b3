// The StableHLO emitter's contractions, reductions, windowed ops, batch normalisation and
// collectives (see stablehlo_emitter.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/xla/stablehlo_emitter.h"
#include "lockstep/core/env.h"
#include "lockstep/core/error.h"

namespace lockstep::xla {

namespace {

// ", precision_config = [...]" for the float32 dots and convolutions when
// LOCKSTEP_XLA_F32_PRECISION is "high" or "highest" (else the plugin's default, which on
// NVIDIA GPUs may compute float32 products in TF32): bench/device_check.sh runs the op table on
// a GPU with "highest", so it compares float32 with float32.
std::string precision_attr(ElemType elem) {
  static const std::string level = [] {
    const std::string text = env::text_or_empty(env::xla_f32_precision);
    const char* v = text.c_str();
    if (!*v || !std::strcmp(v, "default")) return std::string();
    LS_CHECK(!std::strcmp(v, "high") || !std::strcmp(v, "highest"),
             "LOCKSTEP_XLA_F32_PRECISION must be default, high or highest, got '", v, "'");
    return std::string(!std::strcmp(v, "high") ? "HIGH" : "HIGHEST");
  }();
  if (level.empty() || elem != ElemType::f32) return "";
  const std::string p = "#stablehlo<precision " + level + ">";
  return ", precision_config = [" + p + ", " + p + "]";
}

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// One side of the pretty conv dimension numbers: "[b, 0, 1, f]".
std::string conv_side(int rank, int64_t first, char first_c, int64_t second, char second_c,
                      const std::vector<int64_t>& spatial) {
  std::vector<std::string> roles(rank, "?");
  roles.at(first) = std::string(1, first_c);
  roles.at(second) = std::string(1, second_c);
  for (size_t i = 0; i < spatial.size(); ++i) roles.at(spatial[i]) = std::to_string(i);
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + roles[i];
  return s + "]";
}

std::vector<int64_t> or_ones(const std::vector<int64_t>& v, size_t n) {
  return v.empty() ? std::vector<int64_t>(n, 1) : v;
}

std::vector<std::pair<int64_t, int64_t>> or_zeros(const std::vector<std::pair<int64_t, int64_t>>& v,
                                                  size_t n) {
  return v.empty() ? std::vector<std::pair<int64_t, int64_t>>(n, {0, 0}) : v;
}

std::string epsilon_attrs(double epsilon, int64_t feature_index) {
  return "epsilon = " + float_literal(epsilon, ElemType::f32) +
         " : f32, feature_index = " + std::to_string(feature_index) + " : i64";
}

}  // namespace

std::string ConvDims::str() const {
  const int rank = int(input_spatial.size()) + 2;
  return "#stablehlo.conv<" + conv_side(rank, input_batch, 'b', input_feature, 'f', input_spatial) +
         "x" +
         conv_side(rank, kernel_input_feature, 'i', kernel_output_feature, 'o', kernel_spatial) +
         "->" + conv_side(rank, output_batch, 'b', output_feature, 'f', output_spatial) + ">";
}

// ---- contractions ----

HloValue StablehloBuilder::dot_general(const HloValue& a, const HloValue& b,
                                       const std::vector<int64_t>& batch_a,
                                       const std::vector<int64_t>& batch_b,
                                       const std::vector<int64_t>& contract_a,
                                       const std::vector<int64_t>& contract_b,
                                       std::optional<ElemType> accumulate) {
  LS_CHECK(a.type.elem == b.type.elem && batch_a.size() == batch_b.size() &&
               contract_a.size() == contract_b.size(),
           "dot_general: ", a.type.str(), " and ", b.type.str(),
           " need one element type and as many batch and contracting dims on each side", loc());
  HloType t{accumulate.value_or(a.type.elem), {}};
  for (size_t i = 0; i < batch_a.size(); ++i) t.dims.push_back(a.type.dims.at(batch_a[i]));
  for (size_t i = 0; i < contract_a.size(); ++i)
    LS_CHECK(a.type.dims.at(contract_a[i]) == b.type.dims.at(contract_b[i]),
             "dot_general: contracting dims differ: ", a.type.str(), " dim ", contract_a[i], " vs ",
             b.type.str(), " dim ", contract_b[i], loc());
  auto free_dims = [&](const HloValue& x, const std::vector<int64_t>& batch,
                       const std::vector<int64_t>& contract) {
    for (int i = 0; i < x.type.rank(); ++i)
      if (std::count(batch.begin(), batch.end(), i) +
              std::count(contract.begin(), contract.end(), i) ==
          0)
        t.dims.push_back(x.type.dims[i]);
  };
  free_dims(a, batch_a, contract_a);
  free_dims(b, batch_b, contract_b);
  std::string dn = "dot_dimension_numbers = #stablehlo.dot<";
  std::string fields;
  auto field = [&](const char* name, const std::vector<int64_t>& v) {
    if (!v.empty())
      fields += (fields.empty() ? "" : ", ") + std::string(name) + " = " + list_text(v);
  };
  field("lhs_batching_dimensions", batch_a);
  field("rhs_batching_dimensions", batch_b);
  field("lhs_contracting_dimensions", contract_a);
  field("rhs_contracting_dimensions", contract_b);
  return op("stablehlo.dot_general", {a, b}, {t},
            dn + fields + ">" + precision_attr(a.type.elem))[0];
}

HloValue StablehloBuilder::convolution(const HloValue& input, const HloValue& kernel,
                                       const ConvDims& dims, const ConvWindow& w,
                                       std::optional<ElemType> accumulate) {
  const size_t ns = dims.input_spatial.size();
  LS_CHECK(input.type.rank() == int(ns) + 2 && kernel.type.rank() == int(ns) + 2 &&
               input.type.elem == kernel.type.elem,
           "convolution: input ", input.type.str(), " and kernel ", kernel.type.str(),
           " need rank ", ns + 2, " and one element type", loc());
  const auto strides = or_ones(w.strides, ns), lhs_dil = or_ones(w.lhs_dilation, ns),
             rhs_dil = or_ones(w.rhs_dilation, ns);
  const auto padding = or_zeros(w.padding, ns);
  HloType t{accumulate.value_or(input.type.elem), std::vector<int64_t>(ns + 2, 0)};
  t.dims[dims.output_batch] = input.type.dims[dims.input_batch] / w.batch_group_count;
  t.dims[dims.output_feature] = kernel.type.dims[dims.kernel_output_feature];
  LS_CHECK(input.type.dims[dims.input_feature] ==
               kernel.type.dims[dims.kernel_input_feature] * w.feature_group_count,
           "convolution: input ", input.type.str(), " has ", input.type.dims[dims.input_feature],
           " features, the kernel ", kernel.type.str(), " takes ",
           kernel.type.dims[dims.kernel_input_feature], " x ", w.feature_group_count, " groups",
           loc());
  for (size_t i = 0; i < ns; ++i) {
    int64_t in = (input.type.dims[dims.input_spatial[i]] - 1) * lhs_dil[i] + 1 + padding[i].first +
                 padding[i].second;
    int64_t k = (kernel.type.dims[dims.kernel_spatial[i]] - 1) * rhs_dil[i] + 1;
    LS_CHECK(in >= k, "convolution: the window (", k, ") is larger than the padded input (", in,
             ") on spatial dim ", i, loc());
    t.dims[dims.output_spatial[i]] = (in - k) / strides[i] + 1;
  }
  std::string attrs =
      "window_strides = " + i64_array(strides) + ", padding = " + padding_attr(padding) +
      ", lhs_dilation = " + i64_array(lhs_dil) + ", rhs_dilation = " + i64_array(rhs_dil) +
      ", dimension_numbers = " + dims.str() +
      ", feature_group_count = " + std::to_string(w.feature_group_count) +
      " : i64, batch_group_count = " + std::to_string(w.batch_group_count) + " : i64" +
      precision_attr(input.type.elem);
  return op("stablehlo.convolution", {input, kernel}, {t}, attrs)[0];
}

// ---- reductions ----

std::vector<HloValue> StablehloBuilder::reduce(const std::vector<HloValue>& xs,
                                               const std::vector<HloValue>& inits,
                                               const std::vector<int64_t>& dims,
                                               const RegionBody& body) {
  LS_CHECK(!xs.empty() && xs.size() == inits.size(), "reduce: ", xs.size(), " inputs and ",
           inits.size(), " initial values", loc());
  std::vector<HloType> results, block_args;
  for (const HloValue& x : xs) {
    HloType t{x.type.elem, {}};
    for (int i = 0; i < x.type.rank(); ++i)
      if (std::find(dims.begin(), dims.end(), i) == dims.end()) t.dims.push_back(x.type.dims[i]);
    results.push_back(t);
  }
  for (const HloValue& init : inits) block_args.push_back(init.type);
  for (const HloValue& init : inits) block_args.push_back(init.type);
  std::vector<HloValue> operands = xs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return op_with_regions("stablehlo.reduce", operands, results, {{block_args, body}},
                         "dimensions = " + i64_array(dims));
}

HloValue StablehloBuilder::reduce(const HloValue& x, const HloValue& init,
                                  const std::vector<int64_t>& dims, Reducer reducer) {
  LS_CHECK(init.type == (HloType{x.type.elem, {}}), "reduce: the initial value ", init.type.str(),
           " must be a scalar of ", x.type.str(), "'s element type", loc());
  Region r = reducer_region(x.type.elem, reducer);
  return reduce(std::vector<HloValue>{x}, std::vector<HloValue>{init}, dims, r.body)[0];
}

HloValue StablehloBuilder::reduce_window(const HloValue& x, const HloValue& init,
                                         const Window& window, Reducer reducer) {
  const size_t n = size_t(x.type.rank());
  LS_CHECK(window.dims.size() == n, "reduce_window: ", window.dims.size(), " window dims for ",
           x.type.str(), loc());
  const auto strides = or_ones(window.strides, n);
  const auto padding = or_zeros(window.padding, n);
  HloType t{x.type.elem, {}};
  for (size_t i = 0; i < n; ++i)
    t.dims.push_back(
        (x.type.dims[i] + padding[i].first + padding[i].second - window.dims[i]) / strides[i] + 1);
  return op_with_regions(
      "stablehlo.reduce_window", {x, init}, {t}, {reducer_region(x.type.elem, reducer)},
      "window_dimensions = " + i64_array(window.dims) + ", window_strides = " + i64_array(strides) +
          ", padding = " + padding_attr(padding))[0];
}

HloValue StablehloBuilder::select_and_scatter(const HloValue& operand, const HloValue& source,
                                              const HloValue& init, const Window& window) {
  const size_t n = size_t(operand.type.rank());
  LS_CHECK(window.dims.size() == n && source.type.elem == operand.type.elem,
           "select_and_scatter: window or element types do not fit ", operand.type.str(), loc());
  HloType s{operand.type.elem, {}};
  Region select{{s, s}, [this](const std::vector<HloValue>& a) {
                  return std::vector<HloValue>{compare(a[0], a[1], Compare::GE)};
                }};
  return op_with_regions("stablehlo.select_and_scatter", {operand, source, init}, {operand.type},
                         {select, reducer_region(operand.type.elem, Reducer::add)},
                         "window_dimensions = " + i64_array(window.dims) +
                             ", window_strides = " + i64_array(or_ones(window.strides, n)) +
                             ", padding = " + padding_attr(or_zeros(window.padding, n)))[0];
}

HloValue StablehloBuilder::all_reduce(const HloValue& x,
                                      const std::vector<std::vector<int64_t>>& groups,
                                      Reducer reducer) {
  LS_CHECK(!groups.empty() && !groups[0].empty(), "all_reduce: no replica groups", loc());
  std::string g = "dense<[";
  for (size_t i = 0; i < groups.size(); ++i) {
    LS_CHECK(groups[i].size() == groups[0].size(), "all_reduce: replica groups differ in size");
    g += (i ? ", " : "") + list_text(groups[i]);
  }
  g += "]> : tensor<" + std::to_string(groups.size()) + "x" + std::to_string(groups[0].size()) +
       "xi64>";
  return op_with_regions("stablehlo.all_reduce", {x}, {x.type},
                         {reducer_region(x.type.elem, reducer)}, "replica_groups = " + g)[0];
}

// ---- batch normalisation ----

std::vector<HloValue> StablehloBuilder::batch_norm_training(const HloValue& x,
                                                            const HloValue& scale,
                                                            const HloValue& offset, double epsilon,
                                                            int64_t feature_index) {
  HloType c{x.type.elem, {x.type.dims.at(feature_index)}};
  LS_CHECK(scale.type == c && offset.type == c, "batch_norm_training: scale ", scale.type.str(),
           " and offset ", offset.type.str(), " must be ", c.str(), loc());
  return op("stablehlo.batch_norm_training", {x, scale, offset}, {x.type, c, c},
            epsilon_attrs(epsilon, feature_index));
}

HloValue StablehloBuilder::batch_norm_inference(const HloValue& x, const HloValue& scale,
                                                const HloValue& offset, const HloValue& mean,
                                                const HloValue& variance, double epsilon,
                                                int64_t feature_index) {
  HloType c{x.type.elem, {x.type.dims.at(feature_index)}};
  LS_CHECK(scale.type == c && offset.type == c && mean.type == c && variance.type == c,
           "batch_norm_inference: scale, offset, mean and variance must be ", c.str(), loc());
  return op("stablehlo.batch_norm_inference", {x, scale, offset, mean, variance}, {x.type},
            epsilon_attrs(epsilon, feature_index))[0];
}

std::vector<HloValue> StablehloBuilder::batch_norm_grad(const HloValue& x, const HloValue& scale,
                                                        const HloValue& mean,
                                                        const HloValue& variance,
                                                        const HloValue& dy, double epsilon,
                                                        int64_t feature_index) {
  HloType c{x.type.elem, {x.type.dims.at(feature_index)}};
  LS_CHECK(scale.type == c && mean.type == c && variance.type == c && dy.type == x.type,
           "batch_norm_grad: scale, mean and variance must be ", c.str(), " and dy ", x.type.str(),
           loc());
  return op("stablehlo.batch_norm_grad", {x, scale, mean, variance, dy}, {x.type, c, c},
            epsilon_attrs(epsilon, feature_index));
}

}  // namespace lockstep::xla
