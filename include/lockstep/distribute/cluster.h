// Cluster resolvers: who the workers are and which one this process is, read from TF_CONFIG,
// the MPI environment (mpirun), the Slurm environment (srun), or a single local worker.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lockstep::distribute {

/// Environment variables as name -> value (tests pass their own; default is the process's).
using Environment = std::map<std::string, std::string>;
/// This process's environment variables.
Environment process_environment();

/// Splits "host:port" (IPv6 as "[::1]:port"); throws lockstep::Error naming `what` otherwise.
struct HostPort {
  std::string host;         ///< a name or address (IPv6 without brackets)
  int port = 0;             ///< 1..65535
  std::string str() const;  ///< "host:port" ("[v6]:port")
};
/// Parses "host:port" or "[v6]:port"; `what` names the address in errors ("TF_CONFIG worker 1").
HostPort parse_host_port(const std::string& address, const std::string& what);

/// The most node names a Slurm node list may expand to (bracket groups multiply).
inline constexpr int64_t kMaxSlurmNodes = 65536;

/// Expands a Slurm node list: "node[1-3,7],other" -> {node1, node2, node3, node7, other};
/// keeps zero padding ("n[08-10]" -> n08, n09, n10). Throws lockstep::Error on bad syntax
/// or a list of more than kMaxSlurmNodes names.
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist);

/// The cluster this process belongs to: how many workers, which one this is, where worker 0
/// (the chief, which hosts the rendezvous store) listens (tf.distribute's cluster resolvers).
class ClusterResolver {
 public:
  /// Where the cluster came from: one local worker, TF_CONFIG, the MPI or the Slurm environment.
  enum class Kind { kLocal, kTfConfig, kMpi, kSlurm };

  /// Picks from the environment, first match wins:
  ///   TF_CONFIG set -> from_tf_config; OMPI_COMM_WORLD_SIZE / PMI_SIZE / PMIX_RANK set ->
  ///   from_mpi_environment; SLURM_PROCID with SLURM_NTASKS > 1 -> from_slurm_environment;
  ///   otherwise local().
  ///@{
  static ClusterResolver from_environment();
  static ClusterResolver from_environment(const Environment& env);
  ///@}

  /// TF_CONFIG JSON: {"cluster":{"worker":["host:port",...], "chief":["host:port"]},
  ///                  "task":{"type":"worker","index":i}}.
  /// A "chief" entry, when present, is worker 0 and the "worker" list follows it (TF's
  /// convention). The store is hosted by worker 0 on its listed port; each worker's Gloo
  /// transport binds to its listed host.
  static ClusterResolver from_tf_config(const std::string& json);

  /// mpirun / srun --mpi: rank and size from OMPI_COMM_WORLD_RANK/SIZE (or PMI_RANK/PMI_SIZE,
  /// PMIX_RANK + PMIX_SIZE / OMPI_UNIVERSE_SIZE). The rendezvous address (used only when Gloo
  /// is chosen instead of MPI) comes from LOCKSTEP_MASTER_ADDR / MASTER_ADDR (default
  /// 127.0.0.1 when every rank is on one host: OMPI_COMM_WORLD_LOCAL_SIZE == size) and
  /// LOCKSTEP_MASTER_PORT / MASTER_PORT (default 29500).
  static ClusterResolver from_mpi_environment(const Environment& env);

  /// srun: rank from SLURM_PROCID, size from SLURM_NTASKS (or SLURM_NPROCS), the chief host is
  /// the first node of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), port from
  /// LOCKSTEP_MASTER_PORT / MASTER_PORT (default 29500). This worker's host is SLURMD_NODENAME.
  static ClusterResolver from_slurm_environment(const Environment& env);

  /// One worker, rank 0.
  static ClusterResolver local();

  Kind kind() const { return kind_; }                 ///< where the cluster came from
  const char* kind_name() const;                      ///< "local", "TF_CONFIG", "MPI", "Slurm"
  int num_workers() const { return num_workers_; }    ///< workers in the cluster
  int task_index() const { return task_index_; }      ///< this worker's index (its rank)
  bool is_chief() const { return task_index_ == 0; }  ///< worker 0
  /// Worker 0's "host:port": where the rendezvous store listens. Empty for local().
  const std::string& chief_address() const { return chief_address_; }
  /// Every worker's "host:port" when the source lists them (TF_CONFIG), else empty.
  const std::vector<std::string>& worker_addresses() const { return worker_addresses_; }
  /// The host this worker's transport binds to ("" = the machine's hostname).
  const std::string& own_host() const { return own_host_; }
  /// True when launched by an MPI launcher (MPI environment present): connect() with kAuto
  /// then uses the MPI backend if available.
  bool launched_by_mpi() const { return launched_by_mpi_; }

  /// Throws lockstep::Error when the cluster is inconsistent (index out of range, duplicate
  /// addresses, unparsable address). connect() calls it.
  void validate() const;

  /// A human-readable summary: "TF_CONFIG cluster, worker 1 of 2 (chief 10.0.0.1:2222)".
  std::string describe() const;

  /// Builds a resolver directly (tests, custom launchers).
  static ClusterResolver make(Kind kind, int num_workers, int task_index, std::string chief_address,
                              std::vector<std::string> worker_addresses = {},
                              std::string own_host = "", bool launched_by_mpi = false);

 private:
  Kind kind_ = Kind::kLocal;
  int num_workers_ = 1;
  int task_index_ = 0;
  std::string chief_address_;
  std::vector<std::string> worker_addresses_;
  std::string own_host_;
  bool launched_by_mpi_ = false;
};

}  // namespace lockstep::distribute
