// Operator requests for the mechanisms (MechanismRequest): what the core
// accepts, what it refuses and why, and what a failure leaves behind.
#include <gtest/gtest.h>

#include <memory>
#include <tuple>

#include "core/policies/fifo.h"
#include "core/policies/gandiva.h"
#include "core/scheduler.h"
#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::CountKind;
using testing::Harness;
using Kind = MechanismRequest::Kind;

MechanismRequest Migrate(JobId job, int server) {
  return {Kind::kMigrate, job, ServerId(server), JobId(), 0};
}
MechanismRequest Pack(JobId job, JobId with) {
  return {Kind::kPack, job, ServerId(), with, 0};
}
MechanismRequest Unpack(JobId job) {
  return {Kind::kUnpack, job, ServerId(), JobId(), 0};
}
MechanismRequest Resize(JobId job, int gpus) {
  return {Kind::kResize, job, ServerId(), JobId(), gpus};
}

// A refusal: kFailedPrecondition whose message holds `why`, and no action.
void ExpectRefused(Harness& h, const MechanismRequest& m,
                   const std::string& why) {
  Status st = h.TrySend(m);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
  EXPECT_TRUE(h.last().empty());
}

int ServerOf(const Harness& h, JobId job) {
  return h.state().cluster().gpu(h.job(job).gpus[0]).server.value;
}

TEST(MechanismTest, MigratesARunningJobAndGoesBackOnFailure) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  const JobId a = h.Submit(2);
  h.CompleteAll();
  ASSERT_EQ(h.job(a).state, JobState::kRunning);
  const int from = ServerOf(h, a);
  const int to = 1 - from;

  const std::vector<GpuId> ran_on = h.job(a).gpus;
  EXPECT_EQ(h.job(a).ran_on, ran_on);
  ASSERT_TRUE(h.TrySend(Migrate(a, to)).ok());
  ASSERT_EQ(CountKind(h.last(), ActionKind::kMigrate), 1);
  EXPECT_TRUE(h.last().back().relocates);
  EXPECT_EQ(h.job(a).state, JobState::kMigrating);
  EXPECT_EQ(ServerOf(h, a), to);
  EXPECT_EQ(h.state().cluster().server(ServerId(from)).free_gpus, 4);

  h.Fail(a);
  // Back where it was, running, its GPUs held again.
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(ServerOf(h, a), from);
  for (GpuId g : h.job(a).gpus) {
    EXPECT_EQ(h.state().cluster().gpu(g).active, 1);
  }
  EXPECT_FALSE(h.job(a).immovable);
  EXPECT_EQ(h.job(a).ran_on, ran_on) << "it did not run elsewhere";

  ASSERT_TRUE(h.TrySend(Migrate(a, to)).ok());
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(ServerOf(h, a), to);
  EXPECT_EQ(h.job(a).ran_on, h.job(a).gpus);
  EXPECT_EQ(h.job(a).migrations, 1) << "the failed one is not the job's";
  EXPECT_EQ(h.state().counters().migrations, 2) << "actions taken";
}

// A suspend that failed is not counted as one of the job's suspends (nor
// a failed migration as a migration); the cluster's counters count the
// actions taken.
TEST(MechanismTest, AFailedMechanismIsNotCountedAsTheJobs) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  const JobId a = h.Submit(2);
  h.CompleteAll();
  ASSERT_TRUE(h.TrySend(Migrate(a, 1 - ServerOf(h, a))).ok());
  h.Fail(a);
  EXPECT_EQ(h.job(a).migrations, 0);
  h.Send(HoldRequest{a, true});
  ASSERT_EQ(h.job(a).in_flight, ActionKind::kSuspend);
  h.Fail(a);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(a).suspends, 0);
  EXPECT_EQ(h.state().counters().suspends, 1);
  EXPECT_EQ(h.state().counters().migrations, 1);
  EXPECT_EQ(h.state().counters().actions_failed, 2);
}

TEST(MechanismTest, RefusesMigrationsThatCannotBeDone) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  const JobId a = h.Submit(4);
  const JobId b = h.Submit(4);
  const JobId q = h.Submit(2);  // queued: no room
  h.CompleteAll();
  ExpectRefused(h, Migrate(q, 0), "queued");
  ExpectRefused(h, Migrate(a, ServerOf(h, a)), "already on server");
  ExpectRefused(h, Migrate(a, ServerOf(h, b)), "no room");
  ExpectRefused(h, Migrate(a, 7), "unknown server");
  EXPECT_EQ(h.TrySend(Migrate(JobId(42), 0)).code(), StatusCode::kNotFound);
  // The refused job runs on where it was.
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
}

TEST(MechanismTest, APermanentFailureMakesTheJobImmovable) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  const JobId a = h.Submit(1);
  h.CompleteAll();
  ASSERT_TRUE(h.TrySend(Migrate(a, 1 - ServerOf(h, a))).ok());
  h.Fail(a, /*permanent=*/true);
  EXPECT_TRUE(h.job(a).immovable);
  EXPECT_EQ(h.job(a).immovable_reason, "test");
  ExpectRefused(h, Migrate(a, 1 - ServerOf(h, a)),
                "it cannot be checkpointed: test");
}

TEST(MechanismTest, PacksAQueuedJobAndUnpacksIt) {
  Harness h(std::make_unique<FifoPolicy>(), 1,
            ServerSpec{"", 1, 1, 1});  // one GPU
  const JobId a = h.Submit(1);
  const JobId b = h.Submit(1);
  h.CompleteAll();
  ASSERT_EQ(h.job(b).state, JobState::kQueued);
  ExpectRefused(h, Pack(a, b), "is not running");
  ExpectRefused(h, Pack(b, b), "itself");
  ASSERT_TRUE(h.TrySend(Pack(b, a)).ok());
  ASSERT_EQ(CountKind(h.last(), ActionKind::kPack), 1);
  EXPECT_TRUE(h.last().back().launch);
  EXPECT_FALSE(h.last().back().relocates) << "nothing to carry";
  h.CompleteAll();
  EXPECT_EQ(h.job(b).packed_with, a);
  EXPECT_EQ(h.state().cluster().gpu(GpuId(0)).active, 2);
  ExpectRefused(h, Migrate(b, 0), "unpack it first");

  ASSERT_TRUE(h.TrySend(Unpack(b)).ok());
  ASSERT_EQ(CountKind(h.last(), ActionKind::kUnpack), 1);
  h.CompleteAll();
  EXPECT_EQ(h.job(b).state, JobState::kSuspended);
  EXPECT_FALSE(h.job(a).packed_with.valid());
  ExpectRefused(h, Unpack(b), "not packed");
}

TEST(MechanismTest, PackingMovesASuspendedJobOntoItsPartner) {
  GandivaOptions o;  // no packing, no moves of its own
  o.migrate_to_idle = false;
  Harness h(std::make_unique<GandivaPolicy>(o), 2, ServerSpec{"", 1, 1, 1});
  const JobId a = h.Submit(1);
  const JobId b = h.Submit(1);
  h.CompleteAll();
  ASSERT_NE(ServerOf(h, a), ServerOf(h, b));
  // Hold b (an operator suspend), then pack it with a.
  h.Send(HoldRequest{b, true});
  h.CompleteAll();
  ASSERT_EQ(h.job(b).state, JobState::kSuspended);
  ASSERT_TRUE(h.TrySend(Pack(b, a)).ok());
  const Action& pack = h.last().back();
  EXPECT_EQ(pack.kind, ActionKind::kPack);
  EXPECT_FALSE(pack.launch);  // it ran: the world moves its process
  EXPECT_TRUE(pack.relocates);
  EXPECT_EQ(pack.gpus, h.job(a).gpus);
  EXPECT_FALSE(h.job(b).held);
}

// Two measured jobs that would not fit in the GPUs' memory (as the server
// reports it) are not packed by hand either; where a job's memory or the
// GPUs' is unknown, the operator decides.
TEST(MechanismTest, RefusesAPackThatDoesNotFitTheGpusMemory) {
  // b measured at b_gib (0: never measured), a at 5 GiB, on 8 GiB GPUs.
  auto pack = [](double b_gib) {
    GandivaOptions o;
    o.migrate_to_idle = false;
    auto h = std::make_unique<Harness>(std::make_unique<GandivaPolicy>(o), 2,
                                       ServerSpec{"", 1, 1, 1, 8.0});
    const JobId a = h->Submit(1);
    const JobId b = h->Submit(1);
    h->CompleteAll();
    h->Send(ProfileReport{a, 10.0, 100, 5.0, 0.5});
    if (b_gib > 0) h->Send(ProfileReport{b, 10.0, 100, b_gib, 0.5});
    h->Send(HoldRequest{b, true});
    h->CompleteAll();
    EXPECT_EQ(h->job(b).state, JobState::kSuspended);
    return std::make_tuple(std::move(h), a, b);
  };
  {
    auto [h, a, b] = pack(4.0);
    ExpectRefused(*h, Pack(b, a),
                  "it uses 9.0 GiB of GPU memory, more than the 8.0 GiB "
                  "of s0's GPUs");
    EXPECT_FALSE(h->job(b).packed_with.valid());
  }
  {
    auto [h, a, b] = pack(3.0);  // 8 GiB: fits
    EXPECT_TRUE(h->TrySend(Pack(b, a)).ok());
  }
  {
    auto [h, a, b] = pack(0);  // unknown: the operator decides
    EXPECT_TRUE(h->TrySend(Pack(b, a)).ok());
  }
}

TEST(MechanismTest, ResizesElasticJobsOnly) {
  Harness h(std::make_unique<FifoPolicy>(), 1);
  const JobId e = h.Submit(1, 0, /*elastic=*/true);
  const JobId r = h.Submit(1);
  h.CompleteAll();
  ExpectRefused(h, Resize(r, 2), "not elastic");
  ExpectRefused(h, Resize(e, 3), "power of two");
  ExpectRefused(h, Resize(e, 1), "already has 1");
  ExpectRefused(h, Resize(e, 8), "no room: it needs 7 more GPUs; server");
  ExpectRefused(h, Resize(e, 4), "no room");
  ASSERT_TRUE(h.TrySend(Resize(e, 2)).ok());
  ASSERT_EQ(CountKind(h.last(), ActionKind::kGrow), 1);
  h.CompleteAll();
  EXPECT_EQ(h.job(e).gpus.size(), 2u);
  ASSERT_TRUE(h.TrySend(Resize(e, 1)).ok());
  ASSERT_EQ(CountKind(h.last(), ActionKind::kShrink), 1);
  h.CompleteAll();
  EXPECT_EQ(h.job(e).gpus.size(), 1u);
  EXPECT_EQ(h.state().cluster().free_gpus(), 2);
}

// An operator's grow takes free GPUs on the job's own server first and
// then on other servers (the job comes to span them); a shrink keeps the
// GPUs of the server holding most of the job, which may bring it back
// onto one server.
TEST(MechanismTest,
     ResizeGrowsAcrossServersAndShrinksOntoTheServerHoldingMost) {
  Harness h(std::make_unique<FifoPolicy>(), 3, ServerSpec{"", 2, 1, 1, 0});
  const JobId blocker = h.Submit(1);
  const JobId e = h.Submit(1, 0, /*elastic=*/true);
  h.CompleteAll();
  ASSERT_EQ(h.job(blocker).state, JobState::kRunning);
  const Cluster& c = h.state().cluster();
  ASSERT_TRUE(h.TrySend(Resize(e, 4)).ok());
  ASSERT_EQ(CountKind(h.last(), ActionKind::kGrow), 1);
  h.CompleteAll();
  ASSERT_EQ(h.job(e).gpus.size(), 4u);
  EXPECT_EQ(c.SpreadOf(h.job(e).gpus), Spread::kAcrossServers);
  ExpectRefused(h, Resize(e, 8), "no room: it needs 4 more GPUs; its servers");

  ASSERT_TRUE(h.TrySend(Resize(e, 2)).ok());
  ASSERT_EQ(CountKind(h.last(), ActionKind::kShrink), 1);
  h.CompleteAll();
  ASSERT_EQ(h.job(e).gpus.size(), 2u);
  EXPECT_NE(c.SpreadOf(h.job(e).gpus), Spread::kAcrossServers);
  const ServerId kept = c.gpu(h.job(e).gpus[0]).server;
  for (GpuId g : c.GpusOf(kept)) {
    EXPECT_EQ(c.gpu(g).jobs, std::vector<JobId>{e});
  }
  EXPECT_EQ(h.state().cluster().free_gpus(), 3);
}

// Cordon: new jobs go elsewhere, or wait; the jobs there stay and can be
// migrated off, never onto it; uncordoned, it takes jobs again.
TEST(MechanismTest, ACordonedServerTakesNoNewJobsAndIsDrainedByMigrations) {
  for (const bool fifo : {false, true}) {
    SCOPED_TRACE(fifo ? "fifo" : "gandiva");
    std::unique_ptr<Policy> p;
    if (fifo) {
      p = std::make_unique<FifoPolicy>();
    } else {
      GandivaOptions o;
      o.time_slicing = false;  // a job that does not fit waits in the queue
      p = std::make_unique<GandivaPolicy>(o);
    }
    Harness h(std::move(p), 2);
    const JobId a = h.Submit(2);
    h.CompleteAll();
    const int home = ServerOf(h, a);
    EXPECT_EQ(h.TrySend(CordonRequest{ServerId(7), true}).code(),
              StatusCode::kNotFound);
    ASSERT_TRUE(h.TrySend(CordonRequest{ServerId(home), true}).ok());
    // A 2-GPU job would have fit beside `a`: it goes to the other server.
    // A 4-GPU one fits nowhere open: it waits.
    const JobId b = h.Submit(2);
    const JobId c = h.Submit(4);
    h.CompleteAll();
    EXPECT_EQ(ServerOf(h, b), 1 - home);
    EXPECT_EQ(h.job(c).state, JobState::kQueued);
    EXPECT_EQ(h.job(a).state, JobState::kRunning);  // stays where it is
    // Nothing moves onto it; its jobs can be moved off it.
    ExpectRefused(h, Migrate(b, home), "is cordoned");
    ASSERT_TRUE(h.TrySend(Migrate(a, 1 - home)).ok());
    h.CompleteAll();
    EXPECT_EQ(ServerOf(h, a), 1 - home);
    EXPECT_EQ(h.state().cluster().server(ServerId(home)).free_gpus, 4);
    // Empty, but cordoned: the waiting job still waits.
    h.Tick();
    h.CompleteAll();
    EXPECT_EQ(h.job(c).state, JobState::kQueued);
    // Uncordoned: it is placed there.
    ASSERT_TRUE(h.TrySend(CordonRequest{ServerId(home), false}).ok());
    h.CompleteAll();
    EXPECT_EQ(h.job(c).state, JobState::kRunning);
    EXPECT_EQ(ServerOf(h, c), home);
  }
}

// A job only an image of its process carries (JobSpec::carrier) moves
// only between servers that can save one, and is never resized; once the
// job-side library is seen it moves like any other.
TEST(MechanismTest, AJobCarriedByItsProcessImageMovesOnlyWhereOneCanBeSaved) {
  ServerSpec off{"", 4, 1, 1, 0, "turned off"};
  Harness h(std::make_unique<FifoPolicy>(), 2, off);
  JobSpec spec;
  spec.gpus = 1;
  spec.elastic = true;
  spec.carrier = Carrier::kProcessImage;
  const JobId a(100);
  h.Send(JobArrived{a, spec});
  h.CompleteAll();
  const int home = ServerOf(h, a);
  const int other = 1 - home;
  const std::string head =
      "it does not use the gandiva job-side library, is not declared "
      "restartable, and ";
  ExpectRefused(h, Migrate(a, other),
                head + "CRIU is not usable on s" + std::to_string(home) +
                    " (turned off)");
  ExpectRefused(h, Resize(a, 2),
                head + "CRIU can move a process but not change its world size");
  // Its server can now (its agent came back with CRIU); the other cannot.
  off.process_images_unusable.clear();
  h.Send(ServerUp{off, ServerId(home)});
  ExpectRefused(
      h, Migrate(a, other),
      "CRIU is not usable on s" + std::to_string(other) + " (turned off)");
  h.Send(ServerUp{off, ServerId(other)});
  ASSERT_TRUE(h.TrySend(Migrate(a, other)).ok());
  h.CompleteAll();
  EXPECT_EQ(ServerOf(h, a), other);
  ExpectRefused(h, Resize(a, 2), "CRIU can move a process");
  // The library attached: resized like any elastic job.
  h.Send(CarrierKnown{a, Carrier::kSelf});
  EXPECT_EQ(h.job(a).spec.carrier, Carrier::kSelf);
  ASSERT_TRUE(h.TrySend(Resize(a, 2)).ok());
  EXPECT_EQ(CountKind(h.last(), ActionKind::kGrow), 1);
  // Of unknown jobs, and carriers that are none, nothing is learned.
  EXPECT_EQ(h.TrySend(CarrierKnown{JobId(7), Carrier::kSelf}).code(),
            StatusCode::kNotFound);
  const Status bad = h.TrySend(CarrierKnown{a, static_cast<Carrier>(9)});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("field 'carrier'"), std::string::npos)
      << bad.message();
  EXPECT_EQ(h.job(a).spec.carrier, Carrier::kSelf);
}

// A job not launched yet is not carried anywhere: it starts where it goes.
TEST(MechanismTest, AJobNeverLaunchedIsPackedWhateverCarriesIt) {
  Harness h(std::make_unique<FifoPolicy>(), 1,
            ServerSpec{"", 1, 1, 1, 0, "turned off"});
  const JobId a = h.Submit(1);
  JobSpec spec;
  spec.carrier = Carrier::kProcessImage;
  const JobId q(50);
  h.Send(JobArrived{q, spec});
  h.CompleteAll();
  ASSERT_EQ(h.job(q).state, JobState::kQueued);
  ASSERT_TRUE(h.TrySend(Pack(q, a)).ok()) << h.job(q).spec.name;
  EXPECT_EQ(CountKind(h.last(), ActionKind::kPack), 1);
}

// A restartable job moves and is resized, but not while it spans servers
// (its parts restart from rank 0's checkpoint: only the library saves one).
TEST(MechanismTest, ARestartableJobIsNotMovedWhileItSpansServers) {
  Harness h(std::make_unique<FifoPolicy>(), 3,
            ServerSpec{"", 2, 1, 1, 0, "turned off"});
  const JobId blocker = h.Submit(1);
  const JobId e = h.Submit(1, 0, /*elastic=*/true);
  h.Send(CarrierKnown{e, Carrier::kRestart});
  h.CompleteAll();
  ASSERT_EQ(h.job(blocker).state, JobState::kRunning);
  ASSERT_TRUE(h.TrySend(Resize(e, 4)).ok());
  h.CompleteAll();
  ASSERT_EQ(h.state().cluster().SpreadOf(h.job(e).gpus),
            Spread::kAcrossServers);
  ExpectRefused(h, Resize(e, 2),
                "it spans servers and does not use the gandiva job-side "
                "library");
  h.Send(CarrierKnown{e, Carrier::kSelf});
  ASSERT_TRUE(h.TrySend(Resize(e, 2)).ok());
  EXPECT_EQ(CountKind(h.last(), ActionKind::kShrink), 1);
}

}  // namespace
}  // namespace gandiva::core
