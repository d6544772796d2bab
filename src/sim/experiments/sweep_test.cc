#include "sim/experiments/sweep.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/policies/registry.h"
#include "sim/workload/catalog.h"
#include "sim/workload/synthetic.h"

namespace gandiva::sim::experiments {
namespace {

TEST(SweepTest, ListsTakeNumbersAndRangesAndNameTheFlagInErrors) {
  EXPECT_EQ(*ParseSeedList("--seed", "3"), (std::vector<uint64_t>{3}));
  EXPECT_EQ(*ParseSeedList("--seed", "1..4"),
            (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(*ParseSeedList("--seed", "7,1..2,0"),
            (std::vector<uint64_t>{7, 1, 2, 0}));
  EXPECT_EQ(*ParsePositiveIntList("--gpus", "256,512,1024"),
            (std::vector<int>{256, 512, 1024}));
  EXPECT_EQ(*ParsePositiveNumberList("--load", "0.5,1,2"),
            (std::vector<double>{0.5, 1, 2}));
  auto bad = ParseSeedList("--seed", "1,x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--seed: expected seeds N or ranges A..B (comma-separated), got "
            "'x'");
  bad = ParseSeedList("--seed", "5..1");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--seed: range '5..1' is empty (its end is below its start)");
  EXPECT_FALSE(ParseSeedList("--seed", "").ok());
  EXPECT_FALSE(ParseSeedList("--seed", "1,").ok());
  EXPECT_FALSE(ParseSeedList("--seed", "-1").ok());
  bad = ParseSeedList("--seed", "1..1000000");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("more than 10000 values"),
            std::string::npos);
  auto gpus = ParsePositiveIntList("--gpus", "0,4");
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().message(),
            "--gpus: 0 is out of range (1 to 1,000,000,000)");
  gpus = ParsePositiveIntList("--gpus", "4.5");
  ASSERT_FALSE(gpus.ok());
  EXPECT_NE(gpus.status().message().find("positive whole numbers"),
            std::string::npos);
  for (const char* text : {"0", "-1", "x", "inf", "1,,2", ""}) {
    auto loads = ParsePositiveNumberList("--load", text);
    ASSERT_FALSE(loads.ok()) << text;
    EXPECT_EQ(loads.status().message().rfind("--load: expected positive", 0),
              0u)
        << loads.status().message();
  }
}

TEST(SweepTest, EveryRunIsDoneOnceWhateverTheThreads) {
  for (int parallel : {1, 2, 5, 64}) {
    std::vector<std::atomic<int>> done(37);
    RunParallel(done.size(), parallel, [&](size_t i) { ++done[i]; });
    for (size_t i = 0; i < done.size(); ++i) {
      EXPECT_EQ(done[i].load(), 1) << i << " with " << parallel;
    }
  }
  // Two runs on two threads: each waits until the other has begun, which
  // only a second thread makes possible (one thread alone would give up
  // after the wait and leave one id).
  std::set<std::thread::id> threads;
  std::mutex mu;
  std::condition_variable both;
  RunParallel(2, 2, [&](size_t) {
    std::unique_lock lock(mu);
    threads.insert(std::this_thread::get_id());
    both.notify_all();
    both.wait_for(lock, std::chrono::seconds(30),
                  [&] { return threads.size() == 2; });
  });
  EXPECT_EQ(threads.size(), 2u);
  RunParallel(0, 4, [](size_t) { FAIL(); });
}

TEST(SweepTest, AHigherLoadBringsTheSameJobsSooner) {
  Workload w;
  w.jobs.resize(3);
  w.jobs[1].submit = core::Time::FromMicros(1'000'000);
  w.jobs[2].submit = core::Time::FromMicros(3'000'001);
  ScaleArrivals(w, 2);
  EXPECT_EQ(w.jobs[0].submit.micros(), 0);
  EXPECT_EQ(w.jobs[1].submit.micros(), 500'000);
  EXPECT_EQ(w.jobs[2].submit.micros(), 1'500'001);  // rounded to nearest
  EXPECT_NE(w.description.find("2x the load"), std::string::npos);
  const Workload before = w;
  ScaleArrivals(w, 1);
  EXPECT_EQ(w.description, before.description);
}

// A sweep's runs side by side give the results the same runs give one
// after another: each is its inputs' alone.
class SweepRunsTest : public ::testing::Test {
 protected:
  std::vector<SweepRun> Sweep(int parallel) {
    auto catalog = Catalog::Load(DefaultDataDir(), GpuType::kV100);
    EXPECT_TRUE(catalog.ok()) << catalog.status().ToString();
    std::vector<SweepRun> runs;
    for (uint64_t seed : {1, 2}) {
      for (const char* policy : {"gandiva", "fifo"}) {
        SweepRun r;
        r.policy = policy;
        r.seed = seed;
        r.gpus = 16;
        runs.push_back(r);
      }
    }
    RunParallel(runs.size(), parallel, [&](size_t i) {
      SyntheticOptions o;
      o.jobs = 40;
      o.total_gpus = runs[i].gpus;
      o.seed = runs[i].seed;
      Workload w = GenerateSynthetic(*catalog, o);
      SimOptions so;
      so.servers = 4;
      so.seed = runs[i].seed;
      auto policy = core::MakePolicy(runs[i].policy, {});
      ASSERT_TRUE(policy.ok());
      auto result = Simulate(w, *catalog, std::move(*policy), so);
      ASSERT_TRUE(result.ok());
      runs[i].result = std::move(*result);
    });
    return runs;
  }
};

std::string WithoutWall(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json);
  for (auto& run : j) run["result"].erase("wall_s");
  return j.dump();
}

TEST_F(SweepRunsTest, SideBySideGivesWhatOneAfterAnotherGives) {
  const std::vector<SweepRun> alone = Sweep(1);
  const std::vector<SweepRun> together = Sweep(4);
  EXPECT_EQ(WithoutWall(SweepJson(alone)), WithoutWall(SweepJson(together)));
  const nlohmann::json j = nlohmann::json::parse(SweepJson(together));
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[1]["policy"], "fifo");
  EXPECT_EQ(j[2]["seed"], 2);
  EXPECT_EQ(j[0]["gpus"], 16);
  EXPECT_EQ(j[0]["load"], 1.0);
  EXPECT_EQ(j[3]["result"]["policy"], "fifo");
  EXPECT_GT(j[0]["result"]["jobs_finished"].get<int>(), 0);
  // The seeds differ: so do their results.
  EXPECT_NE(j[0]["result"]["mean_jct_s"], j[2]["result"]["mean_jct_s"]);
}

TEST_F(SweepRunsTest, CsvHasARowPerRunAndThePlotALinePerPolicy) {
  std::vector<SweepRun> runs = Sweep(2);
  const std::string csv = SweepCsv(runs);
  EXPECT_EQ(csv.rfind("policy,seed,gpus,load,jobs_finished,mean_jct_s,", 0),
            0u);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
  EXPECT_NE(csv.find("\nfifo,2,16,1,"), std::string::npos);
  // Against the seed here (neither GPUs nor load vary).
  auto svg = SweepSvg(runs, "mean_jct_s");
  ASSERT_TRUE(svg.ok());
  EXPECT_NE(svg->find("<svg"), std::string::npos);
  EXPECT_NE(svg->find("mean_jct_s against seed"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg->find("<polyline"); at != std::string::npos;
       at = svg->find("<polyline", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u);
  EXPECT_NE(svg->find("data-name=\"gandiva\""), std::string::npos);
  // Against the GPUs once they vary: a point per GPU count, the mean over
  // the seeds.
  runs[2].gpus = runs[3].gpus = 32;
  svg = SweepSvg(runs, "makespan_s");
  ASSERT_TRUE(svg.ok());
  EXPECT_NE(svg->find("against GPUs (mean over seeds)"), std::string::npos);
  // Two points in gandiva's line: 16 and 32 GPUs.
  const size_t line = svg->find("data-name=\"gandiva\"");
  ASSERT_NE(line, std::string::npos);
  const size_t from = svg->find("points=\"", line) + 8;
  const std::string pts = svg->substr(from, svg->find('"', from) - from);
  EXPECT_EQ(std::count(pts.begin(), pts.end(), ','), 2) << pts;
  auto bad = SweepSvg(runs, "speed");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown metric 'speed'"),
            std::string::npos);
  const std::string table = SweepTable(runs);
  EXPECT_NE(table.find("gpus"), std::string::npos);
  EXPECT_NE(table.find("seed"), std::string::npos);
  EXPECT_EQ(table.find("load"), std::string::npos);
}

}  // namespace
}  // namespace gandiva::sim::experiments
