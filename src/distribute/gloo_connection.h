// Internal: a connected Gloo context (store + tcp device + full mesh), shared by the Gloo
// communicator and the raw-engine benchmark.
#pragma once
#include <gloo/context.h>
#include <gloo/transport/device.h>

#include <memory>
#include <string>
#include <vector>

#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/store.h"

namespace lockstep::distribute::detail {

struct GlooConnection {
  std::unique_ptr<StoreServer> server;  // worker 0 only
  std::unique_ptr<StoreClient> client;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::Context> context;
  std::vector<std::string> addresses;  // "host:port" (or host) of every rank
};

// Validates nothing (connect() did); rendezvous through worker 0's store, connects the mesh.
GlooConnection connect_gloo_context(const ClusterResolver& resolver,
                                    const CommunicationOptions& options);

}  // namespace lockstep::distribute::detail
