// gloo backend of the collective interface (being written: connect() reports it).
#include "distribute/backends.h"

namespace lockstep::distribute::detail {

std::unique_ptr<Communicator> connect_gloo(const ClusterResolver& resolver,
                                           const CommunicationOptions& options) {
  throw CollectiveError("connect(" + resolver.describe() +
                        "): the gloo backend is not finished yet");
}

}  // namespace lockstep::distribute::detail
