// Job spec files: defaults, every rule, and messages that name the file and
// the field.
#include "cli/job_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

namespace gandiva::cli {
namespace {

namespace fs = std::filesystem;

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gandiva_spec_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "sub");
  }
  void TearDown() override { fs::remove_all(dir_); }

  core::StatusOr<rpc::JobSpec> Load(const std::string& text,
                                    const std::string& file = "job.yaml") {
    const fs::path p = dir_ / file;
    std::ofstream(p) << text;
    return LoadJobSpec(p.string());
  }
  // The error message of a refused spec ("" if it was accepted).
  std::string Error(const std::string& text) {
    auto r = Load(text);
    return r.ok() ? "" : r.status().message();
  }

  fs::path dir_;
};

TEST_F(JobSpecTest, Defaults) {
  ::setenv("USER", "alice", 1);
  auto spec = Load("command: python3 train.py\n", "cnn.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->name(), "cnn");
  EXPECT_EQ(spec->command(), "python3 train.py");
  EXPECT_EQ(spec->gpus(), 1);
  EXPECT_EQ(spec->priority(), 0);
  EXPECT_EQ(spec->owner(), "alice");
  EXPECT_EQ(spec->group(), "");
  EXPECT_EQ(spec->queue(), "");
  EXPECT_FALSE(spec->elastic());
  EXPECT_EQ(spec->workdir(), dir_.lexically_normal().string());
  EXPECT_TRUE(spec->env().empty());
  EXPECT_EQ(spec->total_minibatches(), 0);
  EXPECT_FALSE(spec->has_retries()) << "the daemon's default";
}

TEST_F(JobSpecTest, EveryField) {
  auto spec = Load(
      "name: lstm-1\ncommand: [python3, a b.py, --x]\ngpus: 4\npriority: -2\n"
      "owner: bob\nqueue: speech\ngroup: nlp\nelastic: yes\nworkdir: sub\n"
      "env: {OMP_NUM_THREADS: 1, EMPTY: }\ntotal_minibatches: 300\n"
      "retries: 3\ncheckpoint_every: 500\n");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->name(), "lstm-1");
  EXPECT_EQ(spec->command(), "python3 'a b.py' --x");
  EXPECT_EQ(spec->gpus(), 4);
  EXPECT_EQ(spec->priority(), -2);
  EXPECT_EQ(spec->owner(), "bob");
  EXPECT_EQ(spec->group(), "nlp");
  EXPECT_EQ(spec->queue(), "speech");
  EXPECT_TRUE(spec->elastic());
  EXPECT_EQ(spec->workdir(), (dir_ / "sub").lexically_normal().string());
  EXPECT_EQ(spec->env().at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(spec->env().at("EMPTY"), "");
  EXPECT_EQ(spec->total_minibatches(), 300);
  EXPECT_TRUE(spec->has_retries());
  EXPECT_EQ(spec->retries(), 3);
  EXPECT_EQ(spec->checkpoint_every_minibatches(), 500);
  EXPECT_EQ(spec->checkpoint_every_us(), 0);
}

TEST_F(JobSpecTest, CheckpointEveryTakesMinibatchesOrATime) {
  for (const auto& [text, minibatches, us] :
       std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"1", 1, 0},
           {"90s", 0, 90'000'000},
           {"10m", 0, 600'000'000},
           {"1.5h", 0, 5'400'000'000},
           {"0", 0, 0}}) {
    auto spec = Load("command: x\ncheckpoint_every: " + text + "\n");
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status().message();
    EXPECT_EQ(spec->checkpoint_every_minibatches(), minibatches) << text;
    EXPECT_EQ(spec->checkpoint_every_us(), us) << text;
  }
  EXPECT_EQ(Load("command: x\n")->checkpoint_every_minibatches(), 0);
  EXPECT_EQ(Load("command: x\n")->checkpoint_every_us(), 0);
}

TEST_F(JobSpecTest, AbsoluteWorkdir) {
  auto spec = Load("command: x\nworkdir: " + (dir_ / "sub").string() + "\n");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->workdir(), (dir_ / "sub").string());
}

TEST_F(JobSpecTest, UnknownFieldIsRefusedWithASuggestion) {
  const std::string e = Error("command: x\ngpu: 2\n");
  EXPECT_NE(e.find("job.yaml:2: unknown field 'gpu'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'gpus'"), std::string::npos) << e;
  EXPECT_NE(Error("command: x\nfoo: 1\n").find("unknown field 'foo'"),
            std::string::npos);
}

TEST_F(JobSpecTest, RefusalsNameTheField) {
  struct Case {
    const char* yaml;
    const char* expect;
  } cases[] = {
      {"gpus: 1\n", "field 'command' is required"},
      {"command: ''\n", "field 'command': must not be empty"},
      {"command: {a: 1}\n", "field 'command'"},
      {"command: x\ngpus: 3\n",
       "job.yaml:2: field 'gpus': must be a power of two"},
      {"command: x\ngpus: 0\n", "field 'gpus'"},
      {"command: x\ngpus: two\n",
       "field 'gpus': expected an integer, got 'two'"},
      {"command: x\npriority: 1.5\n", "field 'priority': expected an integer"},
      {"command: x\nelastic: maybe\n",
       "field 'elastic': expected true or false"},
      {"command: x\nworkdir: nowhere\n", "field 'workdir': no such directory"},
      {"command: x\nenv: [A]\n", "field 'env': expected a map"},
      {"command: x\nenv: {1A: x}\n",
       "field 'env': '1A' is not a variable name"},
      {"command: x\nenv: {A: [1]}\n", "field 'env': value of A"},
      {"command: x\ntotal_minibatches: -1\n", "field 'total_minibatches'"},
      {"command: x\nretries: 101\n", "job.yaml:2: field 'retries'"},
      {"command: x\nretries: -1\n", "field 'retries'"},
      {"command: x\nretries: lots\n",
       "field 'retries': expected an integer, got 'lots'"},
      {"command: x\ncheckpoint_every: 0.5s\n",
       "job.yaml:2: field 'checkpoint_every': must be a time from 1 s to 30 "
       "days (0: none), got 500000 us"},
      {"command: x\ncheckpoint_every: 31d\n",
       "field 'checkpoint_every': expected a count of mini-batches or a time "
       "(90s, 10m, 1.5h), got '31d'"},
      {"command: x\ncheckpoint_every: 800h\n",
       "field 'checkpoint_every': must be a time from 1 s to 30 days"},
      {"command: x\ncheckpoint_every: -5\n",
       "field 'checkpoint_every': must be 1 to 1000000000000 mini-batches"},
      {"command: x\ncheckpoint_every: often\n",
       "field 'checkpoint_every': expected a count of mini-batches or a time"},
      {"command: x\ncheckpoint_every: [1]\n",
       "field 'checkpoint_every': expected a count of mini-batches or a time, "
       "got a list"},
      {"command: x\nname: 'a b'\n", "field 'name'"},
      {"command: x\nowner: ''\n", "field 'owner'"},
      {"command: x\nqueue: [a]\n", "field 'queue'"},
      {"- a\n- b\n", "a job spec is a map"},
      {"command: [x\n", "not valid YAML"},
      {"command: 'x\n", "job.yaml:1: not valid YAML: the single quote"},
      {"command: \"a \\\" b\nname: y\n",
       "the double quote opened here is never closed"},
      {"command: 'it''s'\nname: 'a\n", "job.yaml:2: not valid YAML"},
      {"", "empty spec"},
      // Where no value may start (yaml-cpp 0.7 reads no end to it).
      {", a\n", "job.yaml:1: not valid YAML: unexpected character at column 1"},
      {"command: x\n---\n  ,\n", "job.yaml:3: not valid YAML"},
      // Duplicate keys, NUL bytes, bad UTF-8, and the checks the daemon
      // makes too (config::CheckJobSpec).
      {"command: x\ngpus: 1\ngpus: 2\n",
       "job.yaml:3: field 'gpus' is given twice (first on line 2)"},
      {"command: x\nowner: \xc3\x28\n", "job.yaml: is not valid UTF-8"},
      {"command: x\nqueue: \"a\\tb\"\n",
       "field 'queue': holds a control character"},
  };
  for (const Case& c : cases) {
    const std::string e = Error(c.yaml);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "spec:\n"
                                                   << c.yaml << "error: " << e;
    EXPECT_EQ(e.rfind((dir_ / "job.yaml").string(), 0), 0u)
        << "error does not start with the file: " << e;
  }
  const std::string nul = Error(std::string("command: x\nname: a\0b\n", 21));
  EXPECT_NE(nul.find("job.yaml:2: holds a NUL byte"), std::string::npos) << nul;
}

// A file of several YAML documents holds several jobs, in order; those
// without a name are named after the file and their place in it. An error
// names the line in the file, and refuses the file.
TEST_F(JobSpecTest, SeveralDocumentsAreSeveralJobs) {
  const fs::path p = dir_ / "sweep.yaml";
  std::ofstream(p) << "---\ncommand: a\n---\nname: second\ncommand: b\n"
                      "gpus: 2\n---\n---\ncommand: c\n";
  auto specs = LoadJobSpecs(p.string());
  ASSERT_TRUE(specs.ok()) << specs.status().message();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].name(), "sweep-1");
  EXPECT_EQ((*specs)[0].command(), "a");
  EXPECT_EQ((*specs)[1].name(), "second");
  EXPECT_EQ((*specs)[1].gpus(), 2);
  EXPECT_EQ((*specs)[2].name(), "sweep-3");
  EXPECT_EQ((*specs)[2].command(), "c");
  // LoadJobSpec wants exactly one.
  auto one = LoadJobSpec(p.string());
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("holds 3 job specs"), std::string::npos)
      << one.status().message();
  // The line of the error is the file's, not the document's.
  std::ofstream(p) << "command: a\n---\ncommand: b\ngpus: 3\n";
  auto bad = LoadJobSpecs(p.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sweep.yaml:4: field 'gpus'"),
            std::string::npos)
      << bad.status().message();
  std::ofstream(p) << "command: a\n---\ngpus: 1\n";
  bad = LoadJobSpecs(p.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sweep.yaml:3: field 'command' is "
                                        "required"),
            std::string::npos)
      << bad.status().message();
  std::ofstream(p) << "---\n---\n";
  bad = LoadJobSpecs(p.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("empty spec"), std::string::npos)
      << bad.status().message();
}

TEST_F(JobSpecTest, MissingFile) {
  auto r = LoadJobSpec((dir_ / "none.yaml").string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("none.yaml"), std::string::npos);
}

TEST(ShellQuoteTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(ShellQuote("--steps=3"), "--steps=3");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
}

}  // namespace
}  // namespace gandiva::cli
