#include "cli/local_cluster.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace gandiva::cli {
namespace {

namespace fs = std::filesystem;

class ClusterShapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gandiva-shape-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void WriteShape(const std::string& text) {
    std::ofstream(ClusterShapePath(dir_)) << text;
  }
  std::string dir_;
};

TEST_F(ClusterShapeTest, WhatIsWrittenIsReadBack) {
  auto none = ReadClusterShape(dir_);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());  // a new state directory
  ASSERT_TRUE(WriteClusterShape(dir_, {3, 1, true}).ok());
  auto read = ReadClusterShape(dir_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->agents, 3);
  EXPECT_EQ((*read)->gpus_per_agent, 1);
  EXPECT_TRUE((*read)->real_gpus);
  EXPECT_FALSE(fs::exists(ClusterShapePath(dir_) + ".tmp"));
}

// A shape that cannot be read is an error naming the file, the line and
// the setting, never a silent default.
TEST_F(ClusterShapeTest, ABadShapeNamesTheLineAndTheSetting) {
  const std::string path = ClusterShapePath(dir_);
  const struct {
    std::string text, error;
  } cases[] = {
      {"agents 2\ngpus-per-agent 0\n",
       path + " line 2: 'gpus-per-agent' must be a number from 1 to 64"},
      {"agents two\ngpus-per-agent 1\n",
       path + " line 1: 'agents' must be a number from 1 to 64"},
      {"agents 2 3\ngpus-per-agent 1\n",
       path + " line 1: 'agents' must be a number from 1 to 64"},
      {"# comment\nagents 2\nreal-gpus 2\ngpus-per-agent 1\n",
       path + " line 3: 'real-gpus' must be 0 or 1"},
      {"agents 2\ngpus 1\n", path + " line 2: unknown setting 'gpus'"},
      {"agents 2\n", path + ": 'gpus-per-agent' missing"},
  };
  for (const auto& c : cases) {
    WriteShape(c.text);
    auto read = ReadClusterShape(dir_);
    ASSERT_FALSE(read.ok()) << c.text;
    EXPECT_EQ(read.status().message(), c.error) << c.text;
  }
}

}  // namespace
}  // namespace gandiva::cli
