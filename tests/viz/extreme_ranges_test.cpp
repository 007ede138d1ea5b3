// Charts of any finite values finish (issue 25, item 6): `lockstep report` on a CostReport with
// train_seconds 1e16 looped forever making ticks (adding a step of 0.5 to 1e16 changes nothing),
// and the history plot's y axis had the same loop. Each render runs in a child with a deadline.
#include <gtest/gtest.h>

#include <cfloat>

#include "io/hostile_files_util.h"
#include "lockstep/viz/chart.h"
#include "lockstep/viz/history_plot.h"
#include "test_util.h"

using namespace lockstep;

namespace {

const std::vector<std::vector<double>> kExtremes = {{1e16, 1e16 + 2},
                                                    {1e16},
                                                    {0, 1e308},
                                                    {-1e308, 1e308},
                                                    {-DBL_MAX, DBL_MAX},
                                                    {1e-300, 2e-300},
                                                    {1e300, 1e300},
                                                    {5e-324, 1e-323},
                                                    {1e15, 1e15 + 0.125, 1e15 + 0.25}};

}  // namespace

TEST(ExtremeRanges, CostReportPlotOfAnyFiniteRangeFinishes) {
  for (const auto& xs : kExtremes) {
    json report = {{"monitor", "val_accuracy"}, {"epochs", json::array()}};
    for (double x : xs) report["epochs"].push_back({{"train_seconds", x}, {"monitor_value", 0.5}});
    const std::string e = test_util::in_child([&] {
      return test_util::error_of([&] {
        Tensor img = viz::render_cost_report_plot({report});
        if (img.rank() != 3) throw Error("no image");
      });
    });
    EXPECT_EQ(e, "") << report.dump();
    // The same values on the y axis.
    json flipped = {{"epochs", json::array()}};
    for (size_t i = 0; i < xs.size(); ++i)
      flipped["epochs"].push_back({{"train_seconds", double(i)}, {"monitor_value", xs[i]}});
    EXPECT_EQ(test_util::in_child([&] {
                return test_util::error_of([&] { viz::render_cost_report_plot({flipped}); });
              }),
              "")
        << flipped.dump();
  }
}

TEST(ExtremeRanges, HistoryPlotOfAnyFiniteRangeFinishes) {
  for (const auto& ys : kExtremes) {
    const std::string e = test_util::in_child([&] {
      return test_util::error_of([&] { viz::render_history_plot({{"loss", ys}}); });
    });
    EXPECT_EQ(e, "") << ys.front();
  }
}
