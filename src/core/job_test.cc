#include "core/job.h"

#include <gtest/gtest.h>

namespace gandiva::core {
namespace {

TEST(JobSpecTest, GpusMustBeAPowerOfTwo) {
  JobSpec s;
  for (int g : {1, 2, 4, 8, 64}) {
    s.gpus = g;
    EXPECT_EQ(ValidateJobSpec(s), "") << g;
  }
  s.gpus = 3;
  EXPECT_EQ(ValidateJobSpec(s), "field 'gpus': must be a power of two, got 3");
  s.gpus = 0;
  EXPECT_EQ(ValidateJobSpec(s), "field 'gpus': must be at least 1, got 0");
  s.gpus = 1;
  s.total_minibatches = -1;
  EXPECT_NE(ValidateJobSpec(s).find("total_minibatches"), std::string::npos);
}

TEST(JobSpecTest, RetriesAreZeroToAHundred) {
  JobSpec s;
  for (int r : {0, 1, 100}) {
    s.retries = r;
    EXPECT_EQ(ValidateJobSpec(s), "") << r;
  }
  s.retries = 101;
  EXPECT_EQ(ValidateJobSpec(s), "field 'retries': must be 0 to 100, got 101");
  s.retries = -1;
  EXPECT_EQ(ValidateJobSpec(s), "field 'retries': must be 0 to 100, got -1");
}

TEST(JobStateTest, Transitions) {
  using S = JobState;
  EXPECT_TRUE(CanTransition(S::kQueued, S::kRunning));
  EXPECT_FALSE(CanTransition(S::kQueued, S::kSuspended));
  EXPECT_TRUE(CanTransition(S::kRunning, S::kSuspended));
  EXPECT_TRUE(CanTransition(S::kSuspended, S::kRunning));
  EXPECT_TRUE(CanTransition(S::kRunning, S::kMigrating));
  EXPECT_TRUE(CanTransition(S::kRunning, S::kFinished));
  EXPECT_TRUE(CanTransition(S::kQueued, S::kKilled));
  for (S end : {S::kFinished, S::kFailed, S::kKilled}) {
    EXPECT_TRUE(IsTerminal(end));
    EXPECT_FALSE(CanTransition(end, S::kRunning));
    EXPECT_FALSE(CanTransition(end, S::kKilled));
  }
  EXPECT_EQ(JobStateName(S::kSuspended), "suspended");
}

}  // namespace
}  // namespace gandiva::core
