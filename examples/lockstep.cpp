// The `lockstep` command line. Each command is one row of kCommands (name, one-line summary,
// function taking the arguments after the name); `lockstep <command> --help` prints its usage.
//
//   lockstep summary MODEL                       layers, compile config, class names
//   lockstep predict MODEL.keras IMAGE_OR_DIR [--top-k K]
//   lockstep train --model config.json|m.keras --data-dir DIR --epochs N --out m.keras [...]
//   lockstep generate --model gpt.keras --prompt TEXT [--max-tokens N --temperature T --top-k K]
//   lockstep convert IN OUT [--model MODEL]      .keras <-> .weights.h5 <-> checkpoint
//   lockstep export-image-folder --out DIR [--data-dir DIR] [--split train|test]
//            [--limit-per-class N] [--format jpeg|png|mixed] [--size S] [--quality Q]
//            [--images IDX --labels IDX [--class-names a,b,...]]
//   lockstep export-text-folder --out DIR [--fortunes-dir DIR] [--categories a,b,...]
//            [--limit-per-class N]
//   lockstep ops-doc > docs/ops.md
//   lockstep export-onnx MODEL.keras OUT.onnx [--opset N] [--batch-size N] [--no-fold-batch-norm]
//
// ops-doc prints the op catalogue generated from the op declarations (docs/ops.md).
// export-image-folder writes Fashion-MNIST (or any IDX images/labels pair) as class folders of
// JPEG and PNG files, the layout image_dataset_from_directory reads.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/parse.h"
#include "lockstep/data/idx.h"
#include "lockstep/onnx/export.h"
#include "lockstep/ops/op_docs.h"
#include "lockstep/tools/export.h"
#include "lockstep/tools/paths.h"
#include "lockstep/tools/text_export.h"
#include "lockstep/viz/chart.h"

// The model commands (header-only: every examples/*.cpp is its own executable).
#include "cli/generate.h"
#include "cli/model_files.h"
#include "cli/predict.h"
#include "cli/train.h"

namespace ls = lockstep;

namespace {

const char* kExportUsage =
    "usage: lockstep export-image-folder --out DIR [options]\n"
    "\n"
    "Writes an IDX dataset (Fashion-MNIST by default) as class folders of JPEG/PNG files.\n"
    "\n"
    "options:\n"
    "  --out DIR              output folder (required); one subfolder per class\n"
    "  --data-dir DIR         Fashion-MNIST folder (default: $LOCKSTEP_FASHION_MNIST_DIR or\n"
    "                         /usr/share/datasets/fashion-mnist)\n"
    "  --split train|test     which Fashion-MNIST files (default train)\n"
    "  --images IDX --labels IDX   any IDX pair instead of Fashion-MNIST\n"
    "  --class-names a,b,...  class names for --images/--labels (default 0, 1, ...)\n"
    "  --limit-per-class N    at most N images per class (default: all)\n"
    "  --format jpeg|png|mixed  file format; mixed alternates jpg/png per class (default mixed)\n"
    "  --size S               resize to SxS (bilinear) before encoding (default: keep)\n"
    "  --quality Q            JPEG quality 1..100 (default 95)\n";

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t e = s.find(',', start);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(start, e - start));
    start = e + 1;
  }
  return out;
}

int64_t to_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  return ls::parse_int(flag, v, lo, hi);  // names the flag on junk, overflow or out of range
}

int export_image_folder(const std::vector<std::string>& args) {
  static const std::vector<std::string> known = {
      "--out",         "--data-dir",        "--split",  "--images", "--labels",
      "--class-names", "--limit-per-class", "--format", "--size",   "--quality"};
  std::map<std::string, std::string> opt;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    if (a == "-h" || a == "--help") {
      std::fputs(kExportUsage, stdout);
      return 0;
    }
    if (auto eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else {
      LS_CHECK(i + 1 < args.size(), "export-image-folder: ", a, " needs a value");
      value = args[++i];
    }
    LS_CHECK(std::find(known.begin(), known.end(), a) != known.end(),
             "export-image-folder: unknown option ", a,
             " (see lockstep export-image-folder --help)");
    opt[a] = value;
  }
  LS_CHECK(opt.count("--out"), "export-image-folder: --out DIR is required");
  ls::tools::ExportImageFolderOptions o;
  if (opt.count("--limit-per-class"))
    o.limit_per_class = to_int("--limit-per-class", opt["--limit-per-class"], -1, INT64_MAX);
  if (opt.count("--format")) o.format = opt["--format"];
  if (opt.count("--size")) o.size = int(to_int("--size", opt["--size"], 0, 8192));
  if (opt.count("--quality")) o.jpeg_quality = int(to_int("--quality", opt["--quality"], 1, 100));

  std::string images, labels;
  std::vector<std::string> names;
  if (opt.count("--images") || opt.count("--labels")) {
    LS_CHECK(opt.count("--images") && opt.count("--labels"),
             "export-image-folder: --images and --labels go together");
    images = opt["--images"];
    labels = opt["--labels"];
    if (opt.count("--class-names")) names = split_commas(opt["--class-names"]);
  } else {
    const std::string dir =
        ls::data::fashion_mnist_dir(opt.count("--data-dir") ? opt["--data-dir"] : "");
    const std::string split = opt.count("--split") ? opt["--split"] : "train";
    LS_CHECK(split == "train" || split == "test", "export-image-folder: --split must be train or ",
             "test, got \"", split, "\"");
    const std::string prefix = split == "train" ? "train" : "t10k";
    images = (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
    labels = (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();
    names = ls::data::FashionMnist::class_names();
  }
  auto res = ls::tools::export_idx_image_folder(images, labels, names, opt["--out"], o);
  std::printf("Wrote %lld files to %s (%zu classes:", (long long)res.files, opt["--out"].c_str(),
              res.class_dirs.size());
  for (size_t c = 0; c < res.class_dirs.size(); ++c)
    std::printf(" %s=%lld", res.class_dirs[c].c_str(), (long long)res.per_class[c]);
  std::printf(")\n");
  return 0;
}

const char* kExportTextUsage =
    "usage: lockstep export-text-folder --out DIR [options]\n"
    "\n"
    "Writes Debian's fortunes (apt-get install fortunes) as class folders of .txt files, one\n"
    "quote per file, the layout text_dataset_from_directory reads.\n"
    "\n"
    "options:\n"
    "  --fortunes-dir DIR     the category files (default /usr/share/games/fortunes)\n"
    "  --categories a,b,...   the classes (default computers,definitions,people,politics,\n"
    "                         science,songs-poems)\n"
    "  --limit-per-class N    at most N quotes per class (default: all)\n";

int export_text_folder(const std::vector<std::string>& args) {
  static const std::vector<std::string> known = {"--out", "--fortunes-dir", "--categories",
                                                 "--limit-per-class"};
  std::map<std::string, std::string> opt;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    if (a == "-h" || a == "--help") {
      std::fputs(kExportTextUsage, stdout);
      return 0;
    }
    if (auto eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else {
      LS_CHECK(i + 1 < args.size(), "export-text-folder: ", a, " needs a value");
      value = args[++i];
    }
    LS_CHECK(std::find(known.begin(), known.end(), a) != known.end(),
             "export-text-folder: unknown option ", a, " (see lockstep export-text-folder --help)");
    opt[a] = value;
  }
  LS_CHECK(opt.count("--out"), "export-text-folder: --out DIR is required");
  ls::tools::ExportFortunesOptions o;
  if (opt.count("--categories")) o.categories = split_commas(opt["--categories"]);
  if (opt.count("--limit-per-class"))
    o.limit_per_class = to_int("--limit-per-class", opt["--limit-per-class"], -1, INT64_MAX);
  const std::string dir =
      opt.count("--fortunes-dir") ? opt["--fortunes-dir"] : ls::tools::kFortunesDir;
  auto res = ls::tools::export_fortunes(dir, opt["--out"], o);
  std::printf("Wrote %lld files to %s (%zu classes:", (long long)res.files, opt["--out"].c_str(),
              res.categories.size());
  for (size_t c = 0; c < res.categories.size(); ++c)
    std::printf(" %s=%lld", res.categories[c].c_str(), (long long)res.per_class[c]);
  std::printf(")\n");
  return 0;
}

int ops_doc(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::puts(
        "usage: lockstep ops-doc > docs/ops.md\n\nPrints the op catalogue generated from "
        "the op declarations.");
    return 0;
  }
  LS_CHECK(args.empty(), "ops-doc takes no arguments (see lockstep ops-doc --help)");
  std::fputs(ls::render_ops_markdown().c_str(), stdout);
  return 0;
}

// The arguments that are not options nor an option's value: `value_options` take one (the
// commands' own parsers report anything malformed).
std::vector<std::string> positional(const std::vector<std::string>& args,
                                    const std::vector<std::string>& value_options) {
  std::vector<std::string> files;
  for (size_t i = 0; i < args.size(); ++i) {
    if (std::find(value_options.begin(), value_options.end(), args[i]) != value_options.end())
      ++i;
    else if (args[i].rfind("-", 0) != 0)
      files.push_back(args[i]);
  }
  return files;
}

// export-onnx MODEL.keras OUT.onnx: OUT must not be MODEL (the ONNX bytes replaced the model).
int export_onnx(const std::vector<std::string>& args) {
  const auto files = positional(args, {"--opset", "--batch-size"});
  if (files.size() == 2) ls::tools::check_output_is_not_input("export-onnx", files[1], {files[0]});
  return ls::onnx::export_command(args);
}

// report A.json ... -o OUT.png: OUT must not be one of the reports.
int report(const std::vector<std::string>& args) {
  const auto files = positional(args, {"-o", "--out"});
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "-o" || args[i] == "--out")
      ls::tools::check_output_is_not_input("report", args[i + 1], files);
  return ls::viz::report_command(args);
}

// The commands: adding one is one row here.
struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};
const Command kCommands[] = {
    {"summary", "print a model's layers, compile config and class names", ls::cli::run_summary},
    {"predict", "classify images with a .keras model (top-k classes)", ls::cli::run_predict},
    {"train", "train a Keras model JSON or .keras file on an image folder", ls::cli::run_train},
    {"generate", "write text with a byte-level GPT .keras model (build/bin/gpt)",
     ls::cli::run_generate},
    {"convert", "convert between .keras, .weights.h5, model JSON and checkpoints",
     ls::cli::run_convert},
    {"export-image-folder", "write an IDX dataset (Fashion-MNIST) as class folders of images",
     export_image_folder},
    {"export-text-folder", "write Debian's fortunes as class folders of text files",
     export_text_folder},
    {"ops-doc", "print the op catalogue (docs/ops.md) from the op declarations", ops_doc},
    {"export-onnx", "write a .keras model's inference graph as ONNX (opset 17+)", export_onnx},
    {"report", "plot CostReport files on one chart (accuracy vs time and dollars)", report},
};

std::string usage() {
  std::string u =
      "usage: lockstep <command> [options]   (lockstep <command> --help for its "
      "own)\n\ncommands:\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    u += "  " + name + std::string(name.size() < 21 ? 21 - name.size() : 1, ' ') + c.summary + "\n";
  }
  return u;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(usage().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  for (const Command& c : kCommands) {
    if (cmd != c.name) continue;
    try {
      return c.run(args);
    } catch (const ls::TrainingPreempted& e) {  // SIGTERM/SIGINT with --backup-dir: resumable
      std::fprintf(stderr, "lockstep %s: %s (exit status %d)\n", cmd.c_str(), e.what(),
                   ls::kPreemptedExitCode);
      return ls::kPreemptedExitCode;
    } catch (const std::exception& e) {  // lockstep::Error, and anything else: never terminate
      std::fprintf(stderr, "lockstep %s: error: %s\n", cmd.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "lockstep: unknown command \"%s\"\n\n%s", cmd.c_str(), usage().c_str());
  return 2;
}
