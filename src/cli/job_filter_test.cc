// `gandiva ls` filters: states by name and group, owners, name patterns.
#include "cli/job_filter.h"

#include <gtest/gtest.h>

namespace gandiva::cli {
namespace {

rpc::JobInfo Job(const std::string& name, const std::string& owner,
                 rpc::JobState state) {
  rpc::JobInfo j;
  j.mutable_spec()->set_name(name);
  j.mutable_spec()->set_owner(owner);
  j.set_state(state);
  return j;
}

TEST(JobFilterTest, StatesByNameAndGroup) {
  auto s = ParseStates("Running,queued");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(*s, (std::set<rpc::JobState>{rpc::QUEUED, rpc::RUNNING}));
  s = ParseStates("live");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->size(), 4u);
  EXPECT_FALSE(s->contains(rpc::FINISHED));
  s = ParseStates("ended,queued");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::set<rpc::JobState>{rpc::QUEUED, rpc::FINISHED,
                                         rpc::FAILED, rpc::KILLED}));
  s = ParseStates("running,done");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'done' is not a job state"),
            std::string::npos)
      << s.status().message();
  EXPECT_FALSE(ParseStates("").ok());
  EXPECT_FALSE(ParseStates(",").ok());
}

TEST(JobFilterTest, EveryConditionGivenMustHold) {
  const rpc::JobInfo a = Job("search-1", "alice", rpc::RUNNING);
  const rpc::JobInfo b = Job("search-12", "bob", rpc::FINISHED);
  const rpc::JobInfo c = Job("cnn", "alice", rpc::QUEUED);
  JobFilter f;
  EXPECT_TRUE(f.empty());
  EXPECT_TRUE(f.Matches(a) && f.Matches(b) && f.Matches(c));
  EXPECT_TRUE(f.MayHaveEnded());
  f.name = "search-*";
  EXPECT_TRUE(f.Matches(a));
  EXPECT_TRUE(f.Matches(b));
  EXPECT_FALSE(f.Matches(c));
  f.name = "search-?";  // the whole name matches
  EXPECT_TRUE(f.Matches(a));
  EXPECT_FALSE(f.Matches(b));
  f.name.clear();
  f.owner = "alice";
  EXPECT_TRUE(f.Matches(a));
  EXPECT_FALSE(f.Matches(b));
  f.states = {rpc::QUEUED};
  EXPECT_FALSE(f.Matches(a));
  EXPECT_TRUE(f.Matches(c));
  EXPECT_FALSE(f.MayHaveEnded());
  f.states.insert(rpc::KILLED);
  EXPECT_TRUE(f.MayHaveEnded());
}

}  // namespace
}  // namespace gandiva::cli
