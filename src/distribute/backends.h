// Internal: factories of the collective backends that connect() chooses between. The Gloo and
// MPI ones exist only when Lockstep was built with those engines.
#pragma once
#include <memory>

#include "lockstep/distribute/collective.h"

namespace lockstep::distribute::detail {

#ifdef LOCKSTEP_HAVE_GLOO
std::unique_ptr<Communicator> connect_gloo(const ClusterResolver& resolver,
                                           const CommunicationOptions& options);
#endif
#ifdef LOCKSTEP_HAVE_MPI
std::unique_ptr<Communicator> connect_mpi(const ClusterResolver& resolver,
                                          const CommunicationOptions& options);
#endif

// "1.5 s", "200 ms": durations in error messages.
std::string format_duration(std::chrono::milliseconds d);

}  // namespace lockstep::distribute::detail
