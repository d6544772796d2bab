// Formatting of durations, progress and tables for the cluster commands.
#include "cli/format.h"

#include <gtest/gtest.h>

namespace gandiva::cli {
namespace {

TEST(FormatTest, Took) {
  EXPECT_EQ(FormatTook(850), "850us");
  EXPECT_EQ(FormatTook(3100), "3.10ms");
  EXPECT_EQ(FormatTook(31'000), "31.0ms");
  EXPECT_EQ(FormatTook(1'250'000), "1.25s");
  EXPECT_EQ(FormatTook(125'000'000), "2m05s");
}

TEST(FormatTest, Age) {
  EXPECT_EQ(FormatAge(7'400'000), "7s");
  EXPECT_EQ(FormatAge(184'000'000), "3m04s");
  EXPECT_EQ(FormatAge(int64_t{7500} * 1'000'000), "2h05m");
  EXPECT_EQ(FormatAge(int64_t{100'000} * 1'000'000), "1d03h");
  EXPECT_EQ(FormatAge(-5), "0s");
}

TEST(FormatTest, ProgressAndStates) {
  EXPECT_EQ(FormatProgress(12, 400), "12/400");
  EXPECT_EQ(FormatProgress(12, 0), "12");
  EXPECT_EQ(StateName(rpc::SUSPENDED), "suspended");
  EXPECT_TRUE(IsEnded(rpc::KILLED));
  EXPECT_FALSE(IsEnded(rpc::MIGRATING));
}

TEST(FormatTest, TableAlignsColumns) {
  EXPECT_EQ(FormatTable({{"ID", "NAME", "X"}, {"10", "a", ""}}),
            "ID  NAME  X\n10  a\n");
}

// Adds a part on `server` with `gpus` to `j`.
void AddPart(rpc::JobInfo& j, const std::string& server,
             std::initializer_list<int32_t> gpus) {
  rpc::JobPart* p = j.add_parts();
  p->set_server(server);
  for (int32_t g : gpus) p->add_gpus(g);
}

TEST(FormatTest, PlacementNamesEveryPartOfAJobThatSpansServers) {
  rpc::JobInfo j;
  EXPECT_EQ(Placement(j), "-");
  j.set_server("agent-1");
  j.add_gpus(0);
  j.add_gpus(1);
  EXPECT_EQ(Placement(j), "agent-1:0,1");
  AddPart(j, "agent-1", {0, 1});
  AddPart(j, "agent-2", {3});
  EXPECT_EQ(Placement(j), "agent-1:0,1+agent-2:3");
}

// A placed job counts the GPUs it holds (a resize changes them); any other
// the GPUs its spec asks for.
TEST(FormatTest, AJobsGpusAreThoseItHoldsWhilePlaced) {
  rpc::JobInfo j;
  j.mutable_spec()->set_gpus(1);
  j.set_state(rpc::QUEUED);
  EXPECT_EQ(GpusOf(j), 1);
  j.set_state(rpc::RUNNING);
  j.set_server("agent-1");
  j.add_gpus(0);
  j.add_gpus(1);  // grown to 2
  EXPECT_EQ(GpusOf(j), 2);
  j.set_state(rpc::SUSPENDED);
  EXPECT_EQ(GpusOf(j), 2);
  AddPart(j, "agent-1", {0, 1});
  AddPart(j, "agent-2", {3});
  EXPECT_EQ(GpusOf(j), 3);
  j.set_state(rpc::FINISHED);  // where it last ran: not held
  EXPECT_EQ(GpusOf(j), 1);
}

}  // namespace
}  // namespace gandiva::cli
