// DeviceResidence's bookkeeping with two fake programs (a and b) whose "device" values are
// ints: which program uploads before a run, and when the newest values come to the host.
#include "lockstep/graph/device_residence.h"

#include <gtest/gtest.h>

using namespace lockstep;

TEST(DeviceResidence, TheNewestCopyComesToTheHostOnceAndStaleCopiesUploadAgain) {
  DeviceResidence r;
  auto w = std::make_shared<Variable>(Variable{"w", Tensor::zeros(Shape{1}), true});
  r.add({w});
  EXPECT_TRUE(r.holds(w.get()));
  int a = 0, b = 0, host = 0, device_a = 0;
  EXPECT_TRUE(r.before_run(&a));   // first run: upload
  EXPECT_FALSE(r.before_run(&a));  // current
  device_a = 7;                    // a's step updated it
  r.after_run(&a, [&] { host = device_a; });
  EXPECT_EQ(host, 0);             // nothing comes back by itself
  EXPECT_TRUE(r.before_run(&b));  // b's copy is stale: a's values come to the host first
  EXPECT_EQ(host, 7);
  EXPECT_EQ(r.downloads(), 1);
  EXPECT_FALSE(r.before_run(&a));  // a's device copy still equals the host's
  r.to_host();
  EXPECT_EQ(r.downloads(), 1);  // nothing newer anywhere
  r.host_changed();             // set_weights
  EXPECT_TRUE(r.before_run(&a));
  EXPECT_TRUE(r.before_run(&b));
  device_a = 9;
  r.after_run(&a, [&] { host = device_a; });
  r.forget(&a);  // a goes away: its values are kept
  EXPECT_EQ(host, 9);
  EXPECT_TRUE(r.before_run(&b));
  (void)b;
}
