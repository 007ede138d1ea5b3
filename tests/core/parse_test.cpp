// Checked numbers: parse_int / parse_double accept exactly a number in range and otherwise
// throw a lockstep::Error naming the flag, the text and why.
#include "lockstep/core/parse.h"

#include <gtest/gtest.h>

#include <climits>
#include <thread>

#include "lockstep/core/error.h"
#include "test_util.h"

using lockstep::parse_double;
using lockstep::parse_int;
using lockstep::test_util::error_of;

TEST(Parse, IntegersInRange) {
  EXPECT_EQ(parse_int("--n", "0", 0, 10), 0);
  EXPECT_EQ(parse_int("--n", "10", 0, 10), 10);
  EXPECT_EQ(parse_int("--n", "-7", -10, 10), -7);
  EXPECT_EQ(parse_int("--n", "+7", -10, 10), 7);
  EXPECT_EQ(parse_int("--n", "9223372036854775807", 0, INT64_MAX), INT64_MAX);
  EXPECT_EQ(parse_int("--n", "-9223372036854775808", INT64_MIN, 0), INT64_MIN);
}

TEST(Parse, IntegerErrorsNameTheFlagTheTextAndWhy) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c :
       {Case{"4294967297", "out of range"}, Case{"99999999999999999999", "out of range"},
        Case{"-1", "out of range"}, Case{"1e12", "not an integer"}, Case{"64x", "not an integer"},
        Case{"", "empty"}, Case{" 8", "not an integer"}, Case{"8 ", "not an integer"},
        Case{"0x10", "not an integer"}, Case{"+-3", "not an integer"},
        Case{"--3", "not an integer"}, Case{"2.0", "not an integer"},
        Case{"nan", "not an integer"}}) {
    const std::string msg = error_of([&] { parse_int("--batch-size", c.text, 0, INT32_MAX); });
    EXPECT_NE(msg.find("--batch-size"), std::string::npos) << c.text << ": " << msg;
    EXPECT_NE(msg.find(std::string("'") + c.text + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.why), std::string::npos) << c.text << ": " << msg;
    EXPECT_NE(msg.find("0..2147483647"), std::string::npos) << msg;
  }
}

TEST(Parse, DoublesAreFiniteAndInRange) {
  EXPECT_DOUBLE_EQ(parse_double("--split", "0.2", 0, 1), 0.2);
  EXPECT_DOUBLE_EQ(parse_double("--split", "1e-3", 0, 1), 1e-3);
  EXPECT_DOUBLE_EQ(parse_double("--x", "-2.5", -3, 3), -2.5);
  EXPECT_DOUBLE_EQ(parse_double("--x", "+2", -3, 3), 2);
  for (const char* text : {"nan", "NaN", "inf", "-inf", "infinity", "1e400", "0.5x", "", "1,5",
                           "0x1p3", " 1", "1.5.2", "2"}) {
    const std::string msg = error_of([&] { parse_double("--validation-split", text, 0, 1); });
    EXPECT_NE(msg.find("--validation-split"), std::string::npos) << text << ": " << msg;
  }
}

TEST(Parse, ThreadCountsAreCapped) {
  const int cap = lockstep::max_thread_count();
  EXPECT_GE(cap, 16);
  EXPECT_GE(cap, int(4 * std::thread::hardware_concurrency()));
  EXPECT_EQ(lockstep::parse_thread_count("--threads", "0"), 0);
  EXPECT_EQ(lockstep::parse_thread_count("--threads", std::to_string(cap)), cap);
  const std::string msg =
      error_of([&] { lockstep::parse_thread_count("--threads", std::to_string(cap + 1)); });
  EXPECT_NE(msg.find("--threads"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { lockstep::parse_thread_count("--threads", "10000"); }), "");
}
