// Agreement before the first step: under a multi-worker strategy every worker publishes a
// fingerprint of what must match for the collectives to line up and the result to be the
// one-worker result (Lockstep version, strategy and communication options, replicas per
// worker, model config, weight shapes and dtypes, optimizer, loss, metrics, global batch and
// the fit options that decide the batches), and every worker fails with the same
// lockstep::Error naming the first field that differs and both values, instead of crashing
// in, hanging in, or silently mis-summing the first collective.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/trainers/model.h"

namespace lockstep {

// (field, value) in a fixed order; values are JSON text ("64", "\"Dense\"").
using Fingerprint = std::vector<std::pair<std::string, std::string>>;

// What fit is given besides the model: "arrays" with their global batch, or "dataset" with
// its static element spec ("unknown" when a stage hides it).
struct FitData {
  std::string kind;          // "arrays", "dataset" or "distributed_dataset"
  std::string global_batch;  // "64", or "unknown"
  std::string element_spec;  // datasets: ElementSpec::str()
  std::string samples;       // arrays: their row count ("" when not known)
};

Fingerprint fit_fingerprint(const Model& model, const FitConfig& config, const FitData& data);

// Serialised form sent to the other workers (JSON), and back.
std::string encode_fingerprint(const Fingerprint& fingerprint);
Fingerprint decode_fingerprint(const std::string& bytes, int worker);

// Throws lockstep::Error "fit: workers disagree on <field>: worker 0 has <a>, worker <k> has
// <b> ..." for the first field (in fingerprint order) where a worker differs from worker 0.
void check_fingerprints_agree(const std::vector<Fingerprint>& per_worker);

// Exchanges the fingerprints (one all-gather) and checks them; no-op unless the model is
// replicated across two or more workers. Every worker must call it at the same point.
void agree_before_fit(const Model& model, const FitConfig& config, const FitData& data);

}  // namespace lockstep
