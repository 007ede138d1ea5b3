// The registry of in-process replica exchanges (lockstep/graph/replica_exchange.h).
#include "lockstep/graph/replica_exchange.h"

#include <map>
#include <mutex>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {
std::mutex g_mu;
std::map<int64_t, ReplicaExchange*>& exchanges() {
  static std::map<int64_t, ReplicaExchange*> m;
  return m;
}
}  // namespace

ReplicaExchange* ReplicaExchange::find(int64_t group) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = exchanges().find(group);
  LS_CHECK(it != exchanges().end(), "synchronized batch norm: replica group ", group,
           " has no in-process exchange (its strategy or model was destroyed, or the program was "
           "compiled for replicas that are not threads of this process)");
  return it->second;
}

void ReplicaExchange::set(int64_t group, ReplicaExchange* x) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (x)
    exchanges()[group] = x;
  else
    exchanges().erase(group);
}

}  // namespace lockstep
