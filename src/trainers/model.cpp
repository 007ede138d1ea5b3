// Model: a Network plus its training configuration and compiled programs.
#include "lockstep/trainers/model.h"

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/strategy.h"
#include "trainers/compile_resolution.h"
#include "trainers/internal/model_files.h"
#include "trainers/model_runtime.h"

namespace lockstep {

Model::Model() : runtime_(std::make_unique<ModelRuntime>()) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

Model::Model(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name)
    : Network(std::move(inputs), std::move(outputs), std::move(name)),
      strategy_(distribute::Strategy::current()),
      runtime_(std::make_unique<ModelRuntime>()) {}

Model::Model(Network network)
    : Network(std::move(network)),
      strategy_(distribute::Strategy::current()),
      runtime_(std::make_unique<ModelRuntime>()) {}

Model Sequential(std::vector<SequentialItem> items, std::string name) {
  return Model(Network::sequential(std::move(items), std::move(name)));
}

std::vector<MetricPtr> Model::metrics() const { return runtime_->resolved().all_metrics(); }

std::vector<std::string> Model::metric_log_names() const {
  return runtime_->resolved().metric_log_names;
}

const std::vector<LossPtr>& Model::output_losses() const {
  return runtime_->resolved().output_losses;
}
const std::vector<double>& Model::loss_weights() const { return runtime_->resolved().loss_weights; }
const CompileConfig& Model::compile_config() const { return runtime_->resolved().config; }
double Model::compile_seconds() const { return runtime_->compile_seconds(); }
int Model::programs_compiled() const { return runtime_->programs_compiled(); }
const Model::FitProgress& Model::fit_progress() const { return runtime_->fit_progress(); }
void Model::set_resume_point(int epoch, int64_t step) { runtime_->set_resume_point(epoch, step); }

std::vector<std::string> Model::output_names() const {
  std::vector<std::string> names;
  for (auto& o : outputs_) names.push_back(o.call && o.call->layer ? o.call->layer->name() : "");
  return names;
}

std::vector<std::string> Model::input_names() const {
  std::vector<std::string> names;
  for (auto& i : inputs_) names.push_back(i.call && i.call->layer ? i.call->layer->name() : "");
  return names;
}

// Resolved before anything changes: a configuration that does not fit the model leaves the
// model as it was.
void Model::compile(CompileConfig config) {
  ResolvedCompile resolved = resolve_compile(config, name_, output_names());
  if (auto current = distribute::Strategy::current()) strategy_ = current;  // compiled in a scope
  runtime_->compile(std::move(resolved), strategy_);
  set_device_residence(runtime_->residence());
}

// Saving reads the host values (weights and optimizer state), loading writes them: the device
// copies a backend keeps between steps come back first, or are stale after. The files
// themselves are saving's (src/saving/model_files.cpp), reached through model_files().
namespace {
const ModelFiles& files_for(const char* method) {
  const ModelFiles& files = model_files();
  LS_CHECK(files.save && files.save_weights && files.load_weights, "Model::", method,
           ": the saving module (liblockstep_saving) is not loaded; link Lockstep::lockstep");
  return files;
}
}  // namespace

void Model::save_weights(const std::string& path) const {
  runtime_->residence()->to_host();
  files_for("save_weights").save_weights(*this, path);
}
LoadWeightsReport Model::load_weights(const std::string& path, const LoadWeightsOptions& options) {
  runtime_->residence()->host_changed();
  return files_for("load_weights").load_weights(*this, path, options);
}
void Model::save(const std::string& path) const {
  runtime_->residence()->to_host();
  files_for("save").save(*this, path);
}

}  // namespace lockstep
