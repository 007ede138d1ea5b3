// `lockstep export-onnx m.keras m.onnx [--opset N] [--batch-size N] [--no-fold-batch-norm]`.
#include <cstdio>

#include "lockstep/core/parse.h"
#include "lockstep/core/strings.h"
#include "lockstep/onnx/export.h"
#include "lockstep/saving/saving.h"

namespace lockstep::onnx {
namespace {

constexpr const char* kUsage =
    "usage: lockstep export-onnx MODEL.keras OUT.onnx [--opset N] [--batch-size N]\n"
    "                            [--no-fold-batch-norm]\n"
    "  Writes the model's inference graph as ONNX (opset 17 by default, 17..21), NHWC inputs\n"
    "  and outputs as the model's, BatchNormalization folded into the layer before it.\n"
    "  --opset N              the ONNX opset to target (17..21)\n"
    "  --batch-size N         a fixed batch dimension (default: symbolic \"batch\")\n"
    "  --no-fold-batch-norm   keep BatchNormalization as its own ONNX node\n";

// The names, comma-separated, or "none".
std::string listed(const std::vector<std::string>& v) { return v.empty() ? "none" : join(v); }

}  // namespace

int export_command(const std::vector<std::string>& args) {
  ExportOptions options;
  std::vector<std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      LS_CHECK(i + 1 < args.size(), "export-onnx: ", a, " needs a value (see --help)");
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--opset") {
      options.opset = parse_int("--opset", value(), 17, 21);
    } else if (a == "--batch-size") {
      options.batch_size = parse_int("--batch-size", value(), 1, int64_t(1) << 24);
    } else if (a == "--no-fold-batch-norm") {
      options.fold_batch_norm = false;
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "export-onnx: unknown option '%s'\n\n%s", a.c_str(), kUsage);
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.size() != 2) {
    std::fprintf(stderr, "export-onnx: expected MODEL.keras and OUT.onnx, got %zu file%s\n\n%s",
                 files.size(), files.size() == 1 ? "" : "s", kUsage);
    return 2;
  }
  Model model = load_model(files[0]);
  ExportReport r = export_model(model, files[1], options);
  std::printf("wrote %s: opset %lld, %lld nodes, %lld parameters, %lld layout transposes\n",
              files[1].c_str(), static_cast<long long>(options.opset),
              static_cast<long long>(r.nodes), static_cast<long long>(r.parameters),
              static_cast<long long>(r.transposes));
  std::printf("  inputs: %s; outputs: %s\n", listed(r.input_names).c_str(),
              listed(r.output_names).c_str());
  std::printf("  folded: %s\n  removed (inference identity): %s\n", listed(r.folded).c_str(),
              listed(r.removed).c_str());
  return 0;
}

}  // namespace lockstep::onnx
