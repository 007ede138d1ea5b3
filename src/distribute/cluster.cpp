// Cluster resolvers: TF_CONFIG, MPI (mpirun), Slurm (srun) and local.
#include "lockstep/distribute/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "lockstep/core/env.h"
#include "lockstep/core/error.h"
#include "lockstep/core/json.h"
#include "lockstep/core/parse.h"

namespace lockstep::distribute {
namespace {

constexpr int kDefaultMasterPort = 29500;

const std::string* find(const Environment& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return nullptr;
  return &it->second;
}

// Upper bound on ranks and world sizes read from the environment (beyond it a number is a typo
// or garbage, not a cluster).
constexpr int64_t kMaxWorkers = int64_t(1) << 20;

int env_int(const Environment& env, const std::string& name, int64_t min, int64_t max) {
  const std::string* v = find(env, name);
  LS_CHECK(v != nullptr, name, " is not set");
  return int(parse_int(name, *v, min, max));
}

int env_rank(const Environment& env, const std::string& name) {
  return env_int(env, name, 0, kMaxWorkers - 1);
}
int env_size(const Environment& env, const std::string& name) {
  return env_int(env, name, 1, kMaxWorkers);
}

int master_port(const Environment& env) {
  for (const char* name : {"LOCKSTEP_MASTER_PORT", "MASTER_PORT"}) {
    if (const std::string* v = find(env, name)) {
      const int64_t port = parse_int(name, *v, INT64_MIN, INT64_MAX);
      LS_CHECK(port > 0 && port < 65536, name, "=", *v, " is not a TCP port (1..65535)");
      return int(port);
    }
  }
  return kDefaultMasterPort;
}

std::string join_host_port(const std::string& host, int port) { return HostPort{host, port}.str(); }

// Splits on commas that are not inside brackets.
std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  return parts;
}

void expand_one(const std::string& item, const std::string& whole, std::vector<std::string>& out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    LS_CHECK(item.find(']') == std::string::npos, "Slurm node list '", whole,
             "': unmatched ']' in '", item, "'");
    LS_CHECK(!item.empty(), "Slurm node list '", whole, "': empty node name");
    // Several bracket groups multiply ("a[0-999]b[0-999]c[0-999]" is 10^9 names): the list is
    // refused as soon as it passes the limit, before the product is enumerated.
    LS_CHECK(out.size() < size_t(kMaxSlurmNodes), "Slurm node list '", whole,
             "' expands to more than ", kMaxSlurmNodes,
             " nodes (its bracket ranges multiply); check SLURM_STEP_NODELIST");
    out.push_back(item);
    return;
  }
  const size_t close = item.find(']', open);
  LS_CHECK(close != std::string::npos, "Slurm node list '", whole, "': unmatched '[' in '", item,
           "'");
  const std::string prefix = item.substr(0, open);
  const std::string suffix = item.substr(close + 1);
  const std::string body = item.substr(open + 1, close - open - 1);
  LS_CHECK(!body.empty(), "Slurm node list '", whole, "': empty brackets in '", item, "'");
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    const std::string range = body.substr(start, comma - start);
    const size_t dash = range.find('-');
    const std::string lo_text = range.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
    auto all_digits = [](const std::string& s) {
      return !s.empty() && std::all_of(s.begin(), s.end(), ::isdigit);
    };
    LS_CHECK(all_digits(lo_text) && all_digits(hi_text), "Slurm node list '", whole,
             "': bad range '", range, "' (expected N or N-M)");
    const std::string bound = "Slurm node list '" + whole + "': range bound";
    const int64_t lo = parse_int(bound, lo_text, 0, INT64_MAX);
    const int64_t hi = parse_int(bound, hi_text, 0, INT64_MAX);
    LS_CHECK(lo <= hi, "Slurm node list '", whole, "': descending range '", range, "'");
    LS_CHECK(hi - lo < 100000, "Slurm node list '", whole, "': range '", range, "' too large");
    const size_t width = lo_text.size();
    for (int64_t i = lo; i <= hi; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < width) number = std::string(width - number.size(), '0') + number;
      expand_one(prefix + number + suffix, whole, out);  // suffix may hold more brackets
    }
    start = comma + 1;
  }
}

}  // namespace

Environment process_environment() { return env::process_environment(); }

std::string HostPort::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

HostPort parse_host_port(const std::string& address, const std::string& what) {
  HostPort hp;
  std::string port_text;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    LS_CHECK(close != std::string::npos && close + 1 < address.size() && address[close + 1] == ':',
             what, ": '", address, "' is not host:port (IPv6 as [addr]:port)");
    hp.host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    LS_CHECK(colon != std::string::npos && colon > 0, what, ": '", address,
             "' is not host:port (for example 10.0.0.1:2222)");
    hp.host = address.substr(0, colon);
    LS_CHECK(hp.host.find(':') == std::string::npos, what, ": '", address,
             "' is ambiguous (write IPv6 addresses as [addr]:port)");
    port_text = address.substr(colon + 1);
  }
  const bool digits = !port_text.empty() && port_text.size() <= 5 &&
                      std::all_of(port_text.begin(), port_text.end(), ::isdigit);
  LS_CHECK(digits && std::stoi(port_text) > 0 && std::stoi(port_text) < 65536, what, ": '", address,
           "' has no valid port (1..65535)");
  hp.port = std::stoi(port_text);
  return hp;
}

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist) {
  LS_CHECK(!nodelist.empty(), "Slurm node list is empty");
  std::vector<std::string> out;
  for (const std::string& item : split_top_level(nodelist)) expand_one(item, nodelist, out);
  return out;
}

ClusterResolver ClusterResolver::make(Kind kind, int num_workers, int task_index,
                                      std::string chief_address,
                                      std::vector<std::string> worker_addresses,
                                      std::string own_host, bool launched_by_mpi) {
  ClusterResolver r;
  r.kind_ = kind;
  r.num_workers_ = num_workers;
  r.task_index_ = task_index;
  r.chief_address_ = std::move(chief_address);
  r.worker_addresses_ = std::move(worker_addresses);
  r.own_host_ = std::move(own_host);
  r.launched_by_mpi_ = launched_by_mpi;
  return r;
}

ClusterResolver ClusterResolver::local() { return make(Kind::kLocal, 1, 0, ""); }

ClusterResolver ClusterResolver::from_tf_config(const std::string& text) {
  nlohmann::json config;
  try {
    config = parse_json(text, "TF_CONFIG");
  } catch (const std::exception& e) {
    LS_FAIL("TF_CONFIG is not valid JSON (", e.what(), "); expected ",
            R"({"cluster":{"worker":["host:port",...]},"task":{"type":"worker","index":0}})");
  }
  LS_CHECK(config.is_object() && config.contains("cluster") && config["cluster"].is_object(),
           "TF_CONFIG has no \"cluster\" object; expected ",
           R"({"cluster":{"worker":["host:port",...]},"task":{"type":"worker","index":0}})");
  const auto& cluster = config["cluster"];
  auto address_list = [&](const char* job) {
    std::vector<std::string> list;
    if (!cluster.contains(job)) return list;
    LS_CHECK(cluster[job].is_array(), "TF_CONFIG cluster.", job,
             " must be a list of \"host:port\" strings");
    for (const auto& entry : cluster[job]) {
      LS_CHECK(entry.is_string(), "TF_CONFIG cluster.", job, " has a non-string entry ",
               entry.dump(), " (expected \"host:port\")");
      list.push_back(entry.get<std::string>());
    }
    return list;
  };
  const std::vector<std::string> chief = address_list("chief");
  const std::vector<std::string> workers = address_list("worker");
  for (const auto& [job, value] : cluster.items()) {
    LS_CHECK(job == "worker" || job == "chief", "TF_CONFIG cluster.", job,
             " is not supported (Lockstep runs synchronous workers: use \"worker\" and "
             "optionally one \"chief\")");
  }
  LS_CHECK(chief.size() <= 1, "TF_CONFIG cluster.chief lists ", chief.size(),
           " addresses; at most one chief");
  std::vector<std::string> all = chief;
  all.insert(all.end(), workers.begin(), workers.end());
  LS_CHECK(!all.empty(), "TF_CONFIG cluster.worker is empty; list every worker's host:port");

  LS_CHECK(config.contains("task") && config["task"].is_object(),
           "TF_CONFIG has no \"task\" object; add \"task\":{\"type\":\"worker\",\"index\":i}");
  const auto& task = config["task"];
  const std::string type =
      task.contains("type") && task["type"].is_string() ? task["type"].get<std::string>() : "";
  LS_CHECK(type == "worker" || type == "chief", "TF_CONFIG task.type is '", type,
           "'; expected \"worker\" (or \"chief\")");
  LS_CHECK(task.contains("index") && task["index"].is_number_integer(),
           "TF_CONFIG task.index is missing or not an integer");
  // Read at full width (never narrowed to int first: 4294967297 must not become 1); the JSON
  // text is what the messages show.
  const auto& index_json = task["index"];
  const std::string index_text = index_json.dump();
  const int64_t index = index_json.is_number_unsigned()
                            ? int64_t(std::min<uint64_t>(index_json.get<uint64_t>(), INT64_MAX))
                            : index_json.get<int64_t>();
  int rank = 0;
  if (type == "chief") {
    LS_CHECK(!chief.empty(), "TF_CONFIG task.type is \"chief\" but cluster.chief is missing");
    LS_CHECK(index == 0, "TF_CONFIG task.index ", index_text, " for the chief; must be 0");
  } else {
    LS_CHECK(index >= 0 && index < int64_t(workers.size()), "TF_CONFIG task.index ", index_text,
             " is out of range: cluster.worker has ", workers.size(), " entries (0..",
             int(workers.size()) - 1, ")");
    rank = int(chief.size()) + int(index);
  }
  const HostPort own =
      parse_host_port(all[rank], "TF_CONFIG address of worker " + std::to_string(rank));
  ClusterResolver r = make(Kind::kTfConfig, int(all.size()), rank, all[0], all, own.host);
  r.validate();
  return r;
}

ClusterResolver ClusterResolver::from_mpi_environment(const Environment& env) {
  int rank = -1, size = -1;
  if (find(env, "OMPI_COMM_WORLD_RANK")) {
    rank = env_rank(env, "OMPI_COMM_WORLD_RANK");
    size = env_size(env, "OMPI_COMM_WORLD_SIZE");
  } else if (find(env, "PMI_RANK")) {
    rank = env_rank(env, "PMI_RANK");
    size = env_size(env, "PMI_SIZE");
  } else if (find(env, "PMIX_RANK")) {
    rank = env_rank(env, "PMIX_RANK");
    size =
        find(env, "PMIX_SIZE") ? env_size(env, "PMIX_SIZE") : env_size(env, "OMPI_UNIVERSE_SIZE");
  } else {
    LS_FAIL(
        "no MPI environment: OMPI_COMM_WORLD_RANK, PMI_RANK and PMIX_RANK are unset "
        "(launch with mpirun -np N, or srun --mpi=pmix)");
  }
  LS_CHECK(size >= 1, "MPI world size ", size, " must be at least 1");
  LS_CHECK(rank >= 0 && rank < size, "MPI rank ", rank, " is out of range for world size ", size);
  std::string host;
  for (const char* name : {"LOCKSTEP_MASTER_ADDR", "MASTER_ADDR"}) {
    if (const std::string* v = find(env, name); v && host.empty()) host = *v;
  }
  if (host.empty()) {
    if (const std::string* nodes = find(env, "SLURM_STEP_NODELIST")) {
      host = expand_slurm_nodelist(*nodes).front();
    } else if (const std::string* local = find(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
               local && env_size(env, "OMPI_COMM_WORLD_LOCAL_SIZE") == size) {
      host = "127.0.0.1";  // every rank on this host
    }
  }
  std::string own_host;
  if (host == "127.0.0.1") own_host = host;
  ClusterResolver r =
      make(Kind::kMpi, size, rank, host.empty() ? "" : join_host_port(host, master_port(env)), {},
           own_host, true);
  r.validate();
  return r;
}

ClusterResolver ClusterResolver::from_slurm_environment(const Environment& env) {
  const int rank = env_rank(env, "SLURM_PROCID");
  const int size =
      find(env, "SLURM_NTASKS") ? env_size(env, "SLURM_NTASKS") : env_size(env, "SLURM_NPROCS");
  LS_CHECK(size >= 1, "SLURM_NTASKS=", size, " must be at least 1");
  LS_CHECK(rank >= 0 && rank < size, "SLURM_PROCID=", rank,
           " is out of range for SLURM_NTASKS=", size);
  const std::string* nodes = find(env, "SLURM_STEP_NODELIST");
  if (!nodes) nodes = find(env, "SLURM_JOB_NODELIST");
  LS_CHECK(nodes != nullptr || size == 1,
           "Slurm environment without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: cannot tell "
           "where worker 0 runs (launch with srun)");
  std::string chief;
  if (nodes) {
    const std::string first = expand_slurm_nodelist(*nodes).front();
    const std::string* master = find(env, "LOCKSTEP_MASTER_ADDR");
    chief = join_host_port(master ? *master : first, master_port(env));
  }
  const std::string* own = find(env, "SLURMD_NODENAME");
  ClusterResolver r = make(Kind::kSlurm, size, rank, chief, {}, own ? *own : "");
  r.validate();
  return r;
}

ClusterResolver ClusterResolver::from_environment(const Environment& env) {
  if (const std::string* tf = find(env, "TF_CONFIG")) return from_tf_config(*tf);
  if (find(env, "OMPI_COMM_WORLD_SIZE") || find(env, "PMI_SIZE") || find(env, "PMIX_RANK")) {
    return from_mpi_environment(env);
  }
  if (find(env, "SLURM_PROCID")) return from_slurm_environment(env);
  return local();
}

ClusterResolver ClusterResolver::from_environment() {
  return from_environment(process_environment());
}

const char* ClusterResolver::kind_name() const {
  switch (kind_) {
    case Kind::kLocal:
      return "local";
    case Kind::kTfConfig:
      return "TF_CONFIG";
    case Kind::kMpi:
      return "MPI";
    case Kind::kSlurm:
      return "Slurm";
  }
  return "?";
}

void ClusterResolver::validate() const {
  LS_CHECK(num_workers_ >= 1, describe(), ": the cluster needs at least one worker");
  LS_CHECK(task_index_ >= 0 && task_index_ < num_workers_, describe(), ": task index ", task_index_,
           " is out of range 0..", num_workers_ - 1);
  if (!worker_addresses_.empty()) {
    LS_CHECK(int(worker_addresses_.size()) == num_workers_, describe(), ": ",
             worker_addresses_.size(), " worker addresses for ", num_workers_, " workers");
    std::map<std::string, int> seen;
    for (int i = 0; i < num_workers_; ++i) {
      const HostPort hp =
          parse_host_port(worker_addresses_[i], "address of worker " + std::to_string(i));
      std::string key = hp.str();
      if (hp.host == "localhost") key = HostPort{"127.0.0.1", hp.port}.str();
      auto [it, inserted] = seen.emplace(key, i);
      LS_CHECK(inserted, kind_name(), " cluster lists ", worker_addresses_[i], " twice (workers ",
               it->second, " and ", i, "); every worker needs its own host:port");
    }
  }
  if (num_workers_ > 1 && !chief_address_.empty()) {
    parse_host_port(chief_address_, "address of worker 0 (the rendezvous store)");
  }
}

std::string ClusterResolver::describe() const {
  std::string s = std::string(kind_name()) + " cluster, worker " + std::to_string(task_index_) +
                  " of " + std::to_string(num_workers_);
  if (!chief_address_.empty()) s += " (chief " + chief_address_ + ")";
  return s;
}

}  // namespace lockstep::distribute
