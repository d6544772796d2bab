#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "core/event.h"
#include "core/policies/registry.h"
#include "sim/finish_time_fairness.h"
#include "sim/workload/synthetic.h"

namespace gandiva::sim {
namespace {

using core::Duration;
using core::Time;

class SimulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Catalog::Load(GANDIVA_TEST_DATA_DIR);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    catalog_ = std::make_unique<Catalog>(std::move(*c));
    resnet_ = *catalog_->FindFamily("ResNet-50");
    vgg_ = *catalog_->FindFamily("VGG16");
  }

  TraceJob Job(std::string name, double submit_s, double duration_s,
               int gpus = 1, ModelId model = -1) {
    TraceJob j;
    j.name = std::move(name);
    j.submit = Time::Zero() + Duration::FromSeconds(submit_s);
    j.duration = Duration::FromSeconds(duration_s);
    j.gpus = gpus;
    j.model = model < 0 ? resnet_ : model;
    return j;
  }

  SimResult Run(const Workload& w, const std::string& policy,
                SimOptions o = {}) {
    auto p = core::MakePolicy(policy);
    EXPECT_TRUE(p.ok());
    auto r = Simulate(w, *catalog_, std::move(*p), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(*r);
  }

  // Queue a's four jobs of 7,190 s come at 0, queue b's two of 3,600 s at
  // 600 s.
  Workload TwoQueues() {
    Workload w;
    for (int i = 0; i < 4; ++i) {
      w.jobs.push_back(Job("a" + std::to_string(i), 0, 7190));
      w.jobs.back().vc = "a";
    }
    for (int i = 0; i < 2; ++i) {
      w.jobs.push_back(Job("b" + std::to_string(i), 600, 3600));
      w.jobs.back().vc = "b";
    }
    return w;
  }

  static SimOptions Small(int servers, int gpus) {
    SimOptions o;
    o.servers = servers;
    o.server.gpus = gpus;
    return o;
  }

  // Two one-GPU jobs sharing one GPU under `policy`, the cluster sampled
  // every `every`.
  core::StatusOr<SimResult> TwoJobsOnOneGpu(const std::string& policy,
                                            Duration every) {
    Workload w;
    w.jobs = {Job("a", 0, 3000), Job("b", 0, 3000)};
    auto p = core::MakePolicy(policy);
    if (!p.ok()) return p.status();
    SimOptions o = Small(1, 1);
    o.timeline_every = every;
    return Simulate(w, *catalog_, std::move(*p), o);
  }

  std::unique_ptr<Catalog> catalog_;
  ModelId resnet_ = 0, vgg_ = 0;
};

TEST_F(SimulatorTest, AloneAJobTakesItsDurationPlusTheStart) {
  Workload w;
  w.jobs = {Job("a", 5, 1000)};
  for (const char* policy : {"fifo", "gandiva"}) {
    SimResult r = Run(w, policy, Small(1, 4));
    ASSERT_EQ(r.jobs_finished, 1);
    EXPECT_NEAR(r.mean_jct_s, 1010, 1e-3) << policy;
    EXPECT_NEAR(r.mean_time_to_first_feedback_s, 70, 1e-3) << policy;
    EXPECT_NEAR(r.makespan_s, 1015, 1e-3);
    // One GPU of four trained for 1000 s of 1015 s.
    EXPECT_NEAR(r.gpu_utilization, 1000.0 / (4 * 1015), 1e-6);
    // ... keeping it as busy as the model's utilisation says.
    EXPECT_NEAR(r.gpu_busy,
                catalog_->model(resnet_).utilization * 1000.0 / (4 * 1015),
                1e-6);
  }
}

// Servers have the catalog's GPU type's memory: on K80s (12 GB) the policy
// does not pack two jobs that need 7.5 GB each (its own default assumes
// 16 GB), so no pack fails for memory.
TEST_F(SimulatorTest, PackingFitsTheCatalogsGpuMemory) {
  auto k80 = Catalog::Load(GANDIVA_TEST_DATA_DIR, GpuType::kK80);
  ASSERT_TRUE(k80.ok()) << k80.status().ToString();
  ModelId big = -1;
  for (ModelId m = 0; m < k80->size(); ++m) {
    const double gb = k80->model(m).memory_gb;
    if (2 * gb > 12 && 2 * gb <= 16) big = m;
  }
  ASSERT_GE(big, 0) << "no model needing 6..8 GB in the catalog";
  Workload w;
  w.jobs = {Job("a", 0, 3000, 1, big), Job("b", 0, 3000, 1, big)};
  auto policy = core::MakePolicy("gandiva");
  ASSERT_TRUE(policy.ok());
  auto r = Simulate(w, *k80, std::move(*policy), Small(1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs_finished, 2);
  EXPECT_EQ(r->pack_failures, 0);
  EXPECT_EQ(r->packs, 0);
  EXPECT_GT(r->suspends, 0);  // time-sliced instead
}

// Two jobs packed on one GPU keep one GPU training, not two: the timeline
// counts GPUs as the runtime does, never above the cluster.
TEST_F(SimulatorTest, PackedJobsKeepOneGpuTraining) {
  auto r = TwoJobsOnOneGpu("gandiva", Duration::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs_finished, 2);
  ASSERT_GT(r->packs, 0);
  int packed = 0;
  for (const TimelineSample& t : r->timeline) {
    EXPECT_LE(t.gpus_training, 1.0) << t.time.seconds();
    packed += t.running_jobs == 2;
  }
  EXPECT_GT(packed, 0);
}

// A sample is the mean over its interval, not the state at its instant:
// the samples, each weighted by its interval, add up to the GPU time spent
// training (time-slicing's rotations, when one job stops and the next
// starts, count for what they last, however a sample falls).
TEST_F(SimulatorTest, TimelineSamplesAverageOverTheirInterval) {
  auto r = TwoJobsOnOneGpu("gandiva-timeslice", Duration::Seconds(7));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->suspends, 2);
  ASSERT_GT(r->timeline.size(), 10u);
  double busy_s = 0;
  int partial = 0;
  for (size_t i = 1; i < r->timeline.size(); ++i) {
    const TimelineSample& t = r->timeline[i];
    busy_s += t.gpus_training * (t.time - r->timeline[i - 1].time).seconds();
    partial += t.gpus_training > 0 && t.gpus_training < 1;
  }
  EXPECT_GT(partial, 0) << "no interval held a rotation";
  const double training_s = r->gpu_utilization * r->makespan_s;  // 1 GPU
  EXPECT_NEAR(busy_s, training_s, 1e-3 * training_s);
}

TEST_F(SimulatorTest, TimeSlicingGivesEarlyFeedback) {
  Workload w;
  w.jobs = {Job("a", 0, 3000), Job("b", 0, 3000), Job("c", 0, 3000)};
  SimResult fifo = Run(w, "fifo", Small(1, 1));
  SimResult gandiva = Run(w, "gandiva", Small(1, 1));
  ASSERT_EQ(fifo.jobs_finished, 3);
  ASSERT_EQ(gandiva.jobs_finished, 3);
  // FIFO: feedback at 70 s, 3080 s, 6090 s after submission.
  EXPECT_NEAR(fifo.mean_time_to_first_feedback_s, (70 + 3080 + 6090) / 3.0, 1);
  // Time-slicing: every job trains within the first few slices.
  for (const JobResult& j : gandiva.per_job) {
    EXPECT_LT((j.feedback - j.submit).seconds(), 400) << j.name;
  }
  EXPECT_GT(gandiva.suspends, 10);
  EXPECT_EQ(fifo.suspends, 0);
  // Sharing costs a little: the makespan grows by the mechanisms' time only.
  EXPECT_GT(gandiva.makespan_s, fifo.makespan_s);
  EXPECT_LT(gandiva.makespan_s, fifo.makespan_s * 1.1);
}

TEST_F(SimulatorTest, SpreadAcrossServersSlowsAJob) {
  // Two servers with one free GPU each: a 2-GPU VGG16 job must split.
  Workload w;
  // FIFO best fit puts a, b on server 0 and c, d on server 1; b and d end
  // soon, leaving one free GPU on each server for the waiting VGG16 job.
  w.jobs = {Job("a", 0, 100000), Job("b", 0, 100), Job("c", 0, 100000),
            Job("d", 0, 100), Job("vgg", 1, 1000, 2, vgg_)};
  SimOptions o = Small(2, 2);
  SimResult r = Run(w, "fifo", o);
  const JobResult& vgg = r.per_job[4];
  const double factor = catalog_->SpreadFactor(vgg_, Spread::kCrossServer);
  ASSERT_LT(factor, 1.0);
  EXPECT_NEAR((vgg.finish - vgg.first_start).seconds(), 10 + 1000 / factor,
              0.01);
}

TEST_F(SimulatorTest, TickHookSeesProgressAndKills) {
  Workload w;
  w.jobs = {Job("keep", 0, 1000), Job("drop", 0, 1000)};
  SimOptions o = Small(1, 2);
  int calls = 0;
  o.on_tick = [&](SimControl& c) {
    ++calls;
    ASSERT_EQ(c.num_jobs(), 2u);
    if (calls == 1) {
      EXPECT_TRUE(c.arrived(1));
      // 60 s after submission, 50 s of training after a 10 s start.
      EXPECT_NEAR(c.done(1) / c.total(1), 50.0 / 1000, 1e-6);
      c.Kill(1, "worse half");
    }
  };
  SimResult r = Run(w, "gandiva", o);
  EXPECT_EQ(r.jobs_finished, 1);
  EXPECT_EQ(r.jobs_killed, 1);
  EXPECT_TRUE(r.per_job[1].killed);
  EXPECT_FALSE(r.per_job[1].finished);
  EXPECT_GT(calls, 10);
}

// A Resume the core says relocates the job (tiresias-las gives a preempted
// job's GPUs back and resumes it wherever it is placed next) costs a
// migration; one in place costs a resume.
TEST_F(SimulatorTest, AResumeThatRelocatesTheJobIsChargedAsAMigration) {
  SyntheticOptions so;
  so.jobs = 120;
  so.total_gpus = 16;
  so.seed = 5;
  const Workload w = GenerateSynthetic(*catalog_, so);
  SimOptions o = Small(4, 4);
  o.costs.resume = Duration::Seconds(1);
  o.costs.migrate = Duration::Seconds(7);
  std::map<int64_t, std::pair<bool, Time>> resumes;  // by action id
  std::map<bool, int> charged;  // by relocates: resumes charged right
  o.record = [&](const core::Event& e, const std::vector<core::Action>& as) {
    if (const auto* d = std::get_if<core::ActionDone>(&e.body)) {
      auto it = resumes.find(d->action.value);
      if (it == resumes.end()) return;
      const auto [relocates, sent] = it->second;
      EXPECT_EQ(e.time - sent, relocates ? o.costs.migrate : o.costs.resume);
      ++charged[relocates];
      resumes.erase(it);
    }
    for (const core::Action& a : as) {
      if (a.kind == core::ActionKind::kResume) {
        resumes[a.id.value] = {a.relocates, e.time};
      }
    }
  };
  Run(w, "tiresias-las", o);
  EXPECT_GT(charged[true], 0);
  EXPECT_GT(charged[false], 0);
}

// The tick hook can ask why a queued job waits: the policy's reason, as
// the runtime shows it.
TEST_F(SimulatorTest, TheTickHookSeesWhyAQueuedJobWaits) {
  Workload w;
  w.jobs.push_back(Job("first", 0, 3600, 4));
  w.jobs.push_back(Job("second", 10, 600, 4));
  SimOptions o = Small(1, 4);
  std::vector<std::string> seen;
  o.on_tick = [&](SimControl& c) {
    if (c.arrived(1) && !c.ended(1)) seen.push_back(c.WhyQueued(1));
    EXPECT_EQ(c.WhyQueued(0), "") << "it runs";
  };
  Run(w, "fifo", o);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), "it needs 4 GPUs, 0 are free");
  EXPECT_EQ(seen.back(), "") << "it ran once the first ended";
}

TEST_F(SimulatorTest, SkipsJobsLargerThanTheCluster) {
  Workload w;
  w.jobs = {Job("small", 0, 100), Job("huge", 0, 100, 16)};
  SimResult r = Run(w, "gandiva", Small(1, 4));
  EXPECT_EQ(r.jobs, 1);
  EXPECT_EQ(r.jobs_skipped, 1);
  SimOptions strict = Small(1, 4);
  strict.skip_oversized = false;
  auto p = core::MakePolicy("gandiva");
  auto bad = Simulate(w, *catalog_, std::move(*p), strict);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("huge"), std::string::npos);
}

TEST_F(SimulatorTest, SameSeedSameJson) {
  SyntheticOptions so;
  so.jobs = 200;
  so.total_gpus = 32;
  so.seed = 7;
  const Workload w = GenerateSynthetic(*catalog_, so);
  auto strip = [](std::string json) {
    return json.substr(0, json.find("\"wall_s\""));
  };
  for (const char* policy : {"fifo", "gandiva"}) {
    const std::string a = strip(ResultJson(Run(w, policy, Small(8, 4))));
    const std::string b = strip(ResultJson(Run(w, policy, Small(8, 4))));
    EXPECT_EQ(a, b);
    EXPECT_NE(a.find("\"jobs_finished\": 200"), std::string::npos) << a;
  }
  so.seed = 8;
  const Workload w2 = GenerateSynthetic(*catalog_, so);
  EXPECT_NE(strip(ResultJson(Run(w, "gandiva", Small(8, 4)))),
            strip(ResultJson(Run(w2, "gandiva", Small(8, 4)))));
}

TEST_F(SimulatorTest, EveryJobFinishesExactlyOnce) {
  SyntheticOptions so;
  so.jobs = 300;
  so.total_gpus = 16;
  const Workload w = GenerateSynthetic(*catalog_, so);
  for (const char* policy : {"fifo", "gandiva", "gandiva-reactive"}) {
    SimResult r = Run(w, policy, Small(4, 4));
    EXPECT_EQ(r.jobs_finished, r.jobs) << policy;
    for (const JobResult& j : r.per_job) {
      ASSERT_TRUE(j.finished) << j.name;
      EXPECT_GE(j.finish, j.first_start);
      EXPECT_GE(j.feedback, j.submit);
      EXPECT_LE(j.feedback, j.finish);
    }
    EXPECT_EQ(r.starts + r.resumes + r.migrations + r.packs,
              r.suspends + r.unpacks + r.jobs + r.pack_failures)
        << policy;
  }
}

// A core restored from its snapshot every few events gives the same run as
// one never restored: the snapshot carries all the state the core and each
// policy keep (packs judged, jobs grown, quotas used, attained service...).
TEST_F(SimulatorTest, ACoreRestoredFromSnapshotsRunsTheSame) {
  SyntheticOptions so;
  so.jobs = 240;
  so.total_gpus = 32;
  so.seed = 11;
  so.elastic_fraction = 0.3;
  so.window = Duration::Seconds(12 * 3600);
  Workload w = GenerateSynthetic(*catalog_, so);
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    w.jobs[i].vc = i % 3 == 0 ? "research" : "prod";
    w.jobs[i].priority = i % 17 == 0 ? 1 : 0;
  }
  core::PolicyOptions po;
  po.fifo.vc_quotas = {{"research", 12}, {"prod", 16}};
  po.fifo.allow_borrowing = true;
  po.queues = core::FlatQueues(po.fifo.vc_quotas);
  auto strip = [](std::string json) {
    return json.substr(0, json.find("\"wall_s\""));
  };
  for (const char* policy : {"fifo", "gandiva", "gandiva-timeslice",
                             "tiresias-las", "gandiva-fair", "drf-reclaim"}) {
    SCOPED_TRACE(policy);
    auto run = [&](int64_t every) {
      SimOptions o = Small(8, 4);
      o.snapshot_every_events = every;
      auto make = [&]() -> std::unique_ptr<core::Policy> {
        auto p = core::MakePolicy(policy, po);
        return p.ok() ? std::move(*p) : nullptr;
      };
      o.snapshot_policy = make;
      auto r = Simulate(w, *catalog_, make(), o);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() ? std::move(*r) : SimResult{};
    };
    const SimResult plain = run(0);
    const SimResult restored = run(7);
    EXPECT_EQ(strip(ResultJson(plain)), strip(ResultJson(restored)));
    EXPECT_EQ(plain.jobs_finished, plain.jobs);
    // The run exercised what the snapshot must carry.
    if (std::string(policy) == "gandiva") {
      EXPECT_GT(plain.packs, 0);
      EXPECT_GT(plain.grows, 0);
      EXPECT_GT(plain.migrations, 0);
    }
    if (std::string(policy) != "fifo") {
      EXPECT_GT(plain.suspends, 0);
    }
  }
}

// Where each job is placed, followed from the events and actions the core
// handled and gave (SimOptions::record).
struct Placements {
  int gpus_per_server = 4;
  std::map<int32_t, std::vector<core::GpuId>> where;  // placed jobs

  int ServerOf(core::GpuId g) const { return g.value / gpus_per_server; }
  bool On(const std::vector<core::GpuId>& gpus, int server) const {
    for (core::GpuId g : gpus) {
      if (ServerOf(g) == server) return true;
    }
    return false;
  }
  std::set<int32_t> JobsOn(int server) const {
    std::set<int32_t> out;
    for (const auto& [job, gpus] : where) {
      if (On(gpus, server)) out.insert(job);
    }
    return out;
  }
  // Notes the event's effect on placements (a lost server's jobs are
  // placed nowhere), then the actions'.
  void Note(const core::Event& e, const std::vector<core::Action>& actions) {
    if (const auto* f = std::get_if<core::JobFinished>(&e.body)) {
      where.erase(f->job.value);
    }
    if (const auto* d = std::get_if<core::ServerDown>(&e.body)) {
      for (int32_t j : JobsOn(d->id.value)) where.erase(j);
    }
    for (const core::Action& a : actions) {
      if (a.kind == core::ActionKind::kKill) where.erase(a.job.value);
      if (!a.gpus.empty()) where[a.job.value] = a.gpus;
    }
  }
};

// A drain and a server's loss at set times, fed to the core as the daemon
// feeds them: the drained server's jobs move off it and nothing runs there
// after; the lost server's jobs are requeued and start again elsewhere; all
// jobs finish.
TEST_F(SimulatorTest,
       ADrainedServerIsEmptiedAndALostServersJobsStartElsewhere) {
  // 5 servers of 4 GPUs and 8 GPUs of jobs: FIFO's best fit fills servers
  // 0 and 1, gandiva spreads them; either way both hold jobs (checked).
  Workload w;
  w.jobs = {Job("a", 0, 3000, 2), Job("b", 0, 3000), Job("c", 0, 3000),
            Job("d", 0, 3000, 2), Job("e", 0, 3000), Job("f", 0, 3000),
            Job("g", 0, 3000),    Job("h", 0, 3000)};
  SimOptions o = Small(5, 4);
  o.cluster_events = {
      {ClusterEvent::Kind::kServerDown, 1,
       Time::Zero() + Duration::Seconds(1200)},
      {ClusterEvent::Kind::kDrain, 0, Time::Zero() + Duration::Seconds(600)},
  };
  for (const char* policy : {"fifo", "gandiva"}) {
    SCOPED_TRACE(policy);
    Placements p;
    std::set<int32_t> drained, moved, lost, restarted;
    bool after_drain = false, after_loss = false;
    std::vector<std::string> on_drained;  // placed on server 0 after it
    o.record = [&](const core::Event& e,
                   const std::vector<core::Action>& actions) {
      if (std::holds_alternative<core::DrainRequest>(e.body)) {
        drained = p.JobsOn(0);
        for (const core::Action& a : actions) {
          if ((a.kind == core::ActionKind::kMigrate ||
               a.kind == core::ActionKind::kStart) &&
              !p.On(a.gpus, 0)) {
            moved.insert(a.job.value);
          }
        }
        after_drain = true;
      }
      if (std::holds_alternative<core::ServerDown>(e.body)) {
        lost = p.JobsOn(1);
        after_loss = true;
      }
      for (const core::Action& a : actions) {
        if (after_drain && p.On(a.gpus, 0)) {
          on_drained.push_back(std::string(core::ActionKindName(a.kind)) +
                               " job " + std::to_string(a.job.value));
        }
        if (after_loss && a.kind == core::ActionKind::kStart &&
            lost.count(a.job.value) && !p.On(a.gpus, 1)) {
          restarted.insert(a.job.value);
        }
      }
      p.Note(e, actions);
    };
    SimResult r = Run(w, policy, o);
    ASSERT_TRUE(after_drain && after_loss);
    EXPECT_FALSE(drained.empty()) << "server 0 held nothing to drain";
    EXPECT_EQ(moved, drained);
    EXPECT_GE(r.migrations, static_cast<int64_t>(drained.size()));
    EXPECT_TRUE(on_drained.empty()) << on_drained.front();
    EXPECT_FALSE(lost.empty()) << "server 1 held nothing to lose";
    EXPECT_EQ(r.jobs_lost, static_cast<int64_t>(lost.size()));
    EXPECT_EQ(restarted, lost);
    EXPECT_EQ(r.jobs_finished, r.jobs);
    for (int32_t j : lost) {
      // It lost the time it was not running (a start again), not its work.
      const JobResult& jr = r.per_job[static_cast<size_t>(j)];
      EXPECT_GT((jr.finish - jr.submit).seconds(), 3010) << jr.name;
      EXPECT_LT((jr.finish - jr.submit).seconds(), 3100) << jr.name;
    }
  }
}

// A job on the one server, lost at 100 s and back at 500 s: it starts
// again then (a new start, 10 s) with the 90 s of work it had done.
TEST_F(SimulatorTest, AJobOfALostServerStartsAgainWhenTheServerIsBack) {
  Workload w;
  w.jobs = {Job("a", 0, 1000, 4)};
  SimOptions o = Small(1, 4);
  o.cluster_events = {
      {ClusterEvent::Kind::kServerDown, 0,
       Time::Zero() + Duration::Seconds(100)},
      {ClusterEvent::Kind::kServerUp, 0, Time::Zero() + Duration::Seconds(500)},
  };
  for (const char* policy : {"fifo", "gandiva", "tiresias-las"}) {
    SimResult r = Run(w, policy, o);
    ASSERT_EQ(r.jobs_finished, 1) << policy;
    EXPECT_EQ(r.jobs_lost, 1) << policy;
    EXPECT_EQ(r.starts, 2) << policy;
    EXPECT_NEAR(r.mean_jct_s, 510 + 910, 1e-3) << policy;
  }
}

// An agent restart at 100 s, fed to the core as a ProcessLost for the job
// as the daemon would: the core restarts it there at once (a new process,
// 10 s), from the checkpoint kept of it (no work lost) or, after a crash,
// from the beginning (the 90 s it had done lost).
TEST_F(SimulatorTest, AJobWhoseAgentRestartsRunsAgainFromWhatWasKept) {
  Workload w;
  w.jobs = {Job("a", 0, 1000, 4)};
  for (const bool kept : {true, false}) {
    SimOptions o = Small(1, 4);
    ClusterEvent e{ClusterEvent::Kind::kAgentRestart, 0,
                   Time::Zero() + Duration::Seconds(100)};
    e.keep_checkpoints = kept;
    o.cluster_events = {e};
    for (const char* policy : {"fifo", "gandiva", "tiresias-las"}) {
      SCOPED_TRACE(std::string(policy) + (kept ? " kept" : " crash"));
      std::vector<core::Action> restarts;
      o.record = [&](const core::Event& ev,
                     const std::vector<core::Action>& actions) {
        if (std::holds_alternative<core::ProcessLost>(ev.body)) {
          EXPECT_EQ(std::get<core::ProcessLost>(ev.body).checkpoint, kept);
          restarts.insert(restarts.end(), actions.begin(), actions.end());
        }
      };
      SimResult r = Run(w, policy, o);
      ASSERT_EQ(r.jobs_finished, 1);
      EXPECT_EQ(r.processes_lost, 1);
      EXPECT_EQ(r.restarts, 1);
      EXPECT_EQ(r.starts, 1);
      EXPECT_EQ(r.jobs_lost, 0);
      ASSERT_EQ(restarts.size(), 1u);
      EXPECT_EQ(restarts[0].kind, core::ActionKind::kRestart);
      EXPECT_EQ(restarts[0].relocates, kept);
      EXPECT_EQ(restarts[0].launch, !kept);
      EXPECT_NEAR(r.mean_jct_s, kept ? 10 + 1000 + 10 : 10 + 90 + 10 + 1000,
                  1e-3);
      // Without a checkpoint the 90 s it trained on 4 GPUs are lost.
      EXPECT_NEAR(r.lost_gpu_hours, kept ? 0 : 90.0 * 4 / 3600, 1e-9);
    }
  }
}

// Two jobs time-sliced on one GPU (not packed) when the agent crashes: the
// running one restarts at once from the beginning; the suspended one starts
// again from the beginning when its turn comes (a Start, not a Resume). After a
// restart that kept checkpoints, the suspended one's next run is a Resume
// from its checkpoint (it relocates).
TEST_F(SimulatorTest, ASuspendedJobWhoseAgentRestartsGoesOnWhenItsTurnComes) {
  Workload w;
  w.jobs = {Job("a", 0, 3000), Job("b", 0, 3000)};
  for (const bool kept : {true, false}) {
    SCOPED_TRACE(kept ? "kept" : "crash");
    SimOptions o = Small(1, 1);
    ClusterEvent e{ClusterEvent::Kind::kAgentRestart, 0,
                   Time::Zero() + Duration::Seconds(250)};
    e.keep_checkpoints = kept;
    o.cluster_events = {e};
    std::set<int32_t> lost;
    // Each job's first action after the loss (a suspend aside).
    std::map<int32_t, core::ActionKind> next;
    std::map<int32_t, bool> next_relocates;
    bool after = false;
    o.record = [&](const core::Event& ev,
                   const std::vector<core::Action>& actions) {
      if (const auto* l = std::get_if<core::ProcessLost>(&ev.body)) {
        lost.insert(l->job.value);
        after = true;
      }
      if (!after) return;
      for (const core::Action& a : actions) {
        if (a.kind == core::ActionKind::kSuspend) continue;
        if (!next.count(a.job.value)) {
          next[a.job.value] = a.kind;
          next_relocates[a.job.value] = a.relocates;
        }
      }
    };
    SimResult r = Run(w, "gandiva-timeslice", o);
    ASSERT_EQ(r.jobs_finished, 2);
    EXPECT_EQ(r.processes_lost, 2);
    EXPECT_EQ(r.restarts, 1);
    ASSERT_EQ(lost.size(), 2u);
    ASSERT_EQ(next.size(), 2u);
    int restarted = 0, resumed_or_started = 0;
    for (const auto& [job, kind] : next) {
      if (kind == core::ActionKind::kRestart) {
        ++restarted;
        EXPECT_EQ(next_relocates[job], kept);
      } else {
        ++resumed_or_started;
        EXPECT_EQ(kind,
                  kept ? core::ActionKind::kResume : core::ActionKind::kStart);
        EXPECT_EQ(next_relocates[job], kept);
      }
    }
    EXPECT_EQ(restarted, 1);
    EXPECT_EQ(resumed_or_started, 1);
    // Against the same run with no restart: a crash loses the work both
    // had done by 250 s (about 240 s of one GPU's time); a restart that
    // kept it costs the restart (10 s) and a resume's relocation.
    const SimResult base = Run(w, "gandiva-timeslice", Small(1, 1));
    if (kept) {
      EXPECT_LT(r.makespan_s - base.makespan_s, 30);
    } else {
      EXPECT_GT(r.makespan_s - base.makespan_s, 230);
    }
  }
}

TEST_F(SimulatorTest, AClusterEventOfAServerTheClusterDoesNotHaveIsRefused) {
  Workload w;
  w.jobs = {Job("a", 0, 100)};
  SimOptions o = Small(2, 4);
  o.cluster_events = {{ClusterEvent::Kind::kDrain, 0, Time::Zero()},
                      {ClusterEvent::Kind::kDrain, 2, Time::Zero()}};
  auto p = core::MakePolicy("fifo");
  auto r = Simulate(w, *catalog_, std::move(*p), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "cluster_events[1]: field 'server': no server 2 (the cluster has "
            "2)");
}

// Two queues of 2 GPUs' quota on 4 GPUs: queue a fills the cluster first,
// queue b comes 600 s later. Plain fifo leaves b waiting for a's jobs to
// end (at 2 h, with their start): b gets none of its fair share in the
// first two hours while a gets more than its own, and b's jobs, which came
// within its quota, wait 6,600 s. fifo keeping to the quotas runs b's at
// once. What the queues received is the GPU time their jobs trained.
TEST_F(SimulatorTest, FairnessMeasuresHowTheQueuesSharedTheCluster) {
  const Workload w = TwoQueues();
  SimOptions o = Small(1, 4);
  o.queues = core::FlatQueues({{"a", 2}, {"b", 2}});
  SimResult plain = Run(w, "fifo", o);
  ASSERT_TRUE(plain.fairness.has_value());
  const FairnessResult& f = *plain.fairness;
  ASSERT_EQ(f.queues.size(), 2u);
  EXPECT_EQ(f.queues[0].name, "a");
  EXPECT_EQ(f.queues[0].jobs, 4);
  EXPECT_EQ(f.queues[1].jobs, 2);
  EXPECT_EQ(f.queues[1].quota, 2);
  // In the first two hours b has demand and gets nothing: Jain's index of
  // (x, 0) is 1/2. From 7,200 s b alone has demand. Of the 6 (queue, hour)
  // pairs with demand, b's first two fall short.
  EXPECT_NEAR(f.jain_fairness, 0.5, 1e-9);
  EXPECT_EQ(f.windows_shared, 2);
  EXPECT_EQ(f.queue_windows, 6);
  EXPECT_NEAR(f.share_windows_within_10pct, 4.0 / 6, 1e-9);
  double received_s = 0;
  for (const QueueFairness& q : f.queues) received_s += q.received_gpu_h * 3600;
  EXPECT_NEAR(received_s,
              plain.gpu_utilization * plain.total_gpus * plain.makespan_s,
              1e-3);
  // a's first two jobs and both of b's came within their quotas.
  EXPECT_EQ(plain.jobs_within_quota, 4);
  EXPECT_NEAR(plain.mean_reclaim_wait_s, (0 + 0 + 6600 + 6600) / 4.0, 1e-3);
  EXPECT_EQ(plain.lost_gpu_hours, 0);

  core::PolicyOptions po;
  po.fifo.vc_quotas = core::LeafQuotas(o.queues);
  auto fifo = core::MakePolicy("fifo", po);
  ASSERT_TRUE(fifo.ok());
  auto quotas = Simulate(w, *catalog_, std::move(*fifo), o);
  ASSERT_TRUE(quotas.ok()) << quotas.status().ToString();
  ASSERT_TRUE(quotas->fairness.has_value());
  EXPECT_NEAR(quotas->mean_reclaim_wait_s, 0, 1e-9);
  EXPECT_GT(quotas->fairness->jain_fairness, 0.9);

  // Without queues nothing is measured.
  EXPECT_FALSE(Run(w, "fifo", Small(1, 4)).fairness.has_value());

  // gandiva-fair reclaims b's quota at the next tick (a minute), by
  // suspending two of a's jobs: nothing is lost, and all finish.
  core::PolicyOptions fo;
  fo.queues = o.queues;
  auto fair = core::MakePolicy("gandiva-fair", fo);
  ASSERT_TRUE(fair.ok());
  auto shared = Simulate(w, *catalog_, std::move(*fair), o);
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  EXPECT_EQ(shared->jobs_finished, 6);
  EXPECT_LE(shared->mean_reclaim_wait_s, 60.0 / 2 + 1);
  EXPECT_GT(shared->suspends, 0);
  EXPECT_EQ(shared->lost_gpu_hours, 0);
  EXPECT_GT(shared->fairness->jain_fairness, 0.95);

  // drf-reclaim takes b's quota back at once by killing the two of a's
  // jobs started last, which lose what they trained since their start at
  // 10 s: 590 s each, with no checkpoint in 30 minutes; with one every 5
  // minutes, 290 s each. They restart once b's end, and all finish.
  for (const auto& [every, lost_s] :
       {std::pair{Duration::Seconds(1800), 590.0},
        std::pair{Duration::Seconds(300), 290.0}}) {
    SimOptions co = o;
    co.checkpoint_interval = every;
    auto drf = core::MakePolicy("drf-reclaim", fo);
    ASSERT_TRUE(drf.ok());
    auto killed = Simulate(w, *catalog_, std::move(*drf), co);
    ASSERT_TRUE(killed.ok()) << killed.status().ToString();
    EXPECT_EQ(killed->jobs_finished, 6);
    EXPECT_NEAR(killed->mean_reclaim_wait_s, 0, 1e-9);
    EXPECT_NEAR(killed->lost_gpu_hours, 2 * lost_s / 3600, 1e-6);
    EXPECT_EQ(killed->suspends, 2);
  }
}

// Finish-time fairness: each queue's jobs are run again alone on its quota
// (here 2 GPUs: one server of 2), and each job's JCT compared.
TEST_F(SimulatorTest, FinishTimeFairnessComparesEachJobWithItsQueueAlone) {
  const Workload w = TwoQueues();
  SimOptions o = Small(1, 4);
  o.queues = core::FlatQueues({{"a", 2}, {"b", 2}});
  SimResult r = Run(w, "fifo", o);
  std::vector<std::map<std::string, int>> asked;
  const PolicyForQueues fifo = [&](const std::vector<core::QueueConfig>& q) {
    asked.push_back(core::LeafQuotas(q));
    return core::MakePolicy("fifo");
  };
  ASSERT_TRUE(MeasureFinishTimeFairness(w, *catalog_, o, fifo, r).ok());
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0], (std::map<std::string, int>{{"a", 2}}));
  const FairnessResult& f = *r.fairness;
  ASSERT_TRUE(f.finish_time_measured);
  EXPECT_EQ(f.finish_time_jobs, 6);
  // Shared, plain fifo: a's four run at once (JCT 7,200 s); b's wait for
  // them (JCT 10,210 s). Alone on 2 GPUs: a's run two by two (7,200 and
  // 14,400 s), b's at once (3,610 s).
  const double b_rho = 10210.0 / 3610.0;
  EXPECT_NEAR(f.max_finish_time_fairness, b_rho, 1e-9);
  EXPECT_NEAR(f.mean_finish_time_fairness, (1 + 1 + 0.5 + 0.5 + 2 * b_rho) / 6,
              1e-9);
  EXPECT_NEAR(f.finish_time_fairness_above_1, 2.0 / 6, 1e-9);

  SimResult unmeasured = Run(w, "fifo", Small(1, 4));
  EXPECT_FALSE(
      MeasureFinishTimeFairness(w, *catalog_, Small(1, 4), fifo, unmeasured)
          .ok());
}

}  // namespace
}  // namespace gandiva::sim
