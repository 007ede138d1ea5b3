// The `lockstep` command line: model files (shared loaders), `summary` and `convert`.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "args.h"
#include "lockstep/lockstep.h"
#include "lockstep/nn/shapes_only.h"

namespace lockstep::cli {

// A model JSON or similar text file: a regular file (never a FIFO's endless wait) of at most
// 64 MiB (a 1,000-layer config is about 1 MB).
inline std::string read_text(const std::string& path) {
  return read_regular_file(path, 64ull << 20, "model JSON");
}

// Writes `text` to `path` atomically (lockstep/core/file_io.h: checked, fsync'ed, renamed).
inline void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text, "output file");
}

// "applications.NAME" or "applications.NAME:SIZE": a keras.applications backbone
// (lockstep/applications/applications.h) with a SIZE x SIZE x 3 input (default 224).
inline bool is_application(const std::string& spec) { return spec.rfind("applications.", 0) == 0; }

// The backbone `spec` names, with `classes` outputs (random initial weights, Keras's
// weights=None).
inline Model build_application(const std::string& spec, int64_t classes) {
  std::string name = spec.substr(std::string("applications.").size());
  int64_t size = 224;
  if (size_t colon = name.find(':'); colon != std::string::npos) {
    const std::string s = name.substr(colon + 1);
    name = name.substr(0, colon);
    LS_CHECK(!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 6,
             "'", spec, "': the size after ':' must be a number of pixels, e.g. ", name, ":96");
    size = std::stoll(s);
  }
  return applications::by_name(name, {.input_shape = {size, size, 3}, .classes = classes});
}

// A model from a .keras file (compiled when it holds a compile_config and `compile`), from
// a Keras model JSON (Python's model.to_json(); uncompiled, freshly initialised), or a
// keras.applications backbone ("applications.MobileNetV2[:SIZE]", 1000 classes).
inline Model load_model_source(const std::string& path, bool compile) {
  if (is_application(path)) return build_application(path, 1000);
  if (ends_with(path, ".keras")) return load_model(path, compile);
  if (ends_with(path, ".json")) {
    try {
      return model_from_json(read_text(path));
    } catch (const json::exception& e) {
      LS_FAIL("'", path, "' is not valid JSON: ", e.what());
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.find(path) != std::string::npos) throw;  // names the file already
      LS_FAIL("'", path, "': ", msg);
    }
  }
  LS_FAIL("'", path, "' is neither a .keras file nor a Keras model JSON (.json, as Python's ",
          "model.to_json() writes it)");
}

inline bool is_weights_file(const std::string& path) {
  return !ends_with(path, ".keras") && !ends_with(path, ".json");
}

inline const char* kSummaryUsage =
    "usage: lockstep summary MODEL\n"
    "\n"
    "Prints the layers, output shapes and parameter counts of MODEL (a .keras file, a Keras\n"
    "model JSON as Python's model.to_json() writes it, or a keras.applications backbone:\n"
    "applications.MobileNetV2, applications.ResNet50 or applications.EfficientNetB0, with\n"
    "':SIZE' for a SIZE x SIZE input instead of 224), then what the file says beyond the\n"
    "architecture: the optimizer, loss and metrics it was compiled with, the optimizer's step\n"
    "count, and the class names `lockstep train` stored.\n";

inline void print_compile_info(const Model& m) {
  const CompileConfig& c = m.compile_config();
  if (!c.optimizer) {
    std::cout << "Not compiled (no optimizer or loss in the file).\n";
    return;
  }
  json opt = c.optimizer->get_config();
  std::cout << "Optimizer: " << c.optimizer->name() << " (learning_rate "
            << opt["learning_rate"].dump() << ", iterations "
            << int64_t(c.optimizer->iterations()->value.item()) << ")\n";
  if (c.loss) std::cout << "Loss: " << c.loss->name() << " " << c.loss->get_config().dump() << "\n";
  if (!c.metrics.empty()) {
    std::cout << "Metrics:";
    for (auto& name : c.metrics) std::cout << " " << name;
    std::cout << "\n";
  }
}

inline int run_summary(const std::vector<std::string>& argv) {
  CommandSpec spec{"summary", kSummaryUsage, {}, {}, 1, 1};
  Args a = parse_args(spec, argv);
  if (a.help) return std::fputs(kSummaryUsage, stdout), 0;
  const std::string path = a.positional[0];
  Model m;
  if (ends_with(path, ".keras")) {
    m = load_model_source(path, true);
  } else {  // a config: the shapes are all a summary needs (no weight is initialised or touched)
    ShapesOnlyScope shapes_only;
    m = load_model_source(path, true);
  }
  m.summary();
  print_compile_info(m);
  if (ends_with(path, ".keras")) {
    json meta = load_model_metadata(path);
    if (meta.contains("class_names"))
      std::cout << "Classes (" << meta["class_names"].size() << "): " << meta["class_names"].dump()
                << "\n";
    std::cout << "Saved by " << meta.value("producer", std::string("keras")) << " (Keras format "
              << meta.value("keras_version", std::string("?")) << ") on "
              << meta.value("date_saved", std::string("?")) << "\n";
  }
  return 0;
}

inline const char* kConvertUsage =
    "usage: lockstep convert IN OUT [--model MODEL]\n"
    "\n"
    "Converts between model files, by extension:\n"
    "  .keras        Keras 3 model file: config, weights, and the optimizer when compiled\n"
    "  .weights.h5   Keras 3 weights file: weights only, no config\n"
    "  .h5, .hdf5    Keras 2's legacy weights layout (keras.applications' files), by layer name\n"
    "  .json         Keras model JSON (model.to_json()): config only, no weights (OUT only)\n"
    "  other         Lockstep checkpoint (e.g. .lsckpt): weights only, no config\n"
    "\n"
    "A weights-only IN has no architecture: give it with --model (a .keras file or a model\n"
    "JSON). Converting to a weights-only OUT drops the config and the optimizer; it says so.\n"
    "\n"
    "options:\n"
    "  --model MODEL   the architecture for a weights-only IN\n";

inline int run_convert(const std::vector<std::string>& argv) {
  CommandSpec spec{"convert", kConvertUsage, {"--model"}, {}, 2, 2};
  Args a = parse_args(spec, argv);
  if (a.help) return std::fputs(kConvertUsage, stdout), 0;
  const std::string in = a.positional[0], out = a.positional[1];
  tools::check_output_is_not_input("convert", out, {in, a.get("--model")});
  LS_CHECK(!ends_with(in, ".json"), "convert: '", in, "' is a model JSON without weights; ",
           "train it (lockstep train --model ", in, " ...) or give weights as IN with --model ",
           in);
  Model m;
  if (is_weights_file(in)) {
    LS_CHECK(a.has("--model"), "convert: '", in, "' holds weights only (no architecture); ",
             "give the model with --model config.json or --model m.keras");
    m = load_model_source(a.get("--model"), false);
    m.load_weights(in);
  } else {
    LS_CHECK(!a.has("--model"), "convert: --model is for weights-only inputs; '", in,
             "' already holds its architecture");
    m = load_model(in);
  }
  if (ends_with(out, ".keras")) {
    m.save(out);
    std::printf("wrote %s (config + weights%s)\n", out.c_str(),
                m.compile_config().optimizer ? " + optimizer" : "");
  } else if (ends_with(out, ".json")) {
    write_text_atomic(out, m.to_json());
    std::printf("wrote %s (the model config only: no weights)\n", out.c_str());
  } else {
    m.save_weights(out);
    std::printf(
        "wrote %s (weights only: a %s has no model config%s; load it with --model or "
        "into the same architecture)\n",
        out.c_str(),
        ends_with(out, ".weights.h5") ? "Keras .weights.h5 file"
        : ends_with(out, ".h5")       ? "Keras legacy .h5 file"
                                      : "Lockstep checkpoint",
        m.compile_config().optimizer ? " and no optimizer state" : "");
  }
  return 0;
}

}  // namespace lockstep::cli
