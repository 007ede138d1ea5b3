// Numbers in the cluster definition that do not fit: a TF_CONFIG task index, Slurm/MPI ranks
// and sizes, ports and node-list ranges beyond 32 (or 64) bits are errors naming the field,
// never silently wrapped to a valid-looking value.
#include <gtest/gtest.h>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster.h"

namespace ld = lockstep::distribute;

namespace {
// Expects fn() to throw lockstep::Error whose message contains every one of `texts`. Any other
// exception type fails the test.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> texts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << *texts.begin();
  } catch (const lockstep::Error& e) {
    for (const auto& text : texts)
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a lockstep::Error: " << e.what();
  }
}

std::string tf_config(const std::string& index) {
  return R"({"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":)" + index + "}}";
}
}  // namespace

TEST(ClusterNumbers, TfConfigIndexBeyond32BitsIsOutOfRangeNotWrapped) {
  // 4294967297 = 2^32 + 1 used to become worker 1.
  expect_error([] { ld::ClusterResolver::from_tf_config(tf_config("4294967297")); },
               {"task.index 4294967297", "out of range"});
  expect_error([] { ld::ClusterResolver::from_tf_config(tf_config("-4294967295")); },
               {"task.index -4294967295", "out of range"});
  expect_error([] { ld::ClusterResolver::from_tf_config(tf_config("18446744073709551615")); },
               {"task.index 18446744073709551615"});
  expect_error([] { ld::ClusterResolver::from_tf_config(tf_config("1.0")); }, {"task.index"});
  EXPECT_EQ(ld::ClusterResolver::from_tf_config(tf_config("1")).task_index(), 1);
  // The chief's index too.
  expect_error(
      [] {
        ld::ClusterResolver::from_tf_config(
            R"({"cluster":{"chief":["c:1"],"worker":["a:2"]},"task":{"type":"chief","index":4294967296}})");
      },
      {"task.index 4294967296"});
}

TEST(ClusterNumbers, SlurmAndMpiNumbersBeyond32BitsAreErrorsNamingTheVariable) {
  expect_error(
      [] {
        ld::ClusterResolver::from_environment(
            {{"SLURM_PROCID", "4294967297"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "n1"}});
      },
      {"SLURM_PROCID", "4294967297"});
  expect_error(
      [] {
        ld::ClusterResolver::from_environment(
            {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4294967298"}, {"SLURM_STEP_NODELIST", "n1"}});
      },
      {"SLURM_NTASKS", "4294967298"});
  expect_error(
      [] {
        ld::ClusterResolver::from_environment(
            {{"OMPI_COMM_WORLD_RANK", "4294967296"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
      },
      {"OMPI_COMM_WORLD_RANK", "4294967296"});
  expect_error(
      [] {
        ld::ClusterResolver::from_environment(
            {{"PMI_RANK", "0"}, {"PMI_SIZE", "99999999999999999999999"}});
      },
      {"PMI_SIZE", "99999999999999999999999"});
  // 4295000796 = 2^32 + 29500 used to become port 29500.
  expect_error(
      [] {
        ld::ClusterResolver::from_environment({{"SLURM_PROCID", "0"},
                                               {"SLURM_NTASKS", "2"},
                                               {"SLURM_STEP_NODELIST", "n1"},
                                               {"LOCKSTEP_MASTER_PORT", "4295000796"}});
      },
      {"LOCKSTEP_MASTER_PORT", "4295000796"});
  expect_error(
      [] {
        ld::ClusterResolver::from_environment({{"SLURM_PROCID", "0"},
                                               {"SLURM_NTASKS", "2"},
                                               {"SLURM_STEP_NODELIST", "n1"},
                                               {"MASTER_PORT", "29500 "}});
      },
      {"MASTER_PORT"});
}

TEST(ClusterNumbers, SlurmNodeListRangesBeyond64BitsAreErrors) {
  expect_error([] { ld::expand_slurm_nodelist("n[1-99999999999999999999]"); },
               {"99999999999999999999"});
  expect_error([] { ld::expand_slurm_nodelist("n[99999999999999999999]"); },
               {"99999999999999999999"});
}

// Found by cluster_env_fuzz's 600 s run: bracket groups multiply, and "u[0-102,...]" three times
// over expanded 10^6+ names (a 10 s timeout). The limit is checked while expanding.
TEST(ClusterNumbers, SlurmNodeListsWhoseRangesMultiplyPastTheLimitAreErrors) {
  expect_error([] { ld::expand_slurm_nodelist("a[0-999]b[0-999]c[0-999]"); },
               {"expands to more than 65536 nodes", "a[0-999]b[0-999]c[0-999]"});
  EXPECT_EQ(ld::expand_slurm_nodelist("a[0-255]b[0-255]").size(), 65536u);
}
