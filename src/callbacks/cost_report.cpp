// CostReport: time, memory, hardware and dollars of a training run
// (lockstep/callbacks/cost_report.h).
#include "lockstep/callbacks/cost_report.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/core/file_io.h"
#include "lockstep/trainers/model.h"
#include "lockstep/viz/chart.h"

namespace lockstep {

// The most a price table read from a file may hold (it lists a few machines).
constexpr uint64_t kMaxReportBytes = 16ull << 20;

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    return name.empty() ? "unknown" : name;
  }
  return "unknown";
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

double price_from_table(const std::string& prices_file, const std::string& machine) {
  json table;
  try {
    table = parse_json(read_regular_file(prices_file, kMaxReportBytes, "price table"),
                       "CostReport: '" + prices_file + "'");
  } catch (const Error&) {
    table = json();  // the message below says what the file must be
  }
  LS_CHECK(table.is_object() && !table.empty(), "CostReport: '", prices_file,
           "' must be a JSON object of machine prices, e.g. {\"a100\": 3.93}");
  std::string names;
  for (auto& [name, price] : table.items()) names += (names.empty() ? "" : ", ") + name;
  std::string pick = machine;
  if (pick.empty()) {
    LS_CHECK(table.size() == 1, "CostReport: '", prices_file, "' lists several machines (", names,
             "); name one (--machine NAME)");
    pick = table.begin().key();
  }
  LS_CHECK(table.contains(pick), "CostReport: machine '", pick, "' is not in '", prices_file,
           "' (it has: ", names, ")");
  LS_CHECK(table[pick].is_number() && table[pick].get<double>() >= 0, "CostReport: the price of '",
           pick, "' in '", prices_file, "' must be a number of dollars per hour");
  return table[pick].get<double>();
}

namespace {

using Clock = std::chrono::steady_clock;

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  write_file_atomic(path, text, "CostReport");
}

class CostReportCb : public CostReportCallback {
 public:
  explicit CostReportCb(CostReportOptions o) : o_(std::move(o)) {
    for (double t : o_.thresholds)
      LS_CHECK(std::isfinite(t), "CostReport: thresholds must be finite numbers");
    LS_CHECK(o_.price_per_hour >= 0, "CostReport: price_per_hour must be >= 0, got ",
             o_.price_per_hour);
    if (o_.price_per_hour == 0 && !o_.prices_file.empty())
      o_.price_per_hour = price_from_table(o_.prices_file, o_.machine);
    if (o_.png_path.empty() && !o_.path.empty()) {
      std::filesystem::path p(o_.path);
      o_.png_path = p.replace_extension(".png").string();
    }
  }

  void begin_phase(const std::string& name) override {
    LS_CHECK(!name.empty(), "CostReport: a phase needs a name");
    next_phase_ = name;
  }

  void on_train_begin(const Logs&) override {
    const bool continues = !next_phase_.empty() && !phases_.empty();
    if (!continues) {  // a new run
      start_ = Clock::now();
      epochs_ = json::array();
      reached_.assign(o_.thresholds.size(), json());
      monitor_.clear();
      phases_ = json::array();
      train_seconds_before_ = 0, compile_seconds_before_ = 0, samples_before_ = 0;
    }
    compile_seconds_at_begin_ = model ? model->compile_seconds() : 0;
    in_fit_ = true;
    if (!next_phase_.empty()) {
      phases_.push_back({{"name", next_phase_},
                         {"first_epoch", int(epochs_.size()) + 1},
                         {"wall_seconds_at_begin", seconds_since_start()}});
      next_phase_.clear();
    }
  }

  void on_epoch_begin(int, const Logs&) override {
    epoch_start_ = Clock::now();
    samples_at_epoch_start_ = model ? model->fit_progress().samples : 0;
    train_seconds_at_epoch_start_ = model ? model->fit_progress().train_seconds : 0;
  }

  void on_epoch_end(int epoch, const Logs& logs) override {
    record_epoch(epoch, logs);
    if (chief() && !o_.path.empty()) write_text_atomic(o_.path, report().dump(2) + "\n");
  }

  void on_train_end(const Logs&) override {
    finish_phase();
    if (!chief()) return;
    if (!o_.path.empty()) write_text_atomic(o_.path, report().dump(2) + "\n");
    if (!o_.png_path.empty()) write_picture();
    if (o_.verbose) print_summary();
  }

  json report() const override;

 private:
  bool chief() const { return !model || !model->strategy() || model->strategy()->is_chief(); }
  double seconds_since_start() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }
  // This fit's figures so far (zero outside a fit).
  double fit_train_seconds() const {
    return in_fit_ && model ? model->fit_progress().train_seconds : 0.0;
  }
  int64_t fit_samples() const { return in_fit_ && model ? model->fit_progress().samples : 0; }
  double fit_compile_seconds() const {
    return in_fit_ && model ? model->compile_seconds() - compile_seconds_at_begin_ : 0.0;
  }
  void finish_phase();
  double cost_of(double seconds) const { return o_.price_per_hour * seconds / 3600.0; }
  std::string pick_monitor(const Logs& logs) const;
  void record_epoch(int epoch, const Logs& logs);
  json hardware() const;
  void write_picture() const;
  void print_summary() const;

  CostReportOptions o_;
  Clock::time_point start_ = Clock::now(), epoch_start_ = Clock::now();
  json epochs_ = json::array();
  std::vector<json> reached_;  // per threshold: the first epoch entry at or above it
  std::string monitor_;
  double compile_seconds_at_begin_ = 0, train_seconds_at_epoch_start_ = 0;
  int64_t samples_at_epoch_start_ = 0;
  // Phases (begin_phase): the one the next fit starts, those so far, and the finished fits'
  // totals that the running one adds to.
  std::string next_phase_;
  json phases_ = json::array();
  mutable json step_memory_;  // the last train step memory report() saw (kept after fit)
  bool in_fit_ = false;
  double train_seconds_before_ = 0, compile_seconds_before_ = 0;
  int64_t samples_before_ = 0;
};

// The running phase's figures, then this fit's totals folded into the run's.
void CostReportCb::finish_phase() {
  if (!in_fit_) return;
  if (!phases_.empty() && !phases_.back().contains("epochs")) {
    json& ph = phases_.back();
    const int first = ph["first_epoch"].get<int>();
    const double wall = seconds_since_start() - ph["wall_seconds_at_begin"].get<double>();
    const double train = fit_train_seconds();
    const int64_t samples = fit_samples();
    ph["epochs"] = int(epochs_.size()) - first + 1;
    ph["last_epoch"] = int(epochs_.size());
    ph["wall_seconds"] = wall;
    ph["train_seconds"] = train;
    ph["samples"] = samples;
    ph["images_per_second"] = train > 0 ? double(samples) / train : 0.0;
    ph["compile_seconds"] = fit_compile_seconds();
    if (o_.price_per_hour > 0) ph["cost"] = cost_of(wall);
  }
  train_seconds_before_ += fit_train_seconds();
  samples_before_ += fit_samples();
  compile_seconds_before_ += fit_compile_seconds();
  in_fit_ = false;
}

std::string CostReportCb::pick_monitor(const Logs& logs) const {
  if (o_.monitor_fn || logs.count(o_.monitor) || o_.monitor != "val_accuracy") return o_.monitor;
  for (auto& [name, value] : logs)
    if (name.rfind("val_", 0) == 0 && name.find("acc") != std::string::npos) return name;
  for (auto& [name, value] : logs)
    if (name.find("acc") != std::string::npos) return name;
  return o_.monitor;
}

void CostReportCb::record_epoch(int epoch, const Logs& logs) {
  if (monitor_.empty()) monitor_ = pick_monitor(logs);
  const double wall = std::chrono::duration<double>(Clock::now() - start_).count();
  const double epoch_wall = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  const Model::FitProgress progress = model ? model->fit_progress() : Model::FitProgress{};
  const double epoch_train = progress.train_seconds - train_seconds_at_epoch_start_;
  const int64_t epoch_samples = progress.samples - samples_at_epoch_start_;
  json e = {{"epoch", epoch + 1},
            {"wall_seconds", wall},
            {"train_seconds", train_seconds_before_ + progress.train_seconds},
            {"epoch_wall_seconds", epoch_wall},
            {"epoch_train_seconds", epoch_train},
            {"images_per_second", epoch_train > 0 ? double(epoch_samples) / epoch_train : 0.0}};
  double value = NAN;
  if (o_.monitor_fn) {
    value = o_.monitor_fn(epoch, logs);
  } else if (auto it = logs.find(monitor_); it != logs.end()) {
    value = it->second;
  }
  e["monitor_value"] = std::isfinite(value) ? json(value) : json();
  for (const char* key : {"loss", "val_loss"}) {
    auto found = logs.find(key);
    if (found != logs.end() && std::isfinite(found->second)) e[key] = found->second;
  }
  if (o_.price_per_hour > 0) e["cost"] = cost_of(wall), e["epoch_cost"] = cost_of(epoch_wall);
  if (!phases_.empty()) e["phase"] = phases_.back()["name"];
  for (size_t i = 0; i < o_.thresholds.size(); ++i)
    if (reached_[i].is_null() && std::isfinite(value) && value >= o_.thresholds[i]) reached_[i] = e;
  epochs_.push_back(std::move(e));
}

json CostReportCb::hardware() const {
  const int replicas = model && model->strategy() ? model->strategy()->replicas_in_sync() : 1;
  const int workers = model && model->strategy() ? model->strategy()->num_workers : 1;
  const std::string cpu = cpu_model_name();
  const unsigned cores = std::thread::hardware_concurrency();
  char summary[256];
  std::snprintf(summary, sizeof summary, "%s, %u cores, %d replica%s, %d worker%s", cpu.c_str(),
                cores, replicas, replicas == 1 ? "" : "s", workers, workers == 1 ? "" : "s");
  return {{"cpu_model", cpu},
          {"cores", cores},
          {"replicas", replicas},
          {"workers", workers},
          {"summary", summary}};
}

json CostReportCb::report() const {
  json r = {{"label", o_.label},
            {"hardware", hardware()},
            {"monitor", monitor_.empty() ? o_.monitor : monitor_},
            {"thresholds", o_.thresholds},
            {"epochs", epochs_},
            {"peak_rss_mb", peak_rss_mb()}};
  r["price_per_hour"] = o_.price_per_hour > 0 ? json(o_.price_per_hour) : json();
  if (!o_.machine.empty()) r["machine"] = o_.machine;
  const json last = epochs_.empty() ? json::object() : epochs_.back();
  const double wall = last.value("wall_seconds", 0.0), train = last.value("train_seconds", 0.0);
  const int64_t samples = samples_before_ + fit_samples();
  r["compile_seconds"] = compile_seconds_before_ + fit_compile_seconds();
  r["wall_seconds"] = wall;
  r["train_seconds"] = train;
  r["samples"] = samples;
  r["images_per_second"] = train > 0 ? double(samples) / train : 0.0;
  json to_threshold = json::array();
  for (size_t i = 0; i < o_.thresholds.size(); ++i) {
    json t = {{"threshold", o_.thresholds[i]}, {"reached", !reached_[i].is_null()}};
    if (!reached_[i].is_null()) {
      for (const char* key : {"epoch", "wall_seconds", "train_seconds", "cost"})
        if (reached_[i].contains(key)) t[key] = reached_[i][key];
    }
    to_threshold.push_back(t);
  }
  r["time_to_threshold"] = to_threshold;
  if (o_.price_per_hour > 0) {
    r["total_cost"] = cost_of(wall);
    r["cost_per_epoch"] = epochs_.empty() ? 0.0 : cost_of(wall) / double(epochs_.size());
  }
  if (std::optional<StepMemory> m = model ? model->compiled_step_memory() : std::nullopt) {
    r["step_memory"] = {
        {"batch_size", m->batch_size},           {"arena_bytes", m->arena_bytes},
        {"workspace_bytes", m->workspace_bytes}, {"variable_bytes", m->variable_bytes},
        {"peak_bytes", m->peak_bytes},           {"planned", m->planned}};
    step_memory_ = r["step_memory"];
  } else if (!step_memory_.is_null()) {
    r["step_memory"] = step_memory_;  // the model is gone (report() after fit): the last one
  }
  if (!phases_.empty()) {
    json phases = json::array();
    for (json ph : phases_) {
      ph.erase("wall_seconds_at_begin");
      phases.push_back(std::move(ph));
    }
    r["phases"] = std::move(phases);
  }
  return r;
}

void CostReportCb::write_picture() const {
  bool any_point = false;
  for (const json& e : epochs_) any_point = any_point || e["monitor_value"].is_number();
  if (!any_point) {
    std::fprintf(stderr, "CostReport: no '%s' values to plot; '%s' not written\n", monitor_.c_str(),
                 o_.png_path.c_str());
    return;
  }
  viz::save_cost_report_plot(std::vector<json>{report()}, o_.png_path);
}

void CostReportCb::print_summary() const {
  const json r = report();
  std::printf("cost report: %s\n", r["hardware"]["summary"].get<std::string>().c_str());
  std::printf("  wall %.1f s, training %.1f s, compile %.2f s, %.0f images/s, peak RSS %.0f MB\n",
              r["wall_seconds"].get<double>(), r["train_seconds"].get<double>(),
              r["compile_seconds"].get<double>(), r["images_per_second"].get<double>(),
              r["peak_rss_mb"].get<double>());
  if (r.contains("step_memory")) {
    const json& m = r["step_memory"];
    const double mb = 1.0 / (1 << 20);
    std::printf(
        "  train step (batch %lld): peak memory %.1f MB = intermediates %.1f MB (the planner's "
        "arena) + scratch %.1f MB + weights and optimizer state %.1f MB\n",
        (long long)m["batch_size"].get<int64_t>(), double(m["peak_bytes"].get<size_t>()) * mb,
        double(m["arena_bytes"].get<size_t>()) * mb,
        double(m["workspace_bytes"].get<size_t>()) * mb,
        double(m["variable_bytes"].get<size_t>()) * mb);
  }
  const bool priced = o_.price_per_hour > 0;
  for (const json& t : r["time_to_threshold"]) {
    if (!t["reached"].get<bool>()) {
      std::printf("  %s >= %.4g: not reached\n", monitor_.c_str(), t["threshold"].get<double>());
      continue;
    }
    std::printf("  %s >= %.4g: epoch %d, %.1f s wall, %.1f s training", monitor_.c_str(),
                t["threshold"].get<double>(), t["epoch"].get<int>(),
                t["wall_seconds"].get<double>(), t["train_seconds"].get<double>());
    if (priced) std::printf(", $%.4f", t["cost"].get<double>());
    std::printf("\n");
  }
  if (priced)
    std::printf("  at $%.2f/h: $%.4f per epoch, $%.4f in all\n", o_.price_per_hour,
                r["cost_per_epoch"].get<double>(), r["total_cost"].get<double>());
  if (r.contains("phases"))
    for (const json& ph : r["phases"]) {
      if (!ph.contains("epochs")) continue;
      std::printf("  phase '%s': epochs %d-%d, wall %.1f s, training %.1f s, %.0f images/s",
                  ph["name"].get<std::string>().c_str(), ph["first_epoch"].get<int>(),
                  ph["last_epoch"].get<int>(), ph["wall_seconds"].get<double>(),
                  ph["train_seconds"].get<double>(), ph["images_per_second"].get<double>());
      if (priced) std::printf(", $%.4f", ph["cost"].get<double>());
      std::printf("\n");
    }
  std::fflush(stdout);
}

}  // namespace

namespace callbacks {
std::shared_ptr<CostReportCallback> CostReport(CostReportOptions options) {
  return std::make_shared<CostReportCb>(std::move(options));
}
}  // namespace callbacks

}  // namespace lockstep
