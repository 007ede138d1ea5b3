// Cluster resolvers: TF_CONFIG, MPI and Slurm environments, Slurm node lists, and the errors
// for bad definitions.
#include "lockstep/distribute/cluster.h"

#include <gtest/gtest.h>

#include "lockstep/core/error.h"

namespace ld = lockstep::distribute;
using Kind = ld::ClusterResolver::Kind;

namespace {
// Expects fn() to throw lockstep::Error whose message contains `text`.
template <typename Fn>
void expect_error(Fn fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << text;
  } catch (const lockstep::Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(ClusterResolver, TfConfigWorkers) {
  auto r = ld::ClusterResolver::from_tf_config(
      R"({"cluster":{"worker":["10.0.0.1:2222","10.0.0.2:2223","[::1]:2224"]},)"
      R"("task":{"type":"worker","index":1}})");
  EXPECT_EQ(r.kind(), Kind::kTfConfig);
  EXPECT_EQ(r.num_workers(), 3);
  EXPECT_EQ(r.task_index(), 1);
  EXPECT_FALSE(r.is_chief());
  EXPECT_EQ(r.chief_address(), "10.0.0.1:2222");
  EXPECT_EQ(r.own_host(), "10.0.0.2");
  EXPECT_EQ(r.worker_addresses().size(), 3u);
  EXPECT_EQ(r.describe(), "TF_CONFIG cluster, worker 1 of 3 (chief 10.0.0.1:2222)");
}

TEST(ClusterResolver, TfConfigChiefComesFirst) {
  auto r = ld::ClusterResolver::from_tf_config(
      R"({"cluster":{"chief":["c:1"],"worker":["w0:2","w1:3"]},"task":{"type":"worker","index":1}})");
  EXPECT_EQ(r.num_workers(), 3);
  EXPECT_EQ(r.task_index(), 2);
  EXPECT_EQ(r.chief_address(), "c:1");
  auto chief = ld::ClusterResolver::from_tf_config(
      R"({"cluster":{"chief":["c:1"],"worker":["w0:2"]},"task":{"type":"chief","index":0}})");
  EXPECT_TRUE(chief.is_chief());
}

TEST(ClusterResolver, TfConfigErrorsAreExplained) {
  expect_error([] { ld::ClusterResolver::from_tf_config("{not json"); }, "not valid JSON");
  expect_error([] { ld::ClusterResolver::from_tf_config(R"({"task":{}})"); },
               "no \"cluster\" object");
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":2}})");
      },
      "task.index 2 is out of range: cluster.worker has 2 entries (0..1)");
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"worker":["a:1","a:1"]},"task":{"type":"worker","index":0}})");
      },
      "lists a:1 twice (workers 0 and 1)");
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"worker":["localhost:7","127.0.0.1:7"]},"task":{"type":"worker","index":0}})");
      },
      "twice");
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"worker":["a:1","b"]},"task":{"type":"worker","index":0}})");
      },
      "'b' is not host:port");
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"worker":["a:99999"]},"task":{"type":"worker","index":0}})");
      },
      "no valid port");
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"worker":["a:1"],"ps":["p:2"]},"task":{"type":"worker","index":0}})");
      },
      "cluster.ps is not supported");
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"worker":["a:1"]},"task":{"type":"evaluator","index":0}})");
      },
      "task.type is 'evaluator'");
  expect_error(
      [] { ld::ClusterResolver::from_tf_config(R"({"cluster":{"worker":[]},"task":{}})"); },
      "cluster.worker is empty");
}

TEST(ClusterResolver, MpiEnvironment) {
  auto r = ld::ClusterResolver::from_environment({{"OMPI_COMM_WORLD_RANK", "1"},
                                                  {"OMPI_COMM_WORLD_SIZE", "4"},
                                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_EQ(r.kind(), Kind::kMpi);
  EXPECT_EQ(r.task_index(), 1);
  EXPECT_EQ(r.num_workers(), 4);
  EXPECT_TRUE(r.launched_by_mpi());
  EXPECT_EQ(r.chief_address(), "127.0.0.1:29500");  // all ranks on one host
  auto pmi = ld::ClusterResolver::from_environment(
      {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(pmi.num_workers(), 2);
  EXPECT_EQ(pmi.chief_address(), "node7:1234");
  auto multi_host = ld::ClusterResolver::from_environment({{"OMPI_COMM_WORLD_RANK", "0"},
                                                           {"OMPI_COMM_WORLD_SIZE", "4"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(multi_host.chief_address(), "");  // unknown: MPI backend only, Gloo needs MASTER_ADDR
  expect_error(
      [] {
        ld::ClusterResolver::from_environment(
            {{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
      },
      "OMPI_COMM_WORLD_RANK expects an integer in 0..1048575, got 'x' (not an integer)");
  expect_error(
      [] {
        ld::ClusterResolver::from_environment(
            {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
      },
      "MPI rank 2 is out of range for world size 2");
  expect_error([] { ld::ClusterResolver::from_mpi_environment({}); }, "no MPI environment");
}

TEST(ClusterResolver, SlurmEnvironment) {
  auto r = ld::ClusterResolver::from_environment({{"SLURM_PROCID", "3"},
                                                  {"SLURM_NTASKS", "4"},
                                                  {"SLURM_STEP_NODELIST", "gpu[03-04],cpu1"},
                                                  {"SLURMD_NODENAME", "gpu04"},
                                                  {"LOCKSTEP_MASTER_PORT", "4000"}});
  EXPECT_EQ(r.kind(), Kind::kSlurm);
  EXPECT_EQ(r.task_index(), 3);
  EXPECT_EQ(r.num_workers(), 4);
  EXPECT_EQ(r.chief_address(), "gpu03:4000");
  EXPECT_EQ(r.own_host(), "gpu04");
  EXPECT_FALSE(r.launched_by_mpi());
  auto default_port = ld::ClusterResolver::from_environment(
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "n1"}});
  EXPECT_EQ(default_port.chief_address(), "n1:29500");
  expect_error(
      [] {
        ld::ClusterResolver::from_environment(
            {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "n1"}});
      },
      "SLURM_PROCID=5 is out of range for SLURM_NTASKS=2");
  expect_error(
      [] {
        ld::ClusterResolver::from_environment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
      },
      "SLURM_STEP_NODELIST");
  expect_error(
      [] {
        ld::ClusterResolver::from_environment({{"SLURM_PROCID", "0"},
                                               {"SLURM_NTASKS", "2"},
                                               {"SLURM_STEP_NODELIST", "n1"},
                                               {"MASTER_PORT", "70000"}});
      },
      "MASTER_PORT=70000 is not a TCP port");
}

TEST(ClusterResolver, SlurmNodeLists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ld::expand_slurm_nodelist("node[1-3],other"), (V{"node1", "node2", "node3", "other"}));
  EXPECT_EQ(ld::expand_slurm_nodelist("n[08-10,15]"), (V{"n08", "n09", "n10", "n15"}));
  EXPECT_EQ(ld::expand_slurm_nodelist("a,b[2-3]c"), (V{"a", "b2c", "b3c"}));
  EXPECT_EQ(ld::expand_slurm_nodelist("r[1-2]n[1-2]"), (V{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(ld::expand_slurm_nodelist("single"), (V{"single"}));
  expect_error([] { ld::expand_slurm_nodelist("node[1-3"); }, "unmatched '['");
  expect_error([] { ld::expand_slurm_nodelist("node[3-1]"); }, "descending range '3-1'");
  expect_error([] { ld::expand_slurm_nodelist("node[a-b]"); }, "bad range 'a-b'");
  expect_error([] { ld::expand_slurm_nodelist(""); }, "empty");
}

TEST(ClusterResolver, FromEnvironmentPicksTfConfigFirstThenMpiThenSlurmThenLocal) {
  const std::string tf =
      R"({"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":0}})";
  EXPECT_EQ(ld::ClusterResolver::from_environment(
                {{"TF_CONFIG", tf}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}})
                .kind(),
            Kind::kTfConfig);
  EXPECT_EQ(
      ld::ClusterResolver::from_environment(
          {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}})
          .kind(),
      Kind::kMpi);
  auto local = ld::ClusterResolver::from_environment(ld::Environment{{"HOME", "/root"}});
  EXPECT_EQ(local.kind(), Kind::kLocal);
  EXPECT_EQ(local.num_workers(), 1);
  EXPECT_TRUE(local.is_chief());
  EXPECT_NO_THROW(local.validate());
}

TEST(ClusterResolver, HostPortParsing) {
  EXPECT_EQ(ld::parse_host_port("h:1", "x").port, 1);
  EXPECT_EQ(ld::parse_host_port("[fe80::1]:80", "x").host, "fe80::1");
  EXPECT_EQ(ld::parse_host_port("[fe80::1]:80", "x").str(), "[fe80::1]:80");
  expect_error([] { ld::parse_host_port("fe80::1:80", "worker 3"); }, "worker 3: 'fe80::1:80'");
  expect_error([] { ld::parse_host_port(":80", "w"); }, "not host:port");
}
