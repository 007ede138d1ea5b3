// A backend that implements every pure virtual of lockstep::Backend: it must compile (the
// check's control case). backend_interface_check.sh also compiles the copy that drops one.
#include "lockstep/graph/backend.h"

namespace {

class FixtureBackend final : public lockstep::Backend {
 public:
  std::string name() const override { return "fixture"; }
  std::string doc() const override { return "a fixture"; }
  bool can_run(const lockstep::Node&, const std::vector<lockstep::TensorType>&,
               std::string*) const override {
    return false;
  }
  void run_passes(lockstep::Graph&, std::vector<lockstep::Value>&,
                  std::vector<std::string>&) const override {}
  bool splits_batch_over_host_threads() const override { return false; }
  std::unique_ptr<lockstep::CompiledGraph> compile(lockstep::Graph, std::vector<lockstep::Value>,
                                                   std::vector<lockstep::Value>,
                                                   const lockstep::CompileOptions&,
                                                   const lockstep::StepInfo*) const override {
    return nullptr;
  }
};

}  // namespace

void register_fixture() { lockstep::register_backend(std::make_shared<FixtureBackend>()); }
