// DrainRequest: the core cordons the server and decides, job by job, what
// leaves it and where it goes (Scheduler::last_drain says what it decided).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/policies/fifo.h"
#include "core/policies/gandiva.h"
#include "core/scheduler.h"
#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::CountKind;
using testing::Harness;
using Kind = DrainOutcome::Kind;

int ServerOf(const Harness& h, JobId job) {
  return h.state().cluster().gpu(h.job(job).gpus[0]).server.value;
}

bool HoldsNothing(const Harness& h, int server) {
  const Cluster& c = h.state().cluster();
  for (GpuId g : c.GpusOf(ServerId(server))) {
    if (!c.gpu(g).jobs.empty()) return false;
  }
  return true;
}

// Three servers of 4 GPUs; FIFO's best fit fills server 0 with a (2 GPUs),
// b and c (1 each), and puts d (2 GPUs) on server 1: idle GPUs 0, 2, 4.
struct Filled {
  Harness h{std::make_unique<FifoPolicy>(), 3};
  JobId a, b, c, d;
  Filled() {
    a = h.Submit(2);
    b = h.Submit(1);
    c = h.Submit(1);
    d = h.Submit(2);
    h.CompleteAll();
  }
};

TEST(DrainTest, ADrainMigratesEachJobToTheOpenServerWithTheMostIdleGpus) {
  Filled f;
  Harness& h = f.h;
  ASSERT_EQ(ServerOf(h, f.a), 0);
  ASSERT_EQ(ServerOf(h, f.b), 0);
  ASSERT_EQ(ServerOf(h, f.c), 0);
  ASSERT_EQ(ServerOf(h, f.d), 1);

  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(0)}).ok());
  EXPECT_TRUE(h.state().cluster().server(ServerId(0)).cordoned);
  // a goes to server 2 (4 idle, then 2); b to server 1 (2 idle, a tie with
  // server 2 that the lower id wins, then 1); c to server 2 (2 idle).
  const std::vector<DrainOutcome>& out = h.scheduler().last_drain();
  ASSERT_EQ(out.size(), 3u);
  const std::vector<std::pair<JobId, int>> want = {
      {f.a, 2}, {f.b, 1}, {f.c, 2}};
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("job " + std::to_string(want[i].first.value));
    EXPECT_EQ(out[i].job, want[i].first);
    EXPECT_EQ(out[i].kind, Kind::kMoving);
    EXPECT_EQ(out[i].to, ServerId(want[i].second));
    EXPECT_EQ(out[i].reason, "");
    EXPECT_EQ(h.job(want[i].first).state, JobState::kMigrating);
    EXPECT_EQ(ServerOf(h, want[i].first), want[i].second);
  }
  EXPECT_EQ(CountKind(h.last(), ActionKind::kMigrate), 3);
  h.CompleteAll();
  EXPECT_TRUE(HoldsNothing(h, 0));
  for (JobId j : {f.a, f.b, f.c}) {
    EXPECT_EQ(h.job(j).state, JobState::kRunning);
  }
  // The outcome is of the last event only.
  h.Tick();
  EXPECT_TRUE(h.scheduler().last_drain().empty());
}

TEST(DrainTest, ACordonOnlyDrainMovesNothingAndNewJobsGoElsewhere) {
  Filled f;
  Harness& h = f.h;
  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(1), /*cordon_only=*/true}).ok());
  EXPECT_TRUE(h.last().empty());
  EXPECT_TRUE(h.scheduler().last_drain().empty());
  EXPECT_TRUE(h.state().cluster().server(ServerId(1)).cordoned);
  EXPECT_EQ(h.job(f.d).state, JobState::kRunning);
  EXPECT_EQ(ServerOf(h, f.d), 1);
  // Best fit would have put a 2-GPU job beside d.
  const JobId e = h.Submit(2);
  h.CompleteAll();
  EXPECT_EQ(ServerOf(h, e), 2);
  // Opening it again is a CordonRequest.
  ASSERT_TRUE(h.TrySend(CordonRequest{ServerId(1), false}).ok());
  EXPECT_FALSE(h.state().cluster().server(ServerId(1)).cordoned);
}

// Of a packed pair on the drained server, the first is unpacked (one
// Unpack: a packed job cannot move) and its partner, which runs on alone,
// stays; the next drain moves them.
TEST(DrainTest, ADrainUnpacksAPackedPairAndAnotherDrainMovesIt) {
  Harness h(std::make_unique<FifoPolicy>(), 2, ServerSpec{"", 1, 1, 1});
  const JobId a = h.Submit(1);
  const JobId x = h.Submit(1);
  const JobId b = h.Submit(1);  // queued: no room
  h.CompleteAll();
  ASSERT_EQ(ServerOf(h, a), 0);
  ASSERT_TRUE(h.TrySend(MechanismRequest{MechanismRequest::Kind::kPack, b,
                                         ServerId(), a, 0})
                  .ok());
  h.CompleteAll();
  ASSERT_EQ(h.job(a).packed_with, b);
  h.Send(KillRequest{x, "make room"});

  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(0)}).ok());
  ASSERT_EQ(h.last().size(), 1u);
  EXPECT_EQ(h.last()[0].kind, ActionKind::kUnpack);
  EXPECT_EQ(h.last()[0].job, a);
  const std::vector<DrainOutcome>& out = h.scheduler().last_drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].job, a);
  EXPECT_EQ(out[0].kind, Kind::kUnpacking);
  EXPECT_FALSE(out[0].to.valid());
  EXPECT_EQ(out[0].reason,
            "packed with job 2: unpacking it; drain again to "
            "move them");
  EXPECT_EQ(out[1].job, b);
  EXPECT_EQ(out[1].kind, Kind::kStays);
  EXPECT_EQ(out[1].reason,
            "packed with job 0, which this drain unpacks: "
            "drain again to move it");

  h.CompleteAll();
  ASSERT_EQ(h.job(a).state, JobState::kSuspended);
  ASSERT_EQ(h.job(b).state, JobState::kRunning);
  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(0)}).ok());
  const std::vector<DrainOutcome>& again = h.scheduler().last_drain();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].kind, Kind::kMoving);
  EXPECT_EQ(again[0].to, ServerId(1));
  // Server 1's one GPU is a's now.
  EXPECT_EQ(again[1].kind, Kind::kStays);
  EXPECT_NE(again[1].reason.find("no room"), std::string::npos)
      << again[1].reason;
}

TEST(DrainTest, WithNoOtherServerUpAndOpenEveryJobStays) {
  Harness h(std::make_unique<FifoPolicy>(), 3);
  const JobId a = h.Submit(4);
  h.CompleteAll();
  ASSERT_EQ(ServerOf(h, a), 0);
  h.Send(ServerDown{ServerId(1)});
  h.Send(CordonRequest{ServerId(2), true});
  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(0)}).ok());
  EXPECT_TRUE(h.last().empty());
  const std::vector<DrainOutcome>& out = h.scheduler().last_drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job, a);
  EXPECT_EQ(out[0].kind, Kind::kStays);
  EXPECT_EQ(out[0].reason, "no other server is up and open");
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
}

// Where every open server refuses a job, the first one's refusal (that of
// the server with the most idle GPUs) is the reason.
TEST(DrainTest, AJobNoServerTakesStaysWithTheFirstRefusalAsTheReason) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  h.Send(ServerUp{ServerSpec{"small", 2, 1, 1}, ServerId()});  // server 2
  const JobId big = h.Submit(4);
  const JobId p = h.Submit(1);
  const JobId q = h.Submit(1);
  const JobId r = h.Submit(1);
  h.CompleteAll();
  // Best fit: big on s0, p and q on small, r on s1.
  ASSERT_EQ(ServerOf(h, big), 0);
  ASSERT_EQ(ServerOf(h, p), 2);
  ASSERT_EQ(ServerOf(h, q), 2);
  ASSERT_EQ(ServerOf(h, r), 1);
  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(0)}).ok());
  EXPECT_TRUE(h.last().empty());
  ASSERT_EQ(h.scheduler().last_drain().size(), 1u);
  const DrainOutcome& o = h.scheduler().last_drain()[0];
  EXPECT_EQ(o.job, big);
  EXPECT_EQ(o.kind, Kind::kStays);
  // s1 (3 idle) refuses first; small (none idle) would say it is too small.
  EXPECT_EQ(o.reason,
            "cannot migrate job 0: no room: server s1 has 3 GPUs that no "
            "running job holds, and it needs 4");
  EXPECT_EQ(h.job(big).state, JobState::kRunning);
}

TEST(DrainTest, AJobWithAMechanismUnderWayStays) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  const JobId a = h.Submit(1);  // its start is not reported done
  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(ServerOf(h, a))}).ok());
  ASSERT_EQ(h.scheduler().last_drain().size(), 1u);
  const DrainOutcome& o = h.scheduler().last_drain()[0];
  EXPECT_EQ(o.kind, Kind::kStays);
  EXPECT_EQ(o.reason,
            "cannot migrate job 0: a start is under way; try again when it "
            "is done");
}

TEST(DrainTest, ADrainOfAServerTheClusterDoesNotHaveIsRefusedNamingTheField) {
  Filled f;
  Harness& h = f.h;
  Status st = h.TrySend(DrainRequest{ServerId(7)});
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "field 'server': no server 7 (the cluster has 3)");
  st = h.TrySend(DrainRequest{ServerId()});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "field 'server': no server id given (got -1)");
  EXPECT_TRUE(h.last().empty());
  EXPECT_TRUE(h.scheduler().last_drain().empty());
  for (const Server& s : h.state().cluster().servers()) {
    EXPECT_FALSE(s.cordoned) << s.spec.name;
  }
  // A refused drain leaves no outcome behind, not even the last one's.
  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(1)}).ok());
  ASSERT_EQ(h.scheduler().last_drain().size(), 1u);
  EXPECT_FALSE(h.TrySend(DrainRequest{ServerId(3)}).ok());
  EXPECT_TRUE(h.scheduler().last_drain().empty());
}

// What the daemon did before the core drained: a CordonRequest, then one
// operator's request per job (an unpack, or a migrate tried on each open
// server, most idle GPUs first). The drain takes the same actions, where
// the policy takes none in between (ADrainMovesTheWaitingJobs... below).
std::vector<Action> DrainByRequests(Harness& h, ServerId sid) {
  std::vector<Action> all = h.Send(CordonRequest{sid, true});
  const Cluster& c = h.state().cluster();
  std::set<int32_t> placed;
  for (GpuId g : c.GpusOf(sid)) {
    for (JobId j : c.gpu(g).jobs) placed.insert(j.value);
  }
  std::set<int32_t> unpacking;
  auto feed = [&](const MechanismRequest& m) {
    if (!h.scheduler().Check(m).ok()) return false;
    const std::vector<Action> got = h.Send(m);
    all.insert(all.end(), got.begin(), got.end());
    return true;
  };
  for (int32_t id : placed) {
    if (const JobId peer = h.job(JobId(id)).packed_with; peer.valid()) {
      if (unpacking.count(peer.value)) continue;
      if (feed({MechanismRequest::Kind::kUnpack, JobId(id), ServerId(), JobId(),
                0})) {
        unpacking.insert(id);
      }
      continue;
    }
    std::vector<std::pair<int, int32_t>> targets;
    for (const Server& s : c.servers()) {
      if (s.id == sid || !s.up || s.cordoned) continue;
      int idle = 0;
      for (GpuId g : c.GpusOf(s.id)) idle += c.gpu(g).active == 0;
      targets.emplace_back(-idle, s.id.value);
    }
    std::sort(targets.begin(), targets.end());
    for (const auto& t : targets) {
      if (feed({MechanismRequest::Kind::kMigrate, JobId(id), ServerId(t.second),
                JobId(), 0})) {
        break;
      }
    }
  }
  return all;
}

// Gandiva on 2 servers of 4 GPUs with 11 jobs of 1 GPU, time-sliced for
// `ticks` ticks (after an odd number, jobs 0 and 1 wait on GPUs 0 and 1,
// where jobs 8 and 10 run; after an even number, the other way round);
// with `pack`, job 0 is then packed with job 8 by hand. Two empty servers
// join (the policy moves nothing there itself) and server 0 is drained, by
// a DrainRequest or by requests one by one: the actions it takes.
std::vector<std::string> DrainActions(int ticks, bool pack, bool by_requests) {
  GandivaOptions o;
  o.migrate_to_idle = false;
  o.packing = false;
  Harness h(std::make_unique<GandivaPolicy>(o), 2, ServerSpec{"", 4, 1, 1});
  for (int i = 0; i < 11; ++i) h.Submit(1);
  h.CompleteAll();
  for (int i = 0; i < ticks; ++i) {
    h.Advance(Duration::Seconds(60));
    h.Tick();
    h.CompleteAll();
  }
  if (pack) {
    EXPECT_TRUE(h.TrySend(MechanismRequest{MechanismRequest::Kind::kPack,
                                           JobId(0), ServerId(), JobId(8), 0})
                    .ok());
    h.CompleteAll();
  }
  h.Send(ServerUp{ServerSpec{"s2", 4, 1, 1}, ServerId()});
  h.Send(ServerUp{ServerSpec{"s3", 4, 1, 1}, ServerId()});
  h.CompleteAll();
  const std::vector<Action> got = by_requests
                                      ? DrainByRequests(h, ServerId(0))
                                      : h.Send(DrainRequest{ServerId(0)});
  std::vector<std::string> out;
  for (const Action& a : got) {
    std::string s = std::string(ActionKindName(a.kind)) + " job " +
                    std::to_string(a.job.value);
    for (GpuId g : a.gpus) s += " " + std::to_string(g.value);
    out.push_back(s);
  }
  return out;
}

TEST(DrainTest, ADrainTakesTheActionsOfTheOperatorsRequestsOneByOne) {
  // Server 0 holds jobs 0 (packed with 8) and 1 waiting, 2, 3 and 10
  // running: 0 is unpacked, 8 stays, the others move to servers 2 and 3
  // (GPUs 8-15), the one with the most idle GPUs first.
  const std::vector<std::string> want = {"unpack job 0", "migrate job 1 8",
                                         "migrate job 2 12", "migrate job 3 9",
                                         "migrate job 10 13"};
  EXPECT_EQ(DrainActions(1, /*pack=*/true, /*by_requests=*/true), want);
  EXPECT_EQ(DrainActions(1, /*pack=*/true, /*by_requests=*/false), want);
}

// Requests one by one let the policy decide in between: a job moved off a
// GPU frees it, and the job waiting there resumes on the server being
// drained, then cannot move (its resume is under way). The drain decides
// for every job before the policy does: the server empties in one go.
TEST(DrainTest, ADrainMovesTheWaitingJobsThatRequestsOneByOneLeaveBehind) {
  const std::vector<std::string> by_requests =
      DrainActions(2, /*pack=*/false, /*by_requests=*/true);
  EXPECT_EQ(by_requests,
            (std::vector<std::string>{"migrate job 0 8", "resume job 8 0",
                                      "migrate job 1 12", "resume job 10 1",
                                      "migrate job 2 9", "migrate job 3 13"}));
  EXPECT_EQ(DrainActions(2, /*pack=*/false, /*by_requests=*/false),
            (std::vector<std::string>{
                "migrate job 0 8", "migrate job 1 12", "migrate job 2 9",
                "migrate job 3 13", "migrate job 8 10", "migrate job 10 14"}));
}

// A job only an image of its process carries stays on a server that
// cannot save one, with the reason; the others leave.
TEST(DrainTest, AJobThatCannotBeCarriedOffStaysWithTheReason) {
  Harness h(std::make_unique<FifoPolicy>(), 2,
            ServerSpec{"", 4, 1, 1, 0, "turned off"});
  const JobId a = h.Submit(1);
  const JobId b = h.Submit(1);
  h.Send(CarrierKnown{b, Carrier::kProcessImage});
  h.CompleteAll();
  ASSERT_EQ(ServerOf(h, a), 0);
  ASSERT_EQ(ServerOf(h, b), 0);
  ASSERT_TRUE(h.TrySend(DrainRequest{ServerId(0)}).ok());
  const std::vector<DrainOutcome>& out = h.scheduler().last_drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].job, a);
  EXPECT_EQ(out[0].kind, Kind::kMoving);
  EXPECT_EQ(out[0].to, ServerId(1));
  EXPECT_EQ(out[1].job, b);
  EXPECT_EQ(out[1].kind, Kind::kStays);
  EXPECT_EQ(out[1].reason,
            "cannot migrate job " + std::to_string(b.value) +
                ": it does not use the gandiva job-side library, is not "
                "declared restartable, and CRIU is not usable on s0 (turned "
                "off)");
  EXPECT_EQ(CountKind(h.last(), ActionKind::kMigrate), 1);
  h.CompleteAll();
  EXPECT_EQ(ServerOf(h, a), 1);
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  EXPECT_EQ(ServerOf(h, b), 0);
}

}  // namespace
}  // namespace gandiva::core
