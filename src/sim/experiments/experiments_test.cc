#include "sim/experiments/experiments.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gandiva::sim::experiments {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class ExperimentsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExperimentsTest, QuickRunWritesAReportWithItsTables) {
  const std::string out =
      (std::filesystem::temp_directory_path() /
       ("gandiva_experiments_test_" + std::to_string(::getpid())))
          .string();
  ExperimentOptions o;
  o.name = GetParam();
  o.out_dir = out;
  o.seed = 3;
  o.quick = true;
  o.data_dir = GANDIVA_TEST_DATA_DIR;
  auto r = RunExperiment(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string dir = out + "/" + o.name;
  const std::string report = Read(dir + "/report.md");
  EXPECT_EQ(report, r->report);
  EXPECT_NE(report.find("# Experiment `" + o.name + "`"), std::string::npos);
  EXPECT_NE(report.find("gandiva experiment " + o.name + " --out " + out +
                        " --seed 3 --quick"),
            std::string::npos);
  EXPECT_NE(report.find("Seed 3"), std::string::npos);
  EXPECT_NE(report.find("## Results"), std::string::npos);
  EXPECT_NE(report.find("| `fifo` |"), std::string::npos);
  EXPECT_NE(report.find("| `gandiva` |"), std::string::npos);
  EXPECT_NE(report.find("## Compared with the paper"), std::string::npos);
  // The terminal gets that section's figures, then where the report is.
  const size_t compared = report.find("## Compared with the paper\n\n");
  ASSERT_NE(compared, std::string::npos);
  const std::string first_line = report.substr(
      compared + 28, report.find('\n', compared + 28) - (compared + 28));
  EXPECT_FALSE(first_line.empty());
  EXPECT_EQ(r->summary.rfind(first_line, 0), 0u) << r->summary;
  EXPECT_NE(r->summary.find("\n\nwrote " + dir + "/report.md"),
            std::string::npos)
      << r->summary;
  EXPECT_EQ(r->summary.find("## "), std::string::npos) << r->summary;
  EXPECT_NE(report.find("![JCT CDF](jct_cdf.svg)"), std::string::npos);
  for (const char* f : {"fifo.json", "gandiva.json", "jct_cdf.svg",
                        "gpu_utilization.svg", "queue.svg"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }
  EXPECT_NE(Read(dir + "/jct_cdf.svg").find("data-name=\"fifo\""),
            std::string::npos);
  if (o.name == "automl") {
    EXPECT_NE(report.find("### Time to find a configuration"),
              std::string::npos);
    EXPECT_NE(report.find("| `fifo` | search-A |"), std::string::npos);
    EXPECT_NE(report.find("| `gandiva` | search-B |"), std::string::npos);
  }
  if (o.name == "trace-replay") {
    EXPECT_NE(report.find("## Migrations"), std::string::npos);
  }
  // Same options, same report.
  auto again = RunExperiment(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->report, report);
  std::filesystem::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(All, ExperimentsTest,
                         ::testing::Values("cluster-180", "trace-replay",
                                           "automl"));

TEST(Experiments, UnknownNameIsAnError) {
  ExperimentOptions o;
  o.name = "nope";
  auto r = RunExperiment(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cluster-180"), std::string::npos);
}

}  // namespace
}  // namespace gandiva::sim::experiments
