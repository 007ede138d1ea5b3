// Renders the op declarations as docs/ops.md: the prose worth keeping lives here (introduction
// and one paragraph per section); everything per op comes from its OpDef.
#include "lockstep/ops/op_docs.h"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace lockstep {

namespace {

const char* kIntro =
    "# Op catalogue (the contract between graph, nn, train and backends)\n"
    "\n"
    "<!-- Generated from the op declarations by `build/bin/lockstep ops-doc > docs/ops.md`\n"
    "     (or LOCKSTEP_UPDATE_DOCS=1 with tests/ops/registry_test.cpp); the test fails when this\n"
    "     file differs, so edit the declaration (an OpDef), not this file. -->\n"
    "\n"
    "Every op is declared once, as an `OpDef` (`include/lockstep/graph/op_registry.h`) in\n"
    "`src/ops/<family>_ops.cpp` (the collectives in `src/distribute/strategy_ops.cpp`): its\n"
    "signature, what it computes, its typed attributes with their defaults, its shape function,\n"
    "its gradient and which backends have a kernel for it. Kernels read unset attributes'\n"
    "defaults from the declaration (`attr_f(node, \"epsilon\")`), and `Graph::add` rejects an\n"
    "attribute the op does not declare. Kernels register per backend (`reference` in\n"
    "`src/backends/reference/`, `cpu` in `src/backends/cpu/`); an op declared *reference only*\n"
    "says why. A `cpu` program runs such an op on its reference kernel and says so in\n"
    "`Executable::report()`; `CompileOptions::strict_kernels` (or `LOCKSTEP_STRICT_KERNELS=1`)\n"
    "makes that an error. Every op has a case in the op table (`tests/ops/*_cases.cpp`) unless\n"
    "`tests/ops/registry_test.cpp` says why not.\n"
    "\n"
    "Layouts: activations NHWC, conv filters HWIO `[kh, kw, in/groups, out]` (Keras order), dense\n"
    "kernels `[in, out]`. Dtypes: float32 unless stated; labels int32. *Side effect* ops write\n"
    "into input 0 (a variable read) and have no outputs. Shapes: `[...]` stands for any leading\n"
    "dims, `[]` for a scalar.\n"
    "\n"
    "Facts: what the passes and exporters know of an op is declared with it (`OpDef` fields),\n"
    "never kept in a list of names: how the rows of a batch flow through it (predict's row\n"
    "tiles), whether it is elementwise or layout-agnostic (the cpu backend's blocked layouts),\n"
    "its fusion roles, the Keras activation names it implements, and its ONNX form or why it\n"
    "has none. Code names an op through its id (`lockstep::op::relu`, `lockstep/graph/op_ids.h`),\n"
    "so a misspelt op does not compile; the registry test holds the ids and the declarations\n"
    "equal.\n";

struct Section {
  const char* group;
  const char* title;
  const char* prose;
};

const Section kSections[] = {
    {"structure", "Structure",
     "Placeholders, variable reads, constants, views (no kernel: they alias their input) and the\n"
     "variable writes."},
    {"elementwise", "Elementwise",
     "Binaries broadcast like numpy. An activation's gradient op takes (dy, y) where the\n"
     "derivative is a function of the output (relu, relu6, sigmoid, tanh), else (dy, x), and the\n"
     "activation's attributes."},
    {"reduction", "Reductions, softmax and bias",
     "`reduce_*` with no or empty `axes` reduce over every axis. The cpu kernels reduce over one\n"
     "run of consecutive axes (leading, trailing or middle, as global pooling's [1, 2]) and run\n"
     "softmax along the last one; other axes use the reference kernel, which the executable\n"
     "reports."},
    {"array", "Array ops", "Copies and conversions, and dropout."},
    {"sequence", "Sequences: lookups, comparisons, masks",
     "Integer ids index tables (`gather`, Embedding's lookup); comparisons and logical ops give\n"
     "uint8 0/1, the graph's bool, which `where` takes and `cast` turns into a float mask. An id\n"
     "outside the table is an error naming the node, the id and the range."},
    {"loss", "Losses and metrics",
     "Per-example outputs; train/ composes the reductions. The class axis is the last: logits may\n"
     "have rank > 2 (`[..., C]` with labels `[...]` or `[..., 1]`); sparse labels may also be f32\n"
     "holding integers."},
    {"nn", "Convolution, matmul and pooling",
     "Keras \"same\" padding puts the extra pad at the bottom/right. The fusion pass sets "
     "conv2d's\n"
     "fused_bias/activation; kernels of both backends honour them. The backward ops of conv2d\n"
     "and avg_pool2d are linear, so they have gradients and are checked by finite differences\n"
     "too. cpu kernels: oneDNN conv (forward with bias + relu post-op, backward-data,\n"
     "backward-weights) on NHWC activations, filters in the layout oneDNN picks with compile-time\n"
     "reorders (keeping NHWC measured faster than blocked activations plus reorders); oneDNN\n"
     "matmul; own OpenMP kernels for pools and norms. `bench/kernels_bench` prints GFLOP/s on\n"
     "the reference CNN, and with `--model resnet [--dtype bfloat16]` every convolution pass of\n"
     "the peer bench's ResNet, each as a share of the measured fp32 (bf16: twice that) peak."},
    {"norm", "Normalisation",
     "Statistics over all but the last axis (batch norm) or over the last axis (layer norm)."},
    {"optimizer", "Optimizer updates",
     "In-place updates of a variable (input 0 is its read; side effects), Keras 3 formulas; `lr`\n"
     "and `t` are scalars."},
    {"image", "Image preprocessing and augmentation",
     "Images NHWC, f32 or u8 (outputs keep the dtype; gradients are f32). The math is shared with\n"
     "the dataset map functions of `lockstep/data/augment.h` (src/imaging/internal/augment.h), so\n"
     "a layer and its map function agree bit for bit for the same key. Random ops draw per-image\n"
     "parameters in-kernel from Philox keyed like dropout (attr seed, node id, replica, model\n"
     "seed; counter = step; image i uses blocks 2i, 2i+1 under a per-kind salt) and output them,\n"
     "so their gradient replays the same transform through the deterministic op. cpu kernels =\n"
     "the reference code, OpenMP over the batch. CenterCrop uses `slice`."},
    {"distribute", "Collectives",
     "The gradient all-reduce of a distribute strategy as ops of the compiled step; they need the\n"
     "strategy's runtime (a GradientReducer group)."},
};

std::string number(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string value_text(const AttrValue& v) {
  return std::visit(
      [](auto&& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>)
          return number(x);
        else if constexpr (std::is_same_v<T, std::string>)
          return "\"" + x + "\"";
        else {
          std::string s = "[";
          for (size_t i = 0; i < x.size(); ++i) {
            if constexpr (std::is_same_v<T, std::vector<double>>)
              s += (i ? ", " : "") + number(x[i]);
            else
              s += (i ? ", " : "") + std::to_string(x[i]);
          }
          return s + "]";
        }
      },
      v);
}

std::string default_text(const AttrDecl& a) {
  if (a.default_value) return "`" + value_text(*a.default_value) + "`";
  return a.required ? "required" : "unset";
}

std::string kernels_text(const OpDef& def) {
  if (!def.reference_only.empty()) return "reference only — " + def.reference_only;
  if (def.backends.empty()) return "none (no computation)";
  std::string s;
  for (const std::string& b : def.backends) s += (s.empty() ? "" : ", ") + b;
  return s;
}

const char* rows_text(RowRule r) {
  switch (r) {
    case RowRule::pointwise:
      return "pointwise";
    case RowRule::per_row:
      return "per row (input 0)";
    case RowRule::by_attrs:
      return "by its attributes";
    case RowRule::mixed:
      break;
  }
  return "mixed (never tiled)";
}

std::string fusion_text(uint32_t f) {
  static const std::pair<uint32_t, const char*> roles[] = {
      {kFuseActivation, "activation"},
      {kFuseActivationGrad, "activation gradient"},
      {kFuseBias, "bias"},
      {kFuseResidual, "residual add"},
      {kFuseTakesActivation, "takes an activation"},
      {kFuseTakesBias, "takes a bias"},
      {kFuseTakesResidual, "takes a residual"},
      {kFuseUpdate, "optimizer update"},
      {kFuseUpdateStep, "shared step"},
      {kFuseView, "view"}};
  std::string s;
  for (auto [bit, name] : roles)
    if (f & bit) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

// The per-op facts the passes and exporters read (OpDef fields), one line.
void render_facts(std::ostringstream& os, const OpDef& def) {
  os << "\nFacts: rows " << rows_text(def.rows);
  if (def.rows == RowRule::pointwise) os << "; elementwise";
  if (def.layout_agnostic) os << "; layout-agnostic";
  if (def.fusion) os << "; fusion: " << fusion_text(def.fusion);
  if (!def.keras_activations.empty()) {
    os << "; Keras activation";
    for (size_t k = 0; k < def.keras_activations.size(); ++k)
      os << (k ? ", `" : " `") << def.keras_activations[k] << "`";
  }
  if (!def.onnx.op.empty()) os << "; ONNX `" << def.onnx.op << "`";
  if (!def.onnx.recipe.empty()) os << "; ONNX recipe `" << def.onnx.recipe << "`";
  if (!def.onnx.none.empty()) os << "; no ONNX form: " << def.onnx.none;
  if (!def.xla.lowered()) os << "; no StableHLO lowering: " << def.xla.none;
  os << ".\n";
}

void render_op(std::ostringstream& os, const OpDef& def) {
  os << "\n### " << def.name << "\n\n`" << def.name << def.signature << "`: " << def.doc << "\n";
  if (!def.attrs.empty()) {
    os << "\n| attribute | type | default | meaning |\n|---|---|---|---|\n";
    for (const AttrDecl& a : def.attrs)
      os << "| " << a.name << " | " << attr_type_name(a.type) << " | " << default_text(a) << " | "
         << a.doc << " |\n";
  }
  os << "\nKernels: " << kernels_text(def) << ". Gradient: " << (def.grad ? "yes" : "none");
  if (def.side_effects) os << ". Side effect";
  if (def.alias_input >= 0) os << ". A view of input " << def.alias_input;
  if (def.bf16 && def.backends.empty()) os << ". Takes bfloat16 as it is";
  if (def.bf16 && !def.backends.empty()) {
    std::string native;
    for (const std::string& b : OpRegistry::get().kernel_backends(def.name))
      if (OpRegistry::get().kernel_takes_bf16(def.name, b))
        native += (native.empty() ? "" : ", ") + b;
    os << ". Computes in bfloat16"
       << (def.bf16_outputs.empty() ? "" : " (output 0; the others f32)") << " — natively on "
       << (native.empty() ? "none" : native) << ", elsewhere its f32 kernel between conversions";
  }
  os << ".\n";
  render_facts(os, def);
}

}  // namespace

std::vector<std::string> ops_doc_groups() {
  std::vector<std::string> groups;
  for (const Section& s : kSections) groups.push_back(s.group);
  return groups;
}

std::string render_ops_markdown(const OpRegistry& registry) {
  std::ostringstream os;
  os << kIntro << "\nBackends (`lockstep/graph/backends.h`):\n";
  for (const BackendInfo& b : known_backends()) os << "- `" << b.name << "`: " << b.doc << "\n";
  std::vector<std::string> rendered;
  for (const Section& section : kSections) {
    os << "\n## " << section.title << "\n\n" << section.prose << "\n";
    for (const std::string& name : registry.op_names())
      if (registry.op(OpId::named(name)).group == section.group) {
        render_op(os, registry.op(OpId::named(name)));
        rendered.push_back(name);
      }
  }
  // An op of a group without a section still shows up, under its group's name.
  std::vector<std::string> rest;
  for (const std::string& name : registry.op_names())
    if (std::find(rendered.begin(), rendered.end(), name) == rendered.end()) rest.push_back(name);
  if (!rest.empty()) os << "\n## Other\n";
  for (const std::string& name : rest) render_op(os, registry.op(OpId::named(name)));
  return os.str();
}

}  // namespace lockstep
