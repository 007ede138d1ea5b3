// LOCKSTEP_JOB_SECRET_FILE naming a FIFO (issue 25, item 6): opening it for reading waited for
// a writer forever, ignoring --timeout-ms. Now it is refused at once as not a regular file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "io/hostile_files_util.h"
#include "lockstep/distribute/store.h"
#include "test_util.h"

namespace ld = lockstep::distribute;

TEST(SecretFile, FifoIsRefusedWithoutWaiting) {
  const auto dir = lockstep::test_util::temp_dir("secret_fifo", /*fresh=*/true);
  const std::string fifo = (dir / "secret").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string e = lockstep::test_util::in_child(
      [&] {
        try {
          ld::job_token_from_environment("192.0.2.1", {{"LOCKSTEP_JOB_SECRET_FILE", fifo}});
        } catch (const std::exception& ex) {
          return std::string(ex.what());
        }
        return std::string("no error");
      },
      10);
  EXPECT_NE(e.find(fifo), std::string::npos) << e;
  EXPECT_NE(e.find("FIFO, not a regular file"), std::string::npos) << e;
}
