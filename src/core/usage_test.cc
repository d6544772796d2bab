#include "core/usage.h"

#include <gtest/gtest.h>

namespace gandiva::core {
namespace {

Time At(double hours) {
  return Time::FromMicros(static_cast<int64_t>(hours * 3600e6));
}

Job Running(int id, int gpus, const std::string& queue,
            const std::string& user) {
  Job j;
  j.id = JobId(id);
  j.spec.vc = queue;
  j.spec.owner = user;
  j.state = JobState::kRunning;
  for (int g = 0; g < gpus; ++g) j.gpus.push_back(GpuId(g));
  return j;
}

TEST(UsageLedgerTest, ChargesRunningJobsTheirGpusByTheHour) {
  UsageLedger ledger;
  Job a = Running(1, 2, "vision", "alice");
  ledger.Note(a, At(0.5));
  // Asked for while it runs: charged to the present.
  EXPECT_DOUBLE_EQ((ledger.Used(At(0), At(1.5))[{"vision", "alice"}]),
                   2 * 3600.0);
  a.state = JobState::kSuspended;
  ledger.Note(a, At(2.25));  // 0.5 h, 1 h and 0.25 h of two GPUs
  EXPECT_EQ(ledger.running(), 0u);
  EXPECT_EQ(ledger.hours(), 3u);
  EXPECT_DOUBLE_EQ((ledger.Used(At(0), At(9))[{"vision", "alice"}]),
                   2 * 1.75 * 3600);
  // From within an hour: from its start.
  EXPECT_DOUBLE_EQ((ledger.Used(At(1.9), At(9))[{"vision", "alice"}]),
                   2 * 1.25 * 3600);
  EXPECT_TRUE(ledger.Used(At(3), At(9)).empty());

  // A change of size is charged at the size it had; another user's and
  // another queue's time is theirs.
  Job b = Running(2, 1, "vision", "bob");
  ledger.Note(b, At(3));
  b.gpus.push_back(GpuId(5));
  ledger.Note(b, At(3.5));
  Job c = Running(3, 4, "nlp", "bob");
  ledger.Note(c, At(3.5));
  const auto used = ledger.Used(At(3), At(4));
  EXPECT_DOUBLE_EQ((used.at({"vision", "bob"})), 0.5 * 3600 + 2 * 0.5 * 3600);
  EXPECT_DOUBLE_EQ((used.at({"nlp", "bob"})), 4 * 0.5 * 3600);
  EXPECT_EQ(used.size(), 2u);
  // Noted again as it was: nothing changes.
  ledger.Note(c, At(3.75));
  EXPECT_DOUBLE_EQ((ledger.Used(At(3), At(4)).at({"nlp", "bob"})),
                   4 * 0.5 * 3600);
  // Ended jobs are charged to their end, and no further.
  c.state = JobState::kFinished;
  ledger.Note(c, At(4));
  EXPECT_DOUBLE_EQ((ledger.Used(At(3), At(7)).at({"nlp", "bob"})),
                   4 * 0.5 * 3600);
}

TEST(UsageLedgerTest, KeepsTheHoursAskedForAndSurvivesASnapshot) {
  UsageLedger ledger(Duration::Seconds(24 * 3600));
  Job a = Running(1, 1, "", "alice");
  ledger.Note(a, At(0));
  a.state = JobState::kSuspended;
  ledger.Note(a, At(30));  // 30 hours: the first 6 are dropped
  EXPECT_EQ(ledger.first_hour(), At(6));
  EXPECT_DOUBLE_EQ((ledger.Used(At(0), At(31)).at({"", "alice"})), 24 * 3600.0);

  Job b = Running(2, 3, "q", "bob");
  ledger.Note(b, At(30.5));
  SnapshotWriter w;
  ledger.Save(w);
  UsageLedger back;
  SnapshotReader r(w.bytes());
  back.Load(r);
  ASSERT_TRUE(r.Finish("usage").ok());
  EXPECT_EQ(back.Used(At(0), At(31)), ledger.Used(At(0), At(31)));
  EXPECT_EQ(back.running(), 1u);

  // Cut short, it fails rather than making things up.
  const std::string cut = w.bytes().substr(0, w.bytes().size() - 3);
  SnapshotReader bad(cut);
  UsageLedger none;
  none.Load(bad);
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace gandiva::core
