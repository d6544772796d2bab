// python3 -m gandiva.search on a local cluster: four learning rates of the
// CNN example, time-sliced on two GPUs, each reporting its loss; the worse
// half is stopped at the first rung and a winner is named.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

using std::chrono::seconds;

TEST(SearchE2eTest, SuccessiveHalvingStopsTheWorseHalfAndNamesAWinner) {
  if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  TestCluster c({.policy = "gandiva", .agents = 2, .gpus_per_agent = 1});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  const fs::path spec = c.dir() / "search.yaml";
  {
    std::ofstream f(spec);
    f << "name: lr\ncommand: " << GANDIVA_PYTHON << " " << GANDIVA_EXAMPLES_DIR
      << "/train_cnn.py --steps 200 --seed 3 --lr {lr} --log-every 10 "
      << "--min-step-ms 40\ngpus: 1\ntotal_minibatches: 200\nenv:\n"
      << "  PYTHONPATH: " << GANDIVA_PYTHON_DIR
      << "\n  GANDIVA_CLIENT_LIB: " << GANDIVA_CLIENT_LIB
      << "\n  OMP_NUM_THREADS: \"1\"\n";
  }
  const fs::path out = c.dir() / "search.out";
  const fs::path trials = c.dir() / "trials.json";
  auto p = Process::Start(
      {GANDIVA_PYTHON, "-m",           "gandiva.search",
       spec.string(),  "--param",      "lr=0.5,0.05,0.005,0.0005",
       "--rungs",      "20,60",        "--keep",
       "0.5",          "--mode",       "min",
       "--poll-s",     "0.5",          "--gandiva",
       GANDIVA_CLI,    "--scheduler",  c.address(),
       "--json",       trials.string()},
      out, {{"PYTHONPATH", GANDIVA_PYTHON_DIR}});
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Wait(seconds(300))) << Slurp(out) << c.Logs();
  ASSERT_TRUE(WIFEXITED(p->status()) && WEXITSTATUS(p->status()) == 0)
      << Slurp(out) << c.Logs();
  const std::string text = Slurp(out);
  EXPECT_NE(text.find("rung 20 mini-batches:"), std::string::npos) << text;
  EXPECT_NE(text.find("best: job "), std::string::npos) << text;
  // Four jobs (200 mini-batches of 40 ms or more, two GPUs: time-sliced);
  // two stopped at the first rung (killed), two trained on to the end with
  // a final metric, as the daemon says.
  // (The search ends with the last rung's metrics; the survivors' exits
  // follow.)
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const auto& [id, job] : c.Jobs()) {
          if (!IsEnded(job.state())) return false;
        }
        return true;
      },
      seconds(60)))
      << c.Logs();
  int killed = 0, finished = 0;
  for (const auto& [id, job] : c.Jobs()) {
    ASSERT_EQ(job.spec().name().rfind("search-", 0), 0u) << job.spec().name();
    EXPECT_GT(job.progress().metric_reports(), 0) << id;
    killed += job.state() == rpc::KILLED;
    finished += job.state() == rpc::FINISHED;
  }
  EXPECT_EQ(killed, 2) << text;
  EXPECT_EQ(finished, 2) << text;
  std::stringstream json(Slurp(trials));
  EXPECT_NE(json.str().find("\"stopped at rung 20\""), std::string::npos)
      << json.str();
}

}  // namespace
}  // namespace gandiva::e2e
