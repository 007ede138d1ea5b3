// Environment switches are read one way (config::env_flag): LOCKSTEP_STRICT_KERNELS=false must
// mean off (it meant on when each flag was parsed by hand), and a value that is no switch is an
// error naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>

#include "lockstep/core/config.h"
#include "lockstep/core/error.h"

namespace lockstep {

TEST(EnvFlag, ReadsTheUsualSpellingsAndTheFallback) {
  const char* name = "LOCKSTEP_TEST_FLAG_ONLY";
  unsetenv(name);
  EXPECT_FALSE(config::env_flag(name));
  EXPECT_TRUE(config::env_flag(name, true));
  for (const char* on : {"1", "true", "TRUE", "on", "yes"}) {
    setenv(name, on, 1);
    EXPECT_TRUE(config::env_flag(name)) << on;
  }
  for (const char* off : {"0", "false", "False", "off", "no"}) {
    setenv(name, off, 1);
    EXPECT_FALSE(config::env_flag(name, true)) << off;
  }
  setenv(name, "", 1);
  EXPECT_TRUE(config::env_flag(name, true));
  setenv(name, "maybe", 1);
  try {
    config::env_flag(name);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0/false/off/no"), std::string::npos) << e.what();
  }
  unsetenv(name);
}

}  // namespace lockstep
