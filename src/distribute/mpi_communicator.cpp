// mpi backend of the collective interface (being written: connect() reports it).
#include "distribute/backends.h"

namespace lockstep::distribute::detail {

std::unique_ptr<Communicator> connect_mpi(const ClusterResolver& resolver,
                                          const CommunicationOptions& options) {
  throw CollectiveError("connect(" + resolver.describe() +
                        "): the mpi backend is not finished yet");
}

}  // namespace lockstep::distribute::detail
