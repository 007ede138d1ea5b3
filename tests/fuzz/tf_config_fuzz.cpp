// Fuzzes ClusterResolver::from_tf_config (the TF_CONFIG JSON) and the checks a resolved
// cluster goes through before connecting (validate, describe).
#include "fuzz_util.h"
#include "lockstep/distribute/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using lockstep::distribute::ClusterResolver;
  const std::string text(reinterpret_cast<const char*>(data), size);
  lockstep::fuzz::expect_clean([&] {
    const ClusterResolver resolver = ClusterResolver::from_tf_config(text);
    resolver.validate();
    resolver.describe();
  });
  return 0;
}
