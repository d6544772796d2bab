#include "sim/workload/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "sim/workload/trace_reader.h"

namespace gandiva::sim {
namespace {

using core::Duration;
using core::Time;

const std::string kData = GANDIVA_TEST_DATA_DIR;

const Catalog& V100() {
  static const Catalog* c = [] {
    auto r = Catalog::Load(kData, GpuType::kV100);
    if (!r.ok()) {
      ADD_FAILURE() << r.status().ToString();
      std::abort();
    }
    return new Catalog(std::move(r).value());
  }();
  return *c;
}

bool SameJobs(const Workload& a, const Workload& b) {
  if (a.jobs.size() != b.jobs.size()) return false;
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    const TraceJob& x = a.jobs[i];
    const TraceJob& y = b.jobs[i];
    if (x.name != y.name || x.submit != y.submit || x.duration != y.duration ||
        x.gpus != y.gpus || x.model != y.model || x.group != y.group ||
        x.elastic != y.elastic || x.priority != y.priority) {
      return false;
    }
  }
  return true;
}

TEST(SyntheticTest, DefaultsMatchThePaperSetup) {
  const SyntheticOptions o;
  EXPECT_EQ(o.jobs, 1000);
  EXPECT_EQ(o.total_gpus, 180);
  EXPECT_EQ(EffectiveWindow(o), Duration::Seconds(7200));
  const Workload w = GenerateSynthetic(V100(), o);
  ASSERT_EQ(w.jobs.size(), 1000u);
  std::set<ModelId> models;
  std::map<std::string, std::set<std::pair<ModelId, int>>> groups;
  std::map<std::string, std::set<int64_t>> group_submits;
  size_t grouped = 0;
  size_t elastic = 0;
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const TraceJob& j = w.jobs[i];
    EXPECT_TRUE(j.gpus == 1 || j.gpus == 2 || j.gpus == 4 || j.gpus == 8);
    EXPECT_GE(j.submit, Time::Zero());
    EXPECT_LT(j.submit, Time::Zero() + Duration::Seconds(7200));
    if (i > 0) {
      EXPECT_LE(w.jobs[i - 1].submit, j.submit);
    }
    EXPECT_GE(j.duration, Duration::Seconds(60));
    EXPECT_LE(j.duration, Duration::Seconds(8 * 3600));
    EXPECT_EQ(j.priority, 0);
    if (j.gpus > 1) {
      EXPECT_TRUE(V100().model(j.model).multi_gpu);
    }
    models.insert(j.model);
    elastic += j.elastic;
    if (!j.group.empty()) {
      ++grouped;
      groups[j.group].insert({j.model, j.gpus});
      group_submits[j.group].insert(j.submit.micros());
    }
  }
  EXPECT_EQ(models.size(), 10u);
  EXPECT_NEAR(grouped / 1000.0, 0.2, 0.1);
  EXPECT_NEAR(elastic / 1000.0, 0.2, 0.05);
  EXPECT_GE(groups.size(), 5u);
  for (const auto& [g, shapes] : groups) {
    EXPECT_EQ(shapes.size(), 1u) << g;  // one model and GPU count per group
    EXPECT_EQ(group_submits[g].size(), 1u) << g;  // submitted together
  }
}

TEST(SyntheticTest, DefaultOversubscribesTheCluster) {
  const SyntheticOptions o;
  const Workload w = GenerateSynthetic(V100(), o);
  const double ratio = TotalGpuSeconds(w) / (180.0 * 7200.0);
  std::printf("default synthetic workload: %s\n", w.description.c_str());
  std::printf(
      "oversubscription ratio (GPU-s demanded / 180 GPUs x 2 h): %.2f\n",
      ratio);
  EXPECT_GT(ratio, 2.0);
  // The whole demand fits in well under a day of the full cluster.
  EXPECT_LT(TotalGpuSeconds(w) / 180.0, 20 * 3600.0);
  // Median run time near the Philly median it is fitted to.
  std::vector<int64_t> d;
  for (const TraceJob& j : w.jobs) d.push_back(j.duration.micros());
  std::nth_element(d.begin(), d.begin() + 500, d.end());
  EXPECT_GT(d[500] / 1e6, 1092.0 / 2);
  EXPECT_LT(d[500] / 1e6, 1092.0 * 2);
}

TEST(SyntheticTest, DeterministicForASeed) {
  SyntheticOptions o;
  const Workload a = GenerateSynthetic(V100(), o);
  const Workload b = GenerateSynthetic(V100(), o);
  EXPECT_TRUE(SameJobs(a, b));
  EXPECT_EQ(a.description, b.description);
  o.seed = 2;
  const Workload c = GenerateSynthetic(V100(), o);
  EXPECT_FALSE(SameJobs(a, c));
  size_t same_submit = 0;
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    same_submit += a.jobs[i].submit == c.jobs[i].submit;
  }
  EXPECT_LT(same_submit, 100u);
}

// Tenants: each arrival is of team k with weight 1/(k+1), a multi-job all
// of one team; the jobs are otherwise those drawn without tenants.
TEST(SyntheticTest, TenantsSplitTheJobsUnevenlyAndChangeNothingElse) {
  SyntheticOptions o;
  const Workload plain = GenerateSynthetic(V100(), o);
  o.tenants = 4;
  const Workload teams = GenerateSynthetic(V100(), o);
  EXPECT_TRUE(SameJobs(plain, teams));
  EXPECT_NE(teams.description.find("; 4 tenants"), std::string::npos);
  std::map<std::string, int> per;
  std::map<std::string, std::set<std::string>> group_teams;
  for (const TraceJob& j : teams.jobs) {
    ++per[j.vc];
    if (!j.group.empty()) group_teams[j.group].insert(j.vc);
  }
  ASSERT_EQ(per.size(), 4u);
  // Weights 1, 1/2, 1/3, 1/4 of 2.083: shares .48 .24 .16 .12, by arrival.
  EXPECT_GT(per["tenant-0"], per["tenant-1"]);
  EXPECT_GT(per["tenant-1"], per["tenant-3"]);
  EXPECT_GT(per["tenant-3"], 50);
  for (const auto& [group, vcs] : group_teams) {
    EXPECT_EQ(vcs.size(), 1u) << group;
  }
  for (const TraceJob& j : plain.jobs) EXPECT_TRUE(j.vc.empty());
  o.tenants = 1001;
  EXPECT_FALSE(ValidateSyntheticOptions(V100(), o).ok());
}

TEST(SyntheticTest, WindowScalesWithJobsAndGpus) {
  SyntheticOptions o;
  o.jobs = 500;
  EXPECT_EQ(EffectiveWindow(o), Duration::Seconds(3600));
  o.jobs = 1000;
  o.total_gpus = 360;
  EXPECT_EQ(EffectiveWindow(o), Duration::Seconds(3600));
  o.jobs = 2000;
  o.total_gpus = 90;
  EXPECT_EQ(EffectiveWindow(o), Duration::Seconds(4 * 7200));
  const Workload w = GenerateSynthetic(V100(), o);
  EXPECT_EQ(w.jobs.size(), 2000u);
  EXPECT_LT(w.jobs.back().submit, Time::Zero() + Duration::Seconds(4 * 7200));
  EXPECT_GT(w.jobs.back().submit, Time::Zero() + Duration::Seconds(3 * 7200));
  o.window = Duration::Seconds(600);
  EXPECT_EQ(EffectiveWindow(o), Duration::Seconds(600));
  for (const TraceJob& j : GenerateSynthetic(V100(), o).jobs) {
    EXPECT_LT(j.submit, Time::Zero() + Duration::Seconds(600));
  }
}

TEST(SyntheticTest, OptionsAreValidated) {
  SyntheticOptions o;
  EXPECT_TRUE(ValidateSyntheticOptions(V100(), o).ok());
  o.model_mix = {{"NoSuchNet", 1.0}};
  EXPECT_FALSE(ValidateSyntheticOptions(V100(), o).ok());
  o = SyntheticOptions();
  o.gpu_mix = {{3, 1.0}};
  EXPECT_FALSE(ValidateSyntheticOptions(V100(), o).ok());
  o = SyntheticOptions();
  o.multi_job_fraction = 0;
  o.elastic_fraction = 0;
  const Workload w = GenerateSynthetic(V100(), o);
  for (const TraceJob& j : w.jobs) {
    EXPECT_TRUE(j.group.empty());
    EXPECT_FALSE(j.elastic);
  }
}

// The lognormal's median is the shipped Philly trace's median run time.
TEST(SyntheticTest, DurationFitMatchesShippedPhilly) {
  auto p =
      ReadPhillyTrace(kData + "/philly/philly_jobs_excl_6c71a0.csv", V100());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<int64_t> d;
  for (const TraceJob& j : p->jobs) d.push_back(j.duration.micros());
  std::sort(d.begin(), d.end());
  EXPECT_NEAR(d[d.size() / 2] / 1e6, SyntheticOptions().duration_median_s, 1);
}

}  // namespace
}  // namespace gandiva::sim
