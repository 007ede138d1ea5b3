// Network::get_layer: finds a layer by name, and an unknown name throws an error that names the
// model and lists every layer name (as Keras's "No such layer ... Existing layers are: [...]").
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;

TEST(GetLayer, FindsALayerByName) {
  Model m = Sequential({Input({4}, "x"), Dense(3, {.name = "hidden"}), Dense(2, {.name = "head"})},
                       "clf");
  EXPECT_EQ(m.get_layer("hidden")->name(), "hidden");
  EXPECT_EQ(m.get_layer("head")->class_name(), "Dense");
}

TEST(GetLayer, AnUnknownNameListsTheLayerNames) {
  Model m = Sequential({Input({4}, "x"), Dense(3, {.name = "hidden"}), Dense(2, {.name = "head"})},
                       "clf");
  std::string e = test_util::error_of([&] { m.get_layer("hiden"); });
  EXPECT_NE(e.find("Model 'clf'"), std::string::npos) << e;
  EXPECT_NE(e.find("no layer named 'hiden'"), std::string::npos) << e;
  EXPECT_NE(e.find("its layers are 'x', 'hidden', 'head'"), std::string::npos) << e;
}
