#include "sim/fairness.h"

#include <gtest/gtest.h>

#include <vector>

namespace gandiva::sim {
namespace {

void ExpectShares(const std::vector<double>& got,
                  const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-9) << "queue " << i;
  }
}

// Quotas first; the GPUs left are lent by quota, none getting more than it
// asks; queues of quota 0 share what is left after that equally.
TEST(FairnessTest, FairSharesAreQuotasThenLentByWeightMaxMin) {
  // a asks for all: it gets its 4 and the 4 b does not use.
  ExpectShares(FairnessMeter::FairShares({10, 2, 5}, {4, 4, 0}, 10), {8, 2, 0});
  // Both ask for more than there is: the 4 left go 2:1 by quota.
  ExpectShares(FairnessMeter::FairShares({10, 10}, {4, 2}, 10),
               {4 + 4.0 * 2 / 3, 2 + 4.0 / 3});
  // What the quotas' queues leave goes to the others, max-min.
  ExpectShares(FairnessMeter::FairShares({3, 3, 10, 1}, {2, 2, 0, 0}, 10),
               {3, 3, 3, 1});
  // No demand, no share.
  ExpectShares(FairnessMeter::FairShares({0, 6}, {3, 3}, 6), {0, 6});
  // Quotas over the cluster's size: each its part.
  ExpectShares(FairnessMeter::FairShares({4, 4}, {4, 4}, 4), {2, 2});
}

// Two queues of quota 2 on 4 GPUs, windows of an hour. Hour 0: both ask
// for 4, a receives 4 and b none (Jain's index 1/2; a within 10% of its
// share, b not). Hour 1: b alone asks and receives all 4 (one queue: not a
// shared window, but within its share).
TEST(FairnessTest, JainsIndexAndSharesWithinTenPercentPerWindow) {
  const int64_t hour = 3'600'000'000;
  FairnessMeter m({"a", "b"}, {2, 2}, 4, hour);
  m.AddDemand(0, 0, 4);
  m.AddDemand(1, 0, 4);
  m.AddReceived(0, 0, hour, 4);
  m.AddDemand(0, hour, -4);
  m.AddReceived(1, hour, 2 * hour, 4);
  const FairnessResult r = m.Finish(2 * hour);
  EXPECT_NEAR(r.jain_fairness, 0.5, 1e-12);
  EXPECT_EQ(r.windows_shared, 1);
  EXPECT_EQ(r.queue_windows, 3);
  EXPECT_NEAR(r.share_windows_within_10pct, 2.0 / 3, 1e-12);
  ASSERT_EQ(r.queues.size(), 2u);
  EXPECT_NEAR(r.queues[0].received_gpu_h, 4, 1e-9);
  EXPECT_NEAR(r.queues[0].fair_gpu_h, 2, 1e-9);
  EXPECT_NEAR(r.queues[1].received_gpu_h, 4, 1e-9);
  EXPECT_NEAR(r.queues[1].fair_gpu_h, 2 + 4, 1e-9);
  EXPECT_NEAR(r.queues[1].demand_gpu_h, 8, 1e-9);
}

// GPU time over a window's edge counts in both windows, in proportion;
// received at 90% of the share is within, below it is not.
TEST(FairnessTest, TimeAcrossAWindowsEdgeIsSplit) {
  const int64_t hour = 3'600'000'000;
  FairnessMeter m({"a", "b"}, {1, 1}, 2, hour);
  m.AddDemand(0, 0, 1);
  m.AddDemand(1, 0, 1);
  // a: 0.9 of its share in hour 0, all of it in hour 1; b: all, then 0.89.
  m.AddReceived(0, 0, hour * 9 / 10, 1);
  m.AddReceived(0, hour, 2 * hour, 1);
  m.AddReceived(1, 0, hour + hour * 89 / 100, 1);
  const FairnessResult r = m.Finish(2 * hour);
  EXPECT_EQ(r.windows_shared, 2);
  EXPECT_NEAR(r.share_windows_within_10pct, 3.0 / 4, 1e-12);
  EXPECT_NEAR(r.queues[1].received_gpu_h, 1.89, 1e-9);
  // Hour 0: x = (0.9, 1); hour 1: (1, 0.89).
  auto jain = [](double x, double y) {
    return (x + y) * (x + y) / (2 * (x * x + y * y));
  };
  EXPECT_NEAR(r.jain_fairness, (jain(0.9, 1) + jain(1, 0.89)) / 2, 1e-12);
}

}  // namespace
}  // namespace gandiva::sim
