// `gandiva ls` filters: states by name and group, into a ListJobs request
// (the daemon matches them: DaemonTest.ListJobsFiltersAndPages).
#include "cli/job_filter.h"

#include <gtest/gtest.h>

namespace gandiva::cli {
namespace {

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

TEST(JobFilterTest, GoesIntoTheListJobsRequest) {
  JobFilter f;
  EXPECT_TRUE(f.empty());
  rpc::ListJobsRequest req;
  f.ToRequest(&req);
  EXPECT_EQ(req.states_size(), 0);
  EXPECT_EQ(req.owner(), "");
  EXPECT_EQ(req.name(), "");
  f.states = {rpc::QUEUED, rpc::KILLED};
  f.owner = "alice";
  f.name = "search-*";
  EXPECT_FALSE(f.empty());
  f.ToRequest(&req);
  EXPECT_EQ(std::set<int>(req.states().begin(), req.states().end()),
            (std::set<int>{rpc::QUEUED, rpc::KILLED}));
  EXPECT_EQ(req.owner(), "alice");
  EXPECT_EQ(req.name(), "search-*");
}

}  // namespace
}  // namespace gandiva::cli
