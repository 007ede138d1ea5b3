// XlaClusterResolver and XlaStrategy (lockstep/distribute/xla_strategy.h): the strategy is one
// host replica whose programs run on every device on backend "xla": on one worker as
// DataParallel over a one-axis mesh (StrategyImpl::sharding: one SPMD program), across workers
// as device replicas (StrategyImpl::device_replicas) around the host all-reduce.
#include "lockstep/distribute/xla_strategy.h"

#include <cstdio>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/distribution.h"

namespace lockstep::distribute {

XlaClusterResolver XlaClusterResolver::connect(const std::string& plugin, int device_count,
                                               bool print) {
  XlaClusterResolver r;
  r.system_ = connect_devices("xla", plugin, device_count);
  LS_CHECK(!r.system_.devices.empty(), "connect: PJRT plugin '", plugin, "' (", r.system_.plugin,
           ") has no devices");
  if (print) {
    std::printf("XLA: connected to %s\n", r.system_.description.c_str());
    for (const std::string& d : r.system_.devices) std::printf("  device %s\n", d.c_str());
    std::fflush(stdout);
  }
  return r;
}

namespace {

Strategy make(const XlaClusterResolver& resolver, const ClusterResolver& cluster, bool workers,
              StrategyOptions options) {
  LS_CHECK(resolver.num_devices() >= 1,
           "XlaStrategy: the resolver has no devices; make it with XlaClusterResolver::connect");
  // (one host replica per worker: its programs are the device replicas)
  options.replicas_per_worker = 1;
  auto impl = std::make_shared<StrategyImpl>("XlaStrategy", std::vector<std::string>{"cpu:0"},
                                             options, cluster, workers);
  impl->device_replicas = resolver.num_devices();
  impl->devices = resolver.system().devices;
  impl->backend = resolver.system().backend;
  // One worker: DataParallel on a one-axis mesh over the devices (one SPMD program; XLA's
  // partitioner inserts the gradient all-reduce). Across workers the step runs around the
  // workers' host all-reduce, as replicas (xla_backend.cpp).
  if (!workers)
    impl->sharding =
        distribution::DataParallel(distribution::DeviceMesh({resolver.num_devices()}, {"batch"}))
            .plan();
  return Strategy(impl);
}

}  // namespace

Strategy XlaStrategy(const XlaClusterResolver& resolver, StrategyOptions options) {
  return make(resolver, ClusterResolver::local(), false, options);
}

Strategy XlaStrategy(const XlaClusterResolver& resolver, const ClusterResolver& cluster,
                     StrategyOptions options) {
  return make(resolver, cluster, true, options);
}

}  // namespace lockstep::distribute
