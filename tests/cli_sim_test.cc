// End-to-end checks of `gandiva sim`: the binary as a user runs it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr together
};

CliRun Gandiva(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(GANDIVA_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string Slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class CliSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gandiva_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::string WithoutWall(const std::string& json) {
  const size_t at = json.find("\"wall_s\"");
  return at == std::string::npos ? json : json.substr(0, at);
}

TEST_F(CliSimTest, SameSeedGivesIdenticalJson) {
  const std::string args =
      "sim --policy gandiva --jobs 300 --gpus 64 --seed 11 --no-progress";
  CliRun a = Gandiva(args + " --json " + (dir_ / "a.json").string() +
                     " --per-job " + (dir_ / "a.csv").string());
  CliRun b = Gandiva(args + " --json " + (dir_ / "b.json").string() +
                     " --per-job " + (dir_ / "b.csv").string());
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  const std::string ja = Slurp(dir_ / "a.json");
  const std::string jb = Slurp(dir_ / "b.json");
  EXPECT_NE(ja.find("\"jobs_finished\": 300"), std::string::npos) << ja;
  for (const char* key : {"policy", "jobs", "jobs_finished", "mean_jct_s",
                          "median_jct_s", "p95_jct_s", "makespan_s",
                          "gpu_utilization", "mean_time_to_first_feedback_s",
                          "suspends", "resumes", "events", "wall_s"}) {
    EXPECT_NE(ja.find("\"" + std::string(key) + "\""), std::string::npos)
        << key;
  }
  EXPECT_EQ(WithoutWall(ja), WithoutWall(jb));
  EXPECT_EQ(Slurp(dir_ / "a.csv"), Slurp(dir_ / "b.csv"));
  // One CSV row per job plus the header.
  const std::string csv = Slurp(dir_ / "a.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 301);

  CliRun c = Gandiva(
      "sim --policy gandiva --jobs 300 --gpus 64 --seed 12 "
      "--no-progress --json " +
      (dir_ / "c.json").string());
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_NE(WithoutWall(Slurp(dir_ / "c.json")), WithoutWall(ja));
}

TEST_F(CliSimTest, ComparesPoliciesInOneRun) {
  CliRun r = Gandiva(
      "sim --policy fifo,gandiva --jobs 200 --gpus 32 "
      "--no-progress --json " +
      (dir_ / "out.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("fifo "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gandiva "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "out.fifo.json"));
  EXPECT_TRUE(fs::exists(dir_ / "out.gandiva.json"));
}

TEST_F(CliSimTest, BadInputIsRefusedWithTheField) {
  CliRun r = Gandiva("sim --gpus 7 --gpus-per-server 4 --no-progress");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--gpus"), std::string::npos) << r.out;

  r = Gandiva("sim --policy nosuch --jobs 10 --gpus 8 --no-progress");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("unknown policy 'nosuch'"), std::string::npos) << r.out;

  const fs::path trace = dir_ / "bad.csv";
  std::ofstream(trace) << "timestamp,duration,num_gpus,gpu_time,cluster\n"
                       << "2017-10-09 07:01:55,66.0,1,66.0,vc1\n"
                       << "2017-10-09 07:02:55,66.0,x,66.0,vc1\n";
  r = Gandiva("sim --trace " + trace.string() + " --format philly --gpus 8");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("bad.csv:3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("num_gpus"), std::string::npos) << r.out;
}

// A usage error exits 2, whatever it is, saying what is wrong; --help
// exits 0.
TEST_F(CliSimTest, UsageErrorsExit2) {
  CliRun r = Gandiva("sim --no-such-flag");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--no-such-flag"), std::string::npos) << r.out;
  r = Gandiva("sim --jobs many");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--jobs"), std::string::npos) << r.out;
  r = Gandiva("");
  EXPECT_EQ(r.status, 2) << r.out;
  r = Gandiva("no-such-command");
  EXPECT_EQ(r.status, 2) << r.out;
  r = Gandiva("sim --help");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--policy"), std::string::npos) << r.out;
}

// Queues from a file, a tree: jobs go to the leaves their VC names, and the
// fairness is measured over the leaves; a bad file is refused naming the
// file, the queue and the field.
// Jobs larger than the cluster are skipped, said and named, never
// silently.
TEST_F(CliSimTest, JobsThatCanNeverFitAreNamed) {
  std::ofstream(dir_ / "t.csv")
      << "timestamp,duration,num_gpus,gpu_time,cluster\n"
         "2017-10-09 07:01:55,66.0,1,66.0,vcA\n"
         "2017-10-09 07:02:55,66.0,64,4224.0,vcA\n";
  const CliRun r = Gandiva("sim --trace " + (dir_ / "t.csv").string() +
                           " --format philly --gpus 16 --policy fifo "
                           "--no-progress --json " +
                           (dir_ / "r.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("warning: 1 job asks for more GPUs than the "
                       "cluster's 16 and is skipped (jobs_skipped): "
                       "philly-L3 (64 GPUs)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(Slurp(dir_ / "r.json").find("\"jobs_skipped\": 1"),
            std::string::npos);
}

TEST_F(CliSimTest, QueuesComeFromATreeInAFile) {
  const fs::path file = dir_ / "queues.yaml";
  std::ofstream(file) << "queues:\n"
                         "  - name: org\n"
                         "    quota: 8\n"
                         "    queues:\n"
                         "      - {name: tenant-0, quota: 4, weight: 3}\n"
                         "      - {name: tenant-1, quota: 4}\n"
                         "  - {name: tenant-2, quota: 8, limit: 10}\n";
  const fs::path out = dir_ / "t.json";
  CliRun r = Gandiva(
      "sim --policy gandiva-fair --tenants 3 --jobs 60 --gpus 16 "
      "--no-progress --queues " +
      file.string() + " --json " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string json = Slurp(out);
  for (const char* leaf : {"\"tenant-0\"", "\"tenant-1\"", "\"tenant-2\""}) {
    EXPECT_NE(json.find(leaf), std::string::npos) << leaf;
  }
  EXPECT_EQ(json.find("\"org\""), std::string::npos) << "not a leaf";
  EXPECT_NE(json.find("\"jain_fairness\""), std::string::npos);

  std::ofstream(file) << "queues:\n"
                         "  - name: org\n"
                         "    quota: 2\n"
                         "    queues: [{name: a, quota: 4}]\n";
  r = Gandiva(
      "sim --policy gandiva-fair --jobs 10 --gpus 8 --no-progress "
      "--queues " +
      file.string());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--queues: " + file.string() +
                       ": queue 'org': field 'quota': 2 is under its "
                       "children's quotas, 4 together"),
            std::string::npos)
      << r.out;
}

// Queues from a trace's virtual clusters: the JSON carries every fairness
// field; a reclaim that kills loses training, gandiva-fair's does not. Bad
// values of the queue flags are refused by name.
TEST_F(CliSimTest, QueuesAreMeasuredForFairness) {
  const std::string data = GANDIVA_TEST_DATA_DIR;
  const fs::path out = dir_ / "q.json";
  CliRun r = Gandiva(
      "sim --policy drf-reclaim,gandiva-fair --queues vc --no-progress "
      "--gpus 32 --checkpoint-interval 600 --share-half-life 1800 --trace " +
      data +
      "/philly/philly_jobs_excl_6c71a0.csv --format philly "
      "--max-jobs 400 --json " +
      out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* policy : {"drf-reclaim", "gandiva-fair"}) {
    SCOPED_TRACE(policy);
    const std::string json =
        Slurp(dir_ / ("q." + std::string(policy) + ".json"));
    for (const char* field :
         {"\"jain_fairness\"", "\"share_windows_within_10pct\"",
          "\"mean_finish_time_fairness\"", "\"max_finish_time_fairness\"",
          "\"finish_time_fairness_above_1\"", "\"mean_reclaim_wait_s\"",
          "\"queues\"", "\"received_gpu_h\""}) {
      EXPECT_NE(json.find(field), std::string::npos) << field;
    }
    const size_t at = json.find("\"lost_gpu_hours\":");
    ASSERT_NE(at, std::string::npos);
    const double lost = std::strtod(json.c_str() + at + 17, nullptr);
    if (std::string(policy) == "drf-reclaim") {
      EXPECT_GT(lost, 0) << "a kill loses the training since a checkpoint";
    } else {
      EXPECT_EQ(lost, 0);
    }
  }

  const std::string base =
      "sim --policy gandiva-fair --jobs 10 --gpus 8 --no-progress ";
  r = Gandiva(base + "--queues teams");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--queues: teams: cannot be read"), std::string::npos)
      << r.out;
  r = Gandiva(base + "--checkpoint-interval -5");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--checkpoint-interval: must be 0"), std::string::npos)
      << r.out;
  r = Gandiva(base + "--share-half-life 0");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--share-half-life: must be positive"),
            std::string::npos)
      << r.out;
}

// A sweep over policies and seeds runs side by side and writes one JSON
// list, one CSV and one plot; each run's result is the one the same run
// gives alone.
TEST_F(CliSimTest, ASweepRunsSideBySideAndEachRunIsItsOwn) {
  CliRun r = Gandiva(
      "sim --policy fifo,gandiva --seed 1..2 --jobs 60 --gpus 16 "
      "--no-progress --jobs-parallel 2 --json " +
      (dir_ / "s.json").string() + " --csv " + (dir_ / "s.csv").string() +
      " --plot " + (dir_ / "s.svg").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("run 4/4 ended"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  seed "), std::string::npos) << r.out;
  const std::string list = Slurp(dir_ / "s.json");
  EXPECT_EQ(list.rfind("[", 0), 0u) << list;
  const std::string csv = Slurp(dir_ / "s.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5) << csv;
  EXPECT_NE(csv.find("\ngandiva,2,16,1,"), std::string::npos) << csv;
  EXPECT_NE(Slurp(dir_ / "s.svg").find("</svg>"), std::string::npos);
  // The fourth run (gandiva, seed 2) alone.
  r = Gandiva(
      "sim --policy gandiva --seed 2 --jobs 60 --gpus 16 "
      "--no-progress --json " +
      (dir_ / "alone.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string alone = Slurp(dir_ / "alone.json");
  const size_t fourth = list.rfind("\"result\": {");
  ASSERT_NE(fourth, std::string::npos);
  // The same keys and values, indented deeper in the list.
  std::string in_list = list.substr(fourth + 10);
  in_list = in_list.substr(0, in_list.find("\"wall_s\""));
  std::string own = WithoutWall(alone);
  auto squeeze = [](std::string s) {
    std::erase_if(s, [](char c) { return c == ' ' || c == '\n'; });
    return s;
  };
  EXPECT_EQ(squeeze(in_list), squeeze(own));

  r = Gandiva("sim --seed 3..1 --jobs 10 --gpus 8 --no-progress");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--seed: range '3..1' is empty"), std::string::npos)
      << r.out;
  r = Gandiva("sim --load 1,0 --jobs 10 --gpus 8 --no-progress");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--load: expected positive numbers"), std::string::npos)
      << r.out;
  r = Gandiva("sim --gpus 8,10 --jobs 10 --no-progress");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--gpus: must be a positive multiple"),
            std::string::npos)
      << r.out;
  r = Gandiva("sim --plot x.svg --plot-metric speed --jobs 10 --gpus 8");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--plot-metric: unknown metric 'speed'"),
            std::string::npos)
      << r.out;
}

TEST_F(CliSimTest, DrainsAndLosesServersAtSetTimes) {
  CliRun r = Gandiva(
      "sim --policy fifo,gandiva --jobs 200 --gpus 64 --no-progress "
      "--drain 0@3600 --server-down 1@7200,2@7200 --server-up 1@20000 "
      "--json " +
      (dir_ / "out.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* policy : {"fifo", "gandiva"}) {
    const std::string j =
        Slurp(dir_ / ("out." + std::string(policy) + ".json"));
    EXPECT_NE(j.find("\"jobs_finished\": 200"), std::string::npos) << j;
    EXPECT_NE(j.find("\"jobs_lost\": "), std::string::npos) << j;
    EXPECT_EQ(j.find("\"jobs_lost\": 0,"), std::string::npos) << j;
  }

  r = Gandiva("sim --jobs 10 --gpus 8 --no-progress --drain 2@10");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--drain: expected SERVER@SECONDS (a server 0..1 and "
                       "a time in seconds), got '2@10'"),
            std::string::npos)
      << r.out;
  for (const char* bad : {"1", "1@", "@5", "x@5", "1@-3", "1@soon"}) {
    r = Gandiva("sim --jobs 10 --gpus 8 --no-progress --server-down " +
                std::string(bad));
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.out.find("--server-down: expected SERVER@SECONDS"),
              std::string::npos)
        << r.out;
  }
}

TEST_F(CliSimTest, RestartsAgentsAtSetTimes) {
  CliRun r = Gandiva(
      "sim --policy fifo,gandiva,tiresias-las --jobs 100 --gpus 32 "
      "--no-progress --agent-crash 1@1800 --agent-restart 2@3600,3@3600 "
      "--json " +
      (dir_ / "out.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* policy : {"fifo", "gandiva", "tiresias-las"}) {
    const std::string j =
        Slurp(dir_ / ("out." + std::string(policy) + ".json"));
    EXPECT_NE(j.find("\"jobs_finished\": 100"), std::string::npos) << j;
    EXPECT_NE(j.find("\"processes_lost\": "), std::string::npos) << j;
    EXPECT_EQ(j.find("\"restarts\": 0,"), std::string::npos) << j;
    EXPECT_NE(j.find("\"jobs_lost\": 0,"), std::string::npos) << j;
  }
  // Without agent restarts the summary has no such fields.
  r = Gandiva("sim --jobs 10 --gpus 8 --no-progress --json " +
              (dir_ / "plain.json").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Slurp(dir_ / "plain.json").find("processes_lost"),
            std::string::npos);
  r = Gandiva("sim --jobs 10 --gpus 8 --no-progress --agent-crash 0@x");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--agent-crash: expected SERVER@SECONDS (a server 0..1 "
                       "and a time in seconds), got '0@x'"),
            std::string::npos)
      << r.out;
}

TEST_F(CliSimTest, ReplaysShippedTraces) {
  const std::string data = GANDIVA_TEST_DATA_DIR;
  CliRun r =
      Gandiva("sim --policy fifo,gandiva --no-progress --gpus 64 --trace " +
              data + "/tiresias/60_job.csv --format tiresias");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("60"), std::string::npos);
  r = Gandiva("sim --policy gandiva --no-progress --gpus 100 --trace " + data +
              "/philly/philly_jobs_excl_6c71a0.csv --format philly --vc "
              "11cb48 --max-jobs 500");
  ASSERT_EQ(r.status, 0) << r.out;
  r = Gandiva("sim --policy gandiva --no-progress --gpus 64 --trace " + data +
              "/gavel/seed0/6214e9.trace --format gavel --skip-unknown "
              "--max-jobs 300");
  ASSERT_EQ(r.status, 0) << r.out;
}

}  // namespace
