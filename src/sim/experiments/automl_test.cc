#include "sim/experiments/automl.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace gandiva::sim::experiments {
namespace {

// A stand-in for the simulator: jobs whose progress the test sets.
class FakeControl final : public SimControl {
 public:
  explicit FakeControl(size_t n, double total = 1000)
      : done_(n, 0), total_(n, total), ended_(n, false) {}
  core::Time now() const override { return now_; }
  size_t num_jobs() const override { return done_.size(); }
  double done(size_t j) const override { return done_[j]; }
  double total(size_t j) const override { return total_[j]; }
  bool arrived(size_t) const override { return true; }
  bool ended(size_t j) const override { return ended_[j]; }
  void Kill(size_t j, std::string) override {
    ASSERT_FALSE(ended_[j]) << "killed twice: " << j;
    ended_[j] = true;
    kills.push_back(j);
  }
  void SetPriority(size_t j, int p) override { priorities.emplace_back(j, p); }
  std::string WhyQueued(size_t) override { return ""; }
  // Every live job advances by `mb` mini-batches; a minute passes.
  void Advance(double mb) {
    now_ = now_ + core::Duration::Seconds(60);
    for (size_t j = 0; j < done_.size(); ++j) {
      if (ended_[j]) continue;
      done_[j] = std::min(total_[j], done_[j] + mb);
      if (done_[j] >= total_[j]) ended_[j] = true;  // finished
    }
  }

  core::Time now_ = core::Time::Zero();
  std::vector<double> done_, total_;
  std::vector<bool> ended_;
  std::vector<size_t> kills;
  std::vector<std::pair<size_t, int>> priorities;
};

AccuracyModelOptions SmallModel(int configs) {
  AccuracyModelOptions o;
  o.configs = configs;
  o.target = 2.0;  // unreachable: the search only halves
  return o;
}

TEST(AccuracyModel, DeterministicForASeed) {
  AccuracyModelOptions o;
  o.configs = 64;
  AccuracyModel a(o, 7), b(o, 7), c(o, 8);
  bool differs = false;
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(a.config(i).final_accuracy, b.config(i).final_accuracy);
    EXPECT_EQ(a.config(i).tau, b.config(i).tau);
    EXPECT_EQ(a.Measured(i, 3, 0.1), b.Measured(i, 3, 0.1));
    differs =
        differs || a.config(i).final_accuracy != c.config(i).final_accuracy;
  }
  EXPECT_TRUE(differs);
}

TEST(AccuracyModel, CurveRisesToFinalAndFewReachTarget) {
  AccuracyModelOptions o;
  o.configs = 128;
  AccuracyModel m(o, 1);
  EXPECT_GE(m.CountReaching(0.90), 1);
  EXPECT_LE(m.CountReaching(0.90), 20);
  for (int i = 0; i < m.size(); ++i) {
    EXPECT_DOUBLE_EQ(m.Accuracy(i, 0), 0);
    EXPECT_NEAR(m.Accuracy(i, 1), m.config(i).final_accuracy, 1e-12);
    EXPECT_LT(m.Accuracy(i, 0.1), m.Accuracy(i, 0.2));
    auto p = m.ShareToReach(i, 0.90);
    EXPECT_EQ(p.has_value(), m.config(i).final_accuracy >= 0.90);
    if (p) {
      EXPECT_NEAR(m.Accuracy(i, *p), 0.90, 1e-9);
    }
  }
}

TEST(SuccessiveHalvingDriver, KillsTheWorseHalfAtEachRung) {
  const int n = 16;
  AccuracyModel model(SmallModel(n), 3);
  SearchSpec spec;
  spec.name = "s";
  for (int i = 0; i < n; ++i) spec.jobs.push_back(static_cast<size_t>(i));
  spec.rung_minibatches = 100;
  spec.target = 2.0;
  SuccessiveHalvingDriver d(spec, &model);
  FakeControl c(n, 10000);
  std::vector<int> expect_alive = {16, 8, 4, 2, 1};
  for (int rung = 1; rung <= 4; ++rung) {
    c.Advance(100);  // everyone passes rung `rung`
    d.OnTick(c);
    ASSERT_EQ(d.rungs().size(), static_cast<size_t>(rung));
    const RungDecision& r = d.rungs().back();
    EXPECT_EQ(r.alive_before, expect_alive[rung - 1]);
    EXPECT_EQ(static_cast<int>(r.killed.size()), expect_alive[rung - 1] / 2);
    EXPECT_EQ(d.alive(), expect_alive[rung]);
    // The killed are exactly the worse half by their rung measurement.
    std::vector<std::pair<double, int>> scored;
    for (int i : r.killed) {
      scored.push_back({model.Measured(i, rung, rung * 100.0 / 10000), i});
    }
    for (int i : d.survivors()) {
      const double s = model.Measured(i, rung, rung * 100.0 / 10000);
      for (const auto& [k, _] : scored) EXPECT_GT(s, k);
    }
  }
  // The last survivor is never killed, however long the search goes on.
  for (int t = 0; t < 20; ++t) {
    c.Advance(100);
    d.OnTick(c);
  }
  EXPECT_EQ(d.alive(), 1);
  EXPECT_EQ(d.rungs().size(), 4u);
  EXPECT_EQ(c.kills.size(), static_cast<size_t>(n - 1));
  EXPECT_FALSE(d.found_at().has_value());
}

TEST(SuccessiveHalvingDriver, WaitsForEveryLiveConfigurationAndKeepsAtLeast) {
  const int n = 8;
  AccuracyModel model(SmallModel(n), 5);
  SearchSpec spec;
  for (int i = 0; i < n; ++i) spec.jobs.push_back(static_cast<size_t>(i));
  spec.rung_minibatches = 100;
  spec.target = 2.0;
  spec.keep_at_least = 3;
  SuccessiveHalvingDriver d(spec, &model);
  FakeControl c(n, 10000);
  c.done_[0] = 500;  // ahead
  d.OnTick(c);
  EXPECT_TRUE(d.rungs().empty());  // the others have not passed rung 1
  c.Advance(100);
  d.OnTick(c);
  ASSERT_EQ(d.rungs().size(), 1u);
  EXPECT_EQ(d.alive(), 4);
  c.Advance(100);
  d.OnTick(c);
  EXPECT_EQ(d.alive(), 3);  // ceil(4/2) = 2 < keep_at_least
  c.Advance(1000);
  d.OnTick(c);
  EXPECT_EQ(d.alive(), 3);
}

TEST(SuccessiveHalvingDriver, RecordsWhenTheTargetIsReachedAndStops) {
  AccuracyModelOptions o;
  o.configs = 8;
  o.final_lo = 0.95;  // everyone reaches 0.90 eventually
  o.final_hi = 0.99;
  AccuracyModel model(o, 11);
  SearchSpec spec;
  for (int i = 0; i < 8; ++i) spec.jobs.push_back(static_cast<size_t>(i));
  spec.rung_minibatches = 100;
  spec.target = 0.90;
  spec.keep_at_least = 8;  // no halving
  SuccessiveHalvingDriver d(spec, &model);
  FakeControl c(8, 1000);
  double first_share = 1;
  for (int i = 0; i < 8; ++i) {
    first_share = std::min(first_share, *model.ShareToReach(i, 0.90));
  }
  while (!d.found_at()) {
    c.Advance(50);
    d.OnTick(c);
    ASSERT_LT(c.now().seconds(), 3600);
  }
  // Interpolated between ticks: 50 mini-batches a minute.
  EXPECT_NEAR(d.found_at()->seconds(), first_share * 1000 / 50 * 60, 1e-3);
  EXPECT_EQ(*model.ShareToReach(d.found_config(), 0.90), first_share);
  EXPECT_EQ(c.kills.size(), 8u);  // the rest of the search is stopped
  EXPECT_TRUE(d.ended_at().has_value());
}

}  // namespace
}  // namespace gandiva::sim::experiments
