// The supervisor alone: jobs as /bin/sh children, exit codes, environment,
// logs, process groups, kill, and suspend/resume with and without the
// job-side library (a C++ job and a Python job).
#include "runtime/agent/supervisor.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "client/progress_reader.h"
#include "runtime/agent/criu.h"
#include "runtime/agent/exit_journal.h"
#include "runtime/agent/test_util.h"

namespace gandiva::runtime {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::UniqueName;
using testing::WaitUntil;
using namespace std::chrono_literals;

class SupervisorTest : public ::testing::Test {
 protected:
  SupervisorOptions Options() {
    SupervisorOptions o;
    o.name = UniqueName("sup");
    o.work_dir = dir_.path();
    o.num_gpus = 4;
    o.kill_grace = 2s;
    // Jobs without the library are suspended without waiting 10 s for it.
    o.library_start_grace = 1s;
    return o;
  }
  StartParams Job(int64_t id, std::string command) {
    StartParams p;
    p.job_id = id;
    p.command = std::move(command);
    return p;
  }
  // Waits for the exit and returns its view.
  JobView Finish(Supervisor& sup, int64_t id) {
    EXPECT_TRUE(sup.WaitForExit(id, 30s)) << "job " << id << " did not exit";
    auto v = sup.Job(id);
    EXPECT_TRUE(v.ok());
    return v.ok() ? *v : JobView{};
  }

  TempDir dir_;
};

TEST_F(SupervisorTest, ExitCodesAndRecordsKeptUntilAcked) {
  Supervisor sup(Options());
  ASSERT_TRUE(sup.Start(Job(1, "exit 3")).ok());
  ASSERT_TRUE(sup.Start(Job(2, "kill -9 $$")).ok());
  ASSERT_TRUE(sup.Start(Job(3, "true")).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 3);
  EXPECT_EQ(Finish(sup, 2).exit_code, -9);
  EXPECT_EQ(Finish(sup, 3).exit_code, 0);
  EXPECT_EQ(Finish(sup, 1).state, RunState::kExited);
  EXPECT_TRUE(sup.Jobs().empty());
  EXPECT_EQ(sup.Jobs(true).size(), 3u);

  std::vector<ExitRecord> exits = sup.PendingExits();
  ASSERT_EQ(exits.size(), 3u);
  std::map<int64_t, int> codes;
  for (const ExitRecord& e : exits) codes[e.job_id] = e.exit_code;
  EXPECT_EQ(codes, (std::map<int64_t, int>{{1, 3}, {2, -9}, {3, 0}}));
  EXPECT_EQ(sup.PendingExits().size(), 3u);  // kept until acknowledged
  sup.AckExits(exits[1].seq);
  ASSERT_EQ(sup.PendingExits().size(), 1u);
  EXPECT_EQ(sup.PendingExits()[0].seq, exits[2].seq);
  sup.AckExits(exits[2].seq);
  EXPECT_TRUE(sup.PendingExits().empty());

  // A job id that ended may start again (a restart).
  ASSERT_TRUE(sup.Start(Job(1, "exit 4")).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 4);
}

// As root, a job runs as its owner's account (here "nobody", mapped), its
// checkpoint dir and page handed to it; root and unknown accounts are
// refused.
TEST_F(SupervisorTest, AJobRunsAsItsOwnersAccount) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  passwd* nobody = ::getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no account 'nobody'";
  std::filesystem::permissions(dir_.path(),
                               std::filesystem::perms::owner_all |
                                   std::filesystem::perms::group_read |
                                   std::filesystem::perms::group_exec |
                                   std::filesystem::perms::others_read |
                                   std::filesystem::perms::others_exec);
  SupervisorOptions o = Options();
  o.run_as_owner = true;
  o.user_map = {{"alice", "nobody"}};
  Supervisor sup(o);
  StartParams p = Job(1,
                      "echo uid=$(id -u) user=$USER; "
                      "touch \"$GANDIVA_CHECKPOINT_DIR/mine\" && echo wrote");
  p.owner = "alice";
  ASSERT_TRUE(sup.Start(p).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 0);
  const std::string log = ReadFile(sup.LogPath(1));
  EXPECT_NE(log.find("uid=" + std::to_string(nobody->pw_uid) + " user=nobody"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("wrote"), std::string::npos) << log;

  for (const auto& [owner, why] :
       std::vector<std::pair<std::string, std::string>>{
           {"root", "which this agent allows only with --allow-root-jobs"},
           {"no-such-account-x", "has no Unix account 'no-such-account-x'"},
           {"", "has no owner to run as"}}) {
    StartParams q = Job(2, "true");
    q.owner = owner;
    const core::Status s = sup.Start(q).status();
    EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition) << owner;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
  }
  o.allow_root_jobs = true;
  Supervisor rooted(o);
  StartParams r = Job(3, "id -u");
  r.owner = "root";
  ASSERT_TRUE(rooted.Start(r).ok());
  EXPECT_EQ(Finish(rooted, 3).exit_code, 0);
  EXPECT_EQ(ReadFile(rooted.LogPath(3)), "0\n");
}

// The log here is one part's: a part of a job spanning servers started
// where its lead ran before begins the log afresh (the lead's lines went
// with it), a part started again goes on with its own lines, and the lead
// back here begins afresh too.
TEST_F(SupervisorTest, ALogHoldsOnePartsLines) {
  Supervisor sup(Options());
  const auto start = [&](const std::string& rank, const std::string& line) {
    StartParams p = Job(5, "echo " + line);
    if (!rank.empty()) {
      p.gang_env = {{"GANDIVA_NODE_RANK", rank}, {"GANDIVA_NNODES", "2"}};
    }
    ASSERT_TRUE(sup.Start(p).ok());
    EXPECT_EQ(Finish(sup, 5).exit_code, 0);
  };
  start("", "lead-alone");
  start("", "lead-again");
  EXPECT_EQ(ReadFile(sup.LogPath(5)), "lead-alone\nlead-again\n");
  start("1", "part-1");
  EXPECT_EQ(ReadFile(sup.LogPath(5)), "part-1\n");
  start("1", "part-1-again");
  EXPECT_EQ(ReadFile(sup.LogPath(5)), "part-1\npart-1-again\n");
  start("0", "lead-back");
  EXPECT_EQ(ReadFile(sup.LogPath(5)), "lead-back\n");
}

TEST_F(SupervisorTest, EnvironmentLogAndWorkdir) {
  Supervisor sup(Options());
  StartParams p =
      Job(7,
          "echo \"cvd=[${CUDA_VISIBLE_DEVICES-unset}] "
          "v=[$GANDIVA_VIRTUAL_GPUS] id=$GANDIVA_JOB_ID "
          "ckpt=$GANDIVA_CHECKPOINT_DIR resume=$GANDIVA_RESUME_FROM "
          "foo=$FOO pwd=$(pwd)\"; "
          "echo \"page=$GANDIVA_PROGRESS_FILE\"; echo to-stderr >&2");
  p.gpus = {1, 3};
  p.env = {{"FOO", "bar baz"}, {"GANDIVA_JOB_ID", "spoofed"}};
  p.workdir = dir_.path();
  p.resume_from = "/ckpt/here";
  auto r = sup.Start(p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->pid, 0);
  EXPECT_EQ(Finish(sup, 7).exit_code, 0);
  const std::string log = ReadFile(sup.LogPath(7));
  EXPECT_EQ(sup.LogPath(7), dir_.path() + "/jobs/7/log");
  EXPECT_NE(log.find("cvd=[] v=[1,3] id=7 ckpt=" + dir_.path() +
                     "/jobs/7/checkpoint resume=/ckpt/here foo=bar baz pwd=" +
                     dir_.path() + "\n"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("page=" + sup.PagePath(7) + "\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("to-stderr\n"), std::string::npos) << log;
  // A job that ended by itself keeps no checkpoint directory (its log
  // stays), and its page is removed.
  EXPECT_FALSE(std::filesystem::exists(sup.CheckpointDir(7)));
  EXPECT_TRUE(std::filesystem::exists(sup.LogPath(7)));
  EXPECT_FALSE(std::filesystem::exists(sup.PagePath(7)));

  // Real GPUs: CUDA_VISIBLE_DEVICES lists them; no GANDIVA_VIRTUAL_GPUS;
  // the default workdir is the job's directory; the log is appended to.
  SupervisorOptions o = Options();
  o.virtual_gpus = false;
  Supervisor real(o);
  StartParams q = Job(7,
                      "echo \"cvd=$CUDA_VISIBLE_DEVICES "
                      "v=${GANDIVA_VIRTUAL_GPUS-unset} "
                      "resume=${GANDIVA_RESUME_FROM-unset} pwd=$(pwd)\"");
  q.gpus = {2, 0};
  ASSERT_TRUE(real.Start(q).ok());
  EXPECT_EQ(Finish(real, 7).exit_code, 0);
  const std::string log2 = ReadFile(real.LogPath(7));
  EXPECT_NE(log2.find("cvd=2,0 v=unset resume=unset pwd=" + dir_.path() +
                      "/jobs/7\n"),
            std::string::npos)
      << log2;
  EXPECT_NE(log2.find("foo=bar baz"), std::string::npos);  // appended
}

TEST_F(SupervisorTest, BadRequestsAndWrongStates) {
  Supervisor sup(Options());
  StartParams p = Job(1, "true");
  p.workdir = dir_.path() + "/missing";
  auto r = sup.Start(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.workdir"), std::string::npos);
  EXPECT_NE(r.status().message().find("/missing"), std::string::npos);

  r = sup.Start(Job(0, "true"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("job_id"), std::string::npos);
  r = sup.Start(Job(2, ""));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("spec.command"), std::string::npos);
  p = Job(3, "true");
  p.gpus = {4};
  r = sup.Start(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gpus"), std::string::npos);
  p.gpus = {1, 1};
  EXPECT_EQ(sup.Start(p).status().code(), core::StatusCode::kInvalidArgument);

  EXPECT_EQ(sup.Suspend(99).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(sup.Resume(99).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(sup.Kill(99).code(), core::StatusCode::kNotFound);

  ASSERT_TRUE(sup.Start(Job(5, "exec sleep 1000")).ok());
  auto again = sup.Start(Job(5, "true"));
  EXPECT_EQ(again.status().code(), core::StatusCode::kAlreadyExists);
  EXPECT_EQ(sup.Resume(5).status().code(), core::StatusCode::kAlreadyExists);
  ASSERT_TRUE(sup.Suspend(5).ok());
  EXPECT_EQ(sup.Suspend(5).status().code(), core::StatusCode::kAlreadyExists);
  ASSERT_TRUE(sup.Kill(5).ok());
  EXPECT_EQ(Finish(sup, 5).exit_code, -SIGTERM);  // killed while suspended
  EXPECT_TRUE(sup.Kill(5).ok());                  // idempotent
  EXPECT_EQ(sup.Suspend(5).status().code(),
            core::StatusCode::kFailedPrecondition);
}

TEST_F(SupervisorTest, OwnSessionAndKillOfTheWholeGroup) {
  SupervisorOptions o = Options();
  o.kill_grace = 300ms;
  Supervisor sup(o);
  auto r = sup.Start(Job(1, "sleep 1000 & sleep 1000 & wait"));
  ASSERT_TRUE(r.ok());
  const pid_t pid = r->pid;
  EXPECT_EQ(getpgid(pid), pid);  // its own process group
  EXPECT_EQ(getsid(pid), pid);   // and its own session (CRIU needs its leader)
  ASSERT_TRUE(WaitUntil([&] { return ProcessGroupMembers(pid).size() == 3; }));
  ASSERT_TRUE(sup.Kill(1).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, -SIGTERM);
  EXPECT_TRUE(WaitUntil([&] { return ProcessGroupMembers(pid).empty(); }));

  // A job that ignores SIGTERM gets SIGKILL after the grace period.
  r = sup.Start(Job(2, "trap '' TERM; sleep 1000 & wait"));
  ASSERT_TRUE(r.ok());
  const pid_t pid2 = r->pid;
  ASSERT_TRUE(WaitUntil([&] { return ProcessGroupMembers(pid2).size() == 2; }));
  ASSERT_TRUE(sup.Kill(2).ok());
  EXPECT_EQ(Finish(sup, 2).exit_code, -SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return ProcessGroupMembers(pid2).empty(); }));
}

TEST_F(SupervisorTest, LeftoversOfTheGroupAreKilledAtExit) {
  Supervisor sup(Options());
  auto r = sup.Start(Job(1, "sleep 1000 & exit 0"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 0);
  EXPECT_TRUE(WaitUntil([&] { return ProcessGroupMembers(r->pid).empty(); }));
}

// An exit kept (not yet acknowledged) when the job starts here again is
// marked superseded: it is not the job's end.
TEST_F(SupervisorTest, AnExitKeptWhenTheJobStartsAgainIsSuperseded) {
  Supervisor sup(Options());
  ASSERT_TRUE(sup.Start(Job(1, "exit 76")).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 76);
  ASSERT_TRUE(sup.Start(Job(2, "exit 0")).ok());
  Finish(sup, 2);
  std::vector<ExitRecord> kept = sup.PendingExits();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_FALSE(kept[0].superseded);
  ASSERT_TRUE(sup.Start(Job(1, "sleep 1000")).ok());
  kept = sup.PendingExits();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].job_id, 1);
  EXPECT_TRUE(kept[0].superseded);
  EXPECT_FALSE(kept[1].superseded);  // another job's
  ASSERT_TRUE(sup.Kill(1).ok());
  kept = sup.PendingExits();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_FALSE(kept[2].superseded);  // the new process's own
}

// Only an exit caused by Kill() is marked killed: not a job's own exit,
// nor one at the agent's stop (KillAll).
TEST_F(SupervisorTest, AnExitCausedByKillIsMarkedKilled) {
  Supervisor sup(Options());
  ASSERT_TRUE(sup.Start(Job(1, "exit 3")).ok());
  Finish(sup, 1);
  ASSERT_TRUE(sup.Start(Job(2, "sleep 1000")).ok());
  ASSERT_TRUE(sup.Kill(2).ok());
  ASSERT_TRUE(sup.Start(Job(3, "sleep 1000")).ok());
  sup.KillAll();
  std::vector<ExitRecord> kept = sup.PendingExits();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].job_id, 1);
  EXPECT_FALSE(kept[0].killed);
  EXPECT_EQ(kept[1].job_id, 2);
  EXPECT_TRUE(kept[1].killed);
  EXPECT_EQ(kept[2].job_id, 3);
  EXPECT_FALSE(kept[2].killed);
}

// A job that fails after saving a periodic checkpoint (its note, mtime and
// all, in GANDIVA_CHECKPOINT_DIR) has that checkpoint held for its next run
// and its exit marked so; a note its file no longer matches, a success or a
// kill at the daemon's request keep nothing; a run from the beginning does
// not reuse an earlier run's note, a run from that checkpoint does.
TEST_F(SupervisorTest, AFailedJobsPeriodicCheckpointIsKeptForItsNextRun) {
  Supervisor sup(Options());
  const std::string save =
      "cd \"$GANDIVA_CHECKPOINT_DIR\" && echo w > ck.gdv && printf "
      "'minibatches 40\\npath ck.gdv\\nmtime_ns %s\\n' \"$(stat -c %.9Y "
      "ck.gdv | tr -d .)\" > " GANDIVA_SAVED_FILE " && ";
  const std::string every = dir_.path() + "/every";
  StartParams p =
      Job(1, save + "echo \"$GANDIVA_CHECKPOINT_EVERY_MINIBATCHES\" > " +
                 every + "; exit 3");
  p.checkpoint_every_minibatches = 40;
  ASSERT_TRUE(sup.Start(p).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 3);
  EXPECT_EQ(ReadFile(every), "40\n");
  std::vector<ExitRecord> exits = sup.PendingExits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].checkpoint_kept);
  EXPECT_EQ(exits[0].checkpoint_method, "periodic");
  EXPECT_EQ(exits[0].minibatches, 40);
  EXPECT_EQ(sup.HeldCheckpoint(1), sup.CheckpointDir(1));
  EXPECT_EQ(ReadFile(sup.CheckpointDir(1) + "/ck.gdv"), "w\n");
  sup.AckExits(exits[0].seq);

  // Resumed from it, failing before its next save: kept again.
  p = Job(1, "exit 5");
  p.resume_local = true;
  ASSERT_TRUE(sup.Start(p).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 5);
  exits = sup.PendingExits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].checkpoint_kept);
  EXPECT_EQ(exits[0].minibatches, 40);
  EXPECT_FALSE(sup.HeldCheckpoint(1).empty());
  sup.AckExits(exits[0].seq);

  // From the beginning: the earlier run's note is not this run's.
  ASSERT_TRUE(sup.Start(Job(1, "exit 6")).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 6);
  // A note its file no longer matches (a newer save whose note did not
  // follow), a success, a kill: nothing kept, the files gone.
  ASSERT_TRUE(
      sup.Start(Job(2, save + "sleep 0.05; echo x >> ck.gdv; exit 3")).ok());
  EXPECT_EQ(Finish(sup, 2).exit_code, 3);
  ASSERT_TRUE(sup.Start(Job(3, save + "exit 0")).ok());
  EXPECT_EQ(Finish(sup, 3).exit_code, 0);
  ASSERT_TRUE(sup.Start(Job(4, save + "sleep 1000")).ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        return std::filesystem::exists(sup.CheckpointDir(4) +
                                       "/" GANDIVA_SAVED_FILE);
      },
      10s));
  ASSERT_TRUE(sup.Kill(4).ok());
  ASSERT_TRUE(sup.WaitForExit(4, 30s));
  exits = sup.PendingExits();
  ASSERT_EQ(exits.size(), 4u);
  for (const ExitRecord& e : exits) {
    EXPECT_FALSE(e.checkpoint_kept) << "job " << e.job_id;
  }
  for (int64_t id : {1, 2, 3, 4}) {
    EXPECT_EQ(sup.HeldCheckpoint(id), "") << "job " << id;
    EXPECT_FALSE(std::filesystem::exists(sup.CheckpointDir(id) + "/ck.gdv"))
        << "job " << id;
  }
}

// The exits an agent stopping could not report are saved for the next: a
// failure whose periodic checkpoint is kept is one (its end, unless it has
// retries), and keeps that mark; one saved as the agent stopped is not.
TEST(ExitJournalTest, AFailureWithItsPeriodicCheckpointOutlivesTheAgent) {
  TempDir dir;
  const std::string path = dir.path() + "/unreported-exits";
  {
    ExitJournal journal(path);
    ExitRecord failed;
    failed.job_id = 1;
    failed.exit_code = -9;
    failed.minibatches = 40;
    failed.checkpoint_kept = true;
    failed.checkpoint_method = "periodic";
    ExitRecord stopped;
    stopped.job_id = 2;
    stopped.exit_code = -15;
    stopped.checkpoint_kept = true;
    stopped.checkpoint_method = "library";
    ExitRecord plain;
    plain.job_id = 3;
    plain.exit_code = 1;
    journal.Add(failed);
    journal.Add(stopped);
    journal.Add(plain);
    EXPECT_EQ(journal.SaveUnreported(), 2u);
  }
  ExitJournal next(path);
  EXPECT_EQ(next.RecoverUnreported(), 2u);
  const std::vector<ExitRecord> kept = next.Pending();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].job_id, 1);
  EXPECT_EQ(kept[0].exit_code, -9);
  EXPECT_EQ(kept[0].minibatches, 40);
  EXPECT_TRUE(kept[0].checkpoint_kept);
  EXPECT_EQ(kept[0].checkpoint_method, "periodic");
  EXPECT_EQ(kept[1].job_id, 3);
  EXPECT_FALSE(kept[1].checkpoint_kept);
}

// Each exit kept is written to the records directory until acknowledged:
// a journal that ends without SaveUnreported (its agent killed) leaves the
// next those it would have saved, in order, until they are acknowledged;
// one superseded, killed, or saved at the agent's stop goes at once; one
// SaveUnreported wrote to its file is not taken up twice.
TEST(ExitJournalTest, AnExitNotReportedOutlivesAJournalThatDidNotSaveIt) {
  TempDir dir;
  const std::string path = dir.path() + "/unreported-exits";
  const std::string records = dir.path() + "/exits";
  auto exit_of = [](int64_t job, int code) {
    ExitRecord e;
    e.job_id = job;
    e.exit_code = code;
    e.minibatches = 10 * job;
    return e;
  };
  {
    ExitJournal journal(path, records);
    journal.Add(exit_of(1, 0));
    ExitRecord periodic = exit_of(2, -9);
    periodic.checkpoint_kept = true;
    periodic.checkpoint_method = "periodic";
    journal.Add(periodic);
    journal.Add(exit_of(3, 1));
    journal.Supersede(3);
    ExitRecord killed = exit_of(4, -15);
    killed.killed = true;
    journal.Add(killed);
    journal.Add(exit_of(5, 75));
    journal.MarkCheckpointKept(5, "library");
    journal.Add(exit_of(6, 3));
    journal.Ack(journal.Pending().back().seq);  // all reported: none left
    journal.Add(exit_of(7, 0));
    journal.Add(periodic);
    // Killed here: no SaveUnreported.
  }
  std::vector<ExitRecord> kept;
  {
    ExitJournal next(path, records);
    EXPECT_EQ(next.RecoverUnreported(), 2u);
    kept = next.Pending();
    ASSERT_EQ(kept.size(), 2u);
    EXPECT_EQ(kept[0].job_id, 7);
    EXPECT_EQ(kept[0].exit_code, 0);
    EXPECT_EQ(kept[0].minibatches, 70);
    EXPECT_EQ(kept[1].job_id, 2);
    EXPECT_TRUE(kept[1].checkpoint_kept);
    EXPECT_EQ(kept[1].checkpoint_method, "periodic");
    // Not acknowledged: killed again, the next one has them still.
  }
  {
    ExitJournal next(path, records);
    EXPECT_EQ(next.RecoverUnreported(), 2u);
    next.Ack(next.Pending()[0].seq);
    // Stopping: what is left goes to the file, and only there.
    EXPECT_EQ(next.SaveUnreported(), 1u);
  }
  ExitJournal last(path, records);
  EXPECT_EQ(last.RecoverUnreported(), 1u);
  ASSERT_EQ(last.Pending().size(), 1u);
  EXPECT_EQ(last.Pending()[0].job_id, 2);
  last.Ack(last.Pending()[0].seq);
  ExitJournal empty(path, records);
  EXPECT_EQ(empty.RecoverUnreported(), 0u);
}

// A job that ends while its agent runs, the agent killed before it reported
// the exit: the next agent on the work dir reports it (it would otherwise
// find the job neither running nor ended, and the daemon start it again).
TEST_F(SupervisorTest,
       AnExitNotReportedWhenTheAgentIsKilledIsReportedByTheNext) {
  {
    Supervisor sup(Options());
    ASSERT_TRUE(sup.Start(Job(1, "exit 3")).ok());
    EXPECT_EQ(Finish(sup, 1).exit_code, 3);
    ASSERT_TRUE(sup.Start(Job(2, "true")).ok());
    EXPECT_EQ(Finish(sup, 2).exit_code, 0);
    sup.AckExits(sup.PendingExits()[0].seq);  // job 1's was reported
  }
  Supervisor next(Options());
  EXPECT_TRUE(next.TakeBackLeftovers().ended.empty());
  EXPECT_EQ(next.RecoverUnreportedExits(), 1u);
  const std::vector<ExitRecord> exits = next.PendingExits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].job_id, 2);
  EXPECT_EQ(exits[0].exit_code, 0);
}

// /proc/<pid>/stat's parent PID, or 0 when there is no such process.
pid_t ParentOf(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  char state = 0;
  int ppid = 0;
  if (std::sscanf(stat.c_str() + paren + 1, " %c %d", &state, &ppid) != 2) {
    return 0;
  }
  return ppid;
}

// A process of the job whose parent ended becomes the supervisor's child
// (not an init's that may never reap it), and is reaped when it dies, while
// the job runs on or with the job: no zombie keeps its PID.
TEST_F(SupervisorTest, OrphansOfAJobAreReaped) {
  Supervisor sup(Options());
  const std::string dir = dir_.path();
  auto r = sup.Start(Job(1, "sh -c 'sleep 1000 & echo $! > " + dir +
                                "/long.pid; sleep 0.3 & echo $! > " + dir +
                                "/short.pid'; " + "sleep 1000"));
  ASSERT_TRUE(r.ok());
  auto pid_in = [&](const char* name) {
    return static_cast<pid_t>(std::atol(ReadFile(dir + "/" + name).c_str()));
  };
  pid_t lasting = 0;
  ASSERT_TRUE(WaitUntil([&] {
    lasting = pid_in("long.pid");
    return lasting > 0 && ParentOf(lasting) == getpid();
  })) << "pid "
      << lasting << ", parent " << ParentOf(lasting);
  const pid_t brief = pid_in("short.pid");
  ASSERT_GT(brief, 0);
  EXPECT_TRUE(WaitUntil([&] { return ParentOf(brief) == 0; }))
      << "pid " << brief
      << " is left: " << ReadFile("/proc/" + std::to_string(brief) + "/stat");
  EXPECT_EQ(sup.Job(1)->state, RunState::kRunning);
  ASSERT_TRUE(sup.Kill(1).ok());
  Finish(sup, 1);
  EXPECT_TRUE(WaitUntil([&] { return ParentOf(lasting) == 0; }))
      << "pid " << lasting
      << " is left: " << ReadFile("/proc/" + std::to_string(lasting) + "/stat");
}

TEST_F(SupervisorTest, CpuPinningOfVirtualGpuJobs) {
  SupervisorOptions o = Options();
  o.cpus_per_gpu = 1;
  Supervisor sup(o);
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c) {
    if (CPU_ISSET(c, &set)) first = c;
  }
  StartParams p = Job(1, "grep Cpus_allowed_list /proc/self/status");
  p.gpus = {0};
  ASSERT_TRUE(sup.Start(p).ok());
  EXPECT_EQ(Finish(sup, 1).exit_code, 0);
  const std::string log = ReadFile(sup.LogPath(1));
  EXPECT_NE(log.find(":\t" + std::to_string(first) + "\n"), std::string::npos)
      << log;
  // The agent's own thread got its affinity back.
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&set, &after));
}

TEST_F(SupervisorTest, WaitsForTheLibraryOfAJustStartedJob) {
  Supervisor sup(Options());
  // The job announces the library only after a while (as a Python job does
  // once it has imported its framework); a suspend meanwhile waits for it.
  auto r = sup.Start(Job(
      1, std::string("sleep 0.3; exec ") + GANDIVA_AGENT_TEST_JOB + " 100000"));
  ASSERT_TRUE(r.ok());
  auto s = sup.Suspend(1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->at_boundary);
  ASSERT_TRUE(sup.Resume(1).ok());
  ASSERT_TRUE(sup.Kill(1).ok());
}

TEST_F(SupervisorTest, SuspendAndResumeWithoutTheLibrary) {
  // No grace for a library that will never announce itself: stop at once.
  SupervisorOptions o = Options();
  o.library_start_grace = std::chrono::milliseconds(0);
  Supervisor sup(o);
  // A shell loop with a child per iteration: SIGSTOP of the whole group.
  auto r = sup.Start(
      Job(1,
          "i=0; while [ $i -lt 100 ]; do i=$((i+1)); echo $i; sleep 0.01; "
          "done"));
  ASSERT_TRUE(r.ok());
  const std::string log = sup.LogPath(1);
  for (int cycle = 0; cycle < 3; ++cycle) {
    auto s = sup.Suspend(1);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_FALSE(s->at_boundary);
    EXPECT_TRUE(ProcessGroupStopped(r->pid));
    EXPECT_EQ(sup.Job(1)->state, RunState::kSuspended);
    EXPECT_FALSE(sup.Job(1)->uses_library);
    const size_t size = ReadFile(log).size();
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(ReadFile(log).size(), size);  // nothing ran while stopped
    auto res = sup.Resume(1);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    EXPECT_EQ(sup.Job(1)->state, RunState::kRunning);
    std::printf("[ no library ] suspend %lld us, resume %lld us\n",
                static_cast<long long>(s->took_us),
                static_cast<long long>(res->took_us));
  }
  EXPECT_EQ(Finish(sup, 1).exit_code, 0);
  EXPECT_NE(ReadFile(log).find("\n100\n"), std::string::npos);
}

// The library job stops at a boundary, its worker is stopped too, and it
// ends with exactly its N mini-batches after suspend/resume cycles.
void SuspendResumeCycles(Supervisor& sup, int64_t id, int cycles,
                         uint64_t total, const char* label) {
  ASSERT_TRUE(WaitUntil([&] {
    auto v = sup.Job(id);
    return v.ok() && (v->state == RunState::kExited ||
                      (v->uses_library && v->minibatches >= 2));
  }));
  ASSERT_EQ(sup.Job(id)->state, RunState::kRunning) << "ended too soon";
  for (int cycle = 0; cycle < cycles; ++cycle) {
    auto s = sup.Suspend(id);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->at_boundary);
    JobView v = *sup.Job(id);
    EXPECT_TRUE(v.uses_library);
    EXPECT_EQ(v.state, RunState::kSuspended);
    EXPECT_TRUE(client::ProcessIsStopped(v.library_pid));
    EXPECT_TRUE(ProcessGroupStopped(v.pid));
    EXPECT_LT(v.minibatches, total);
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(sup.Job(id)->minibatches, v.minibatches);  // stopped for real
    auto res = sup.Resume(id);
    ASSERT_TRUE(res.ok()) << res.status().ToString();
    std::printf("[ %s ] suspend %lld us (at boundary: %d), resume %lld us\n",
                label, static_cast<long long>(s->took_us), s->at_boundary,
                static_cast<long long>(res->took_us));
  }
}

TEST_F(SupervisorTest, SuspendAndResumeWithTheLibrary) {
  Supervisor sup(Options());
  constexpr int kSteps = 150;
  auto r = sup.Start(Job(1, std::string(GANDIVA_AGENT_TEST_JOB) + " " +
                                std::to_string(kSteps) + " 10 --worker"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  SuspendResumeCycles(sup, 1, 3, kSteps, "C++ library job");
  const JobView end = Finish(sup, 1);
  EXPECT_EQ(end.exit_code, 0) << ReadFile(sup.LogPath(1));
  std::vector<ExitRecord> exits = sup.PendingExits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].minibatches, kSteps);
  EXPECT_NE(ReadFile(sup.LogPath(1)).find("minibatches 150 resumed 3\n"),
            std::string::npos)
      << ReadFile(sup.LogPath(1));
}

TEST_F(SupervisorTest, SuspendAndResumeAPythonJob) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    GTEST_SKIP() << "no /usr/bin/python3";
  }
  Supervisor sup(Options());
  constexpr int kSteps = 120;
  StartParams p =
      Job(1,
          "exec /usr/bin/python3 -c 'import time, gandiva\n"
          "gandiva.init()\n"
          "resumed = 0\n"
          "for i in range(" +
              std::to_string(kSteps) +
              "):\n"
              "    time.sleep(0.01)\n"
              "    resumed += gandiva.step() == gandiva.STEP_RESUMED\n"
              "print(\"py minibatches\", gandiva.minibatches(), \"resumed\", "
              "resumed)\n'");
  p.env = {{"PYTHONPATH", GANDIVA_PYTHON_DIR},
           {"GANDIVA_CLIENT_LIB", GANDIVA_CLIENT_LIB_PATH},
           {"PYTHONDONTWRITEBYTECODE", "1"}};
  ASSERT_TRUE(sup.Start(p).ok());
  SuspendResumeCycles(sup, 1, 2, kSteps, "Python library job");
  const JobView end = Finish(sup, 1);
  const std::string log = ReadFile(sup.LogPath(1));
  EXPECT_EQ(end.exit_code, 0) << log;
  ASSERT_EQ(sup.PendingExits().size(), 1u);
  EXPECT_EQ(sup.PendingExits()[0].minibatches, kSteps);
  EXPECT_NE(log.find("py minibatches 120 resumed 2\n"), std::string::npos)
      << log;
}

// An agent killed (or crashed) leaves its jobs running: they lead sessions
// of their own. The next agent on the same work dir kills them before it
// starts anything, and only them.
TEST_F(SupervisorTest, ProcessesAnEarlierRunLeftAreKilled) {
  SupervisorOptions o = Options();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {  // the earlier run, which dies with its job running
    close(fds[0]);
    pid_t pid = -1;
    {
      auto* sup = new Supervisor(o);  // never destroyed: as after SIGKILL
      auto r = sup->Start(Job(7, "sleep 1000 & wait"));
      if (r.ok()) pid = r->pid;
      while (r.ok() && ProcessGroupMembers(pid).size() < 2) usleep(1000);
    }
    (void)!write(fds[1], &pid, sizeof pid);
    _exit(0);
  }
  close(fds[1]);
  pid_t job = -1;
  ASSERT_EQ(read(fds[0], &job, sizeof job), static_cast<ssize_t>(sizeof job));
  close(fds[0]);
  ASSERT_EQ(waitpid(agent, nullptr, 0), agent);
  ASSERT_GT(job, 0);
  ASSERT_EQ(ProcessGroupMembers(job).size(), 2u);  // it outlived its agent

  // A record naming a pid that now belongs to another process (a reused
  // pid: its start time differs) is dropped, the process left alone.
  const pid_t other = fork();
  if (other == 0) {
    setsid();
    execl("/bin/sleep", "sleep", "1000", nullptr);
    _exit(127);
  }
  const std::string stale =
      dir_.path() + "/jobs/8/process." + std::to_string(other);
  std::filesystem::create_directories(dir_.path() + "/jobs/8");
  { std::ofstream(stale) << other << " 1 1 1 /nonexistent-page\n"; }

  Supervisor next(o);
  EXPECT_EQ(next.KillLeftovers(), std::vector<int64_t>{7});
  EXPECT_TRUE(WaitUntil([&] { return ProcessGroupMembers(job).empty(); }));
  EXPECT_EQ(kill(other, 0), 0);
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/jobs/7/process." +
                                       std::to_string(job)));
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  // Nothing left to kill the next time.
  EXPECT_TRUE(next.KillLeftovers().empty());
}

// An agent killed leaves its jobs running under their shims. The next
// agent on the same work dir takes them back: a library job trains on
// without losing a mini-batch, and is suspended, resumed and reaped as one
// it started; a job that ended while no agent ran has its exit recorded
// from the shim's exit file; a job started without the shim is killed.
TEST_F(SupervisorTest, JobsAnEarlierRunLeftAreTakenBack) {
  SupervisorOptions o = Options();
  ASSERT_FALSE(Supervisor(o).job_shim().empty()) << "gandiva-job-shim built";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {  // the earlier run, which dies with its jobs running
    close(fds[0]);
    pid_t pids[3] = {-1, -1, -1};
    {
      auto* sup = new Supervisor(o);  // never destroyed: as after SIGKILL
      auto a = sup->Start(
          Job(7, std::string(GANDIVA_AGENT_TEST_JOB) + " 1000000 5 --state"));
      auto b = sup->Start(Job(8, "sleep 0.5; exit 3"));
      SupervisorOptions bare = o;
      bare.job_shim = "none";
      bare.reap_orphans = false;
      auto* old = new Supervisor(bare);
      auto c = old->Start(Job(9, "sleep 1000"));
      if (a.ok()) pids[0] = a->pid;
      if (b.ok()) pids[1] = b->pid;
      if (c.ok()) pids[2] = c->pid;
      // Job 7 has trained a while.
      while (a.ok() && sup->Job(7).ok() && sup->Job(7)->minibatches < 20) {
        usleep(1000);
      }
    }
    (void)!write(fds[1], pids, sizeof pids);
    _exit(0);
  }
  close(fds[1]);
  pid_t pids[3] = {-1, -1, -1};
  ASSERT_EQ(read(fds[0], pids, sizeof pids), static_cast<ssize_t>(sizeof pids));
  close(fds[0]);
  ASSERT_EQ(waitpid(agent, nullptr, 0), agent);
  for (pid_t p : pids) ASSERT_GT(p, 0);
  // Job 8 ends while no agent runs: its shim writes the exit file, then
  // ends too.
  auto exit_file_of_8 = [&] {
    for (const auto& f :
         std::filesystem::directory_iterator(dir_.path() + "/jobs/8")) {
      if (f.path().filename().string().rfind("exit.", 0) == 0 &&
          f.path().extension() != ".tmp") {
        return true;
      }
    }
    return false;
  };
  ASSERT_TRUE(WaitUntil(exit_file_of_8, 10s));
  std::this_thread::sleep_for(300ms);

  Supervisor next(o);
  const Supervisor::TakenBack back = next.TakeBackLeftovers();
  EXPECT_EQ(back.adopted, std::vector<int64_t>{7});
  EXPECT_EQ(back.ended, std::vector<int64_t>{8});
  EXPECT_EQ(back.killed, std::vector<int64_t>{9});
  EXPECT_TRUE(WaitUntil([&] { return ProcessGroupMembers(pids[2]).empty(); }));

  // Job 8's exit, from the shim's file.
  std::vector<ExitRecord> exits = next.PendingExits();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].job_id, 8);
  EXPECT_EQ(exits[0].exit_code, 3);

  // Job 7 runs on in its own process, its count going on from where it was.
  auto v = next.Job(7);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->pid, pids[0]);
  EXPECT_EQ(v->state, RunState::kRunning);
  EXPECT_TRUE(v->uses_library);
  const uint64_t before = v->minibatches;
  EXPECT_GE(before, 20u);
  ASSERT_TRUE(WaitUntil([&] { return next.Job(7)->minibatches > before; }));
  auto suspended = next.Suspend(7);
  ASSERT_TRUE(suspended.ok()) << suspended.status().message();
  EXPECT_TRUE(suspended->at_boundary);
  ASSERT_TRUE(next.Resume(7).ok());
  // A checkpoint, as for a migration: the library saves and exits.
  auto saved = next.Checkpoint(7);
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  EXPECT_EQ(saved->method, "library");
  EXPECT_GT(saved->minibatches, static_cast<int64_t>(before));
  const JobView done = Finish(next, 7);
  EXPECT_EQ(done.exit_code, GANDIVA_EXIT_MIGRATE);
  EXPECT_FALSE(next.HeldCheckpoint(7).empty());
  EXPECT_EQ(ReadFile(next.HeldCheckpoint(7) + "/state"),
            "minibatches " + std::to_string(saved->minibatches) + "\n");
  // Nothing left behind: no record, no exit file, nothing to take back.
  for (const auto& f :
       std::filesystem::directory_iterator(dir_.path() + "/jobs/7")) {
    const std::string name = f.path().filename().string();
    EXPECT_TRUE(name.rfind("process.", 0) != 0 && name.rfind("exit.", 0) != 0)
        << name;
  }
  const Supervisor::TakenBack again = next.TakeBackLeftovers();
  EXPECT_TRUE(again.adopted.empty() && again.ended.empty() &&
              again.killed.empty());
}

// A job taken back ends by itself: its exit code comes from the shim.
TEST_F(SupervisorTest, AJobTakenBackEndsWithItsOwnExitCode) {
  SupervisorOptions o = Options();
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    auto* sup = new Supervisor(o);  // never destroyed: as after SIGKILL
    _exit(sup->Start(Job(5, "sleep 3; exit 4")).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(agent, &status, 0), agent);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  Supervisor next(o);
  EXPECT_EQ(next.TakeBackLeftovers().adopted, std::vector<int64_t>{5});
  EXPECT_EQ(Finish(next, 5).exit_code, 4);
  ASSERT_EQ(next.PendingExits().size(), 1u);
  EXPECT_EQ(next.PendingExits()[0].exit_code, 4);
}

// The record lives exactly as long as the job's process.
TEST_F(SupervisorTest, AJobsProcessRecordGoesWithIt) {
  Supervisor sup(Options());
  auto r = sup.Start(Job(3, "sleep 1000"));
  ASSERT_TRUE(r.ok());
  const std::string record =
      dir_.path() + "/jobs/3/process." + std::to_string(r->pid);
  EXPECT_TRUE(std::filesystem::exists(record));
  ASSERT_TRUE(sup.Kill(3).ok());
  Finish(sup, 3);
  EXPECT_FALSE(std::filesystem::exists(record));
  // Its own running jobs are never leftovers.
  auto again = sup.Start(Job(4, "sleep 1000"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(sup.KillLeftovers().empty());
  EXPECT_FALSE(ProcessGroupMembers(again->pid).empty());
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/jobs/4/process." +
                                      std::to_string(again->pid)));
}

// A held checkpoint is recorded on disk until it is dropped, so that the
// next supervisor on the same checkpoint root holds it again; a record
// whose files are gone is removed instead.
TEST_F(SupervisorTest, HeldCheckpointsOutliveTheSupervisor) {
  namespace fs = std::filesystem;
  SupervisorOptions o = Options();
  o.checkpoint_root = dir_.path() + "/ckpt";
  std::string five, six;
  {
    Supervisor sup(o);
    for (int64_t id : {5, 6}) {
      const std::string dir = sup.CheckpointDir(id);
      fs::create_directories(dir);
      std::ofstream(dir + "/state") << "minibatches " << id;
      sup.HoldCheckpoint(id, dir);
    }
    five = sup.CheckpointDir(5);
    six = sup.CheckpointDir(6);
    EXPECT_EQ(sup.HeldCheckpoints(), (std::vector<int64_t>{5, 6}));
  }
  // Job 6's files went (a ramdisk emptied by a reboot); its record stays.
  fs::remove_all(six);
  const std::string record6 = o.checkpoint_root + "/jobs/6/held-checkpoint";
  ASSERT_TRUE(fs::exists(record6));
  {
    Supervisor next(o);
    EXPECT_TRUE(next.HeldCheckpoints().empty());  // only once asked
    EXPECT_EQ(next.RecoverCheckpoints(), std::vector<int64_t>{5});
    EXPECT_EQ(next.HeldCheckpoint(5), five);
    EXPECT_EQ(next.HeldCheckpoint(6), "");
    EXPECT_FALSE(fs::exists(record6));
    // Dropped: gone for good, record and all.
    EXPECT_TRUE(next.DropCheckpoint(5));
    EXPECT_FALSE(fs::exists(o.checkpoint_root + "/jobs/5"));
  }
  Supervisor last(o);
  EXPECT_TRUE(last.RecoverCheckpoints().empty());
}

// A held checkpoint records the cluster it was saved in (the one the agent
// was registered with), which the next supervisor reads back; registering
// with another cluster drops it (it is another job of that id there). One
// saved before a cluster was known, or by an agent from before clusters
// (a record of one line), is never taken for another cluster's.
TEST_F(SupervisorTest, HeldCheckpointsOfAnotherClusterAreDropped) {
  namespace fs = std::filesystem;
  SupervisorOptions o = Options();
  o.checkpoint_root = dir_.path() + "/ckpt";
  auto hold = [](Supervisor& sup, int64_t id) {
    const std::string dir = sup.CheckpointDir(id);
    fs::create_directories(dir);
    std::ofstream(dir + "/state") << "minibatches " << id;
    sup.HoldCheckpoint(id, dir);
  };
  {
    Supervisor sup(o);
    hold(sup, 1);  // no cluster yet
    EXPECT_TRUE(sup.SetCluster("c1").empty());
    hold(sup, 2);
    hold(sup, 3);
    EXPECT_EQ(sup.HeldCheckpointCluster(1), "");
    EXPECT_EQ(sup.HeldCheckpointCluster(2), "c1");
  }
  // Job 3's record as an agent from before clusters wrote it.
  std::ofstream(o.checkpoint_root + "/jobs/3/held-checkpoint")
      << o.checkpoint_root + "/jobs/3/checkpoint\n";
  Supervisor next(o);
  EXPECT_EQ(next.RecoverCheckpoints(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(next.HeldCheckpointCluster(2), "c1");
  EXPECT_EQ(next.HeldCheckpointCluster(3), "");
  EXPECT_TRUE(next.SetCluster("c1").empty());  // the same cluster again
  EXPECT_EQ(next.SetCluster("c2"), std::vector<int64_t>{2});
  EXPECT_EQ(next.HeldCheckpoints(), (std::vector<int64_t>{1, 3}));
  EXPECT_FALSE(fs::exists(o.checkpoint_root + "/jobs/2"));
  hold(next, 4);
  EXPECT_EQ(next.HeldCheckpointCluster(4), "c2");
}

// A held checkpoint records when its job was submitted, which the next
// supervisor reads back (0 from a record of an agent from before it); a
// start from it of another job of that id (submitted at another time) is
// refused, naming both; a job's view says when it was submitted.
TEST_F(SupervisorTest, AHeldCheckpointIsOnlyResumedByTheJobThatSavedIt) {
  namespace fs = std::filesystem;
  SupervisorOptions o = Options();
  o.checkpoint_root = dir_.path() + "/ckpt";
  for (int64_t id : {7, 8}) {
    fs::create_directories(o.checkpoint_root + "/jobs/" + std::to_string(id) +
                           "/checkpoint");
    std::ofstream(o.checkpoint_root + "/jobs/" + std::to_string(id) +
                  "/checkpoint/state")
        << "minibatches 3";
  }
  {
    Supervisor sup(o);
    sup.HoldCheckpoint(7, sup.CheckpointDir(7), 111);
    EXPECT_EQ(sup.HeldCheckpointSubmitted(7), 111);
    sup.HoldCheckpoint(7, sup.CheckpointDir(7));  // as it was
    EXPECT_EQ(sup.HeldCheckpointSubmitted(7), 111);
  }
  // Job 8's record as an agent from before submission times wrote it.
  std::ofstream(o.checkpoint_root + "/jobs/8/held-checkpoint")
      << o.checkpoint_root + "/jobs/8/checkpoint\nc1\n";
  Supervisor sup(o);
  EXPECT_EQ(sup.RecoverCheckpoints(), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(sup.HeldCheckpointSubmitted(7), 111);
  EXPECT_EQ(sup.HeldCheckpointSubmitted(8), 0);

  StartParams other = Job(7, "exec sleep 1000");
  other.resume_local = true;
  other.submitted_us = 222;
  auto refused = sup.Start(other);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "job 7: the checkpoint held here was saved by another job of that "
            "id (submitted at 111 us, this one at 222 us)");
  StartParams same = other;
  same.submitted_us = 111;
  ASSERT_TRUE(sup.Start(same).ok());
  EXPECT_EQ(sup.Job(7)->submitted_us, 111);
  StartParams unknown = Job(8, "exec sleep 1000");
  unknown.resume_local = true;
  unknown.submitted_us = 333;  // the checkpoint does not say: taken
  ASSERT_TRUE(sup.Start(unknown).ok());
  EXPECT_EQ(sup.Job(8)->submitted_us, 333);
  sup.KillAll();
}

// The spec a job was started with is kept with its process (JobView) and
// with a checkpoint held of it, on disk too: the next supervisor reads it
// back; a held checkpoint keeps it when held again, and it goes with the
// checkpoint when dropped.
TEST_F(SupervisorTest, AJobsSpecIsKeptWithItsProcessAndItsHeldCheckpoint) {
  namespace fs = std::filesystem;
  SupervisorOptions o = Options();
  o.checkpoint_root = dir_.path() + "/ckpt";
  const std::string spec("\x0a\x04name\x00 bytes", 13);
  {
    Supervisor sup(o);
    StartParams p = Job(4, "exec sleep 1000");
    p.spec = spec;
    ASSERT_TRUE(sup.Start(p).ok());
    EXPECT_EQ(sup.Job(4)->spec, spec);
    sup.KillAll();
    // Exited to be moved (75): its checkpoint stays, with its spec.
    p.command = "exit 75";
    ASSERT_TRUE(sup.Start(p).ok());
    ASSERT_TRUE(sup.WaitForExit(4, std::chrono::seconds(10)));
    fs::create_directories(sup.CheckpointDir(4));
    std::ofstream(sup.CheckpointDir(4) + "/state") << "x";
    sup.HoldCheckpoint(4, sup.CheckpointDir(4), 5);  // the process's spec
    EXPECT_EQ(sup.HeldCheckpointSpec(4), spec);
  }
  Supervisor sup(o);
  EXPECT_EQ(sup.RecoverCheckpoints(), std::vector<int64_t>{4});
  EXPECT_EQ(sup.HeldCheckpointSpec(4), spec);
  sup.HoldCheckpoint(4, sup.CheckpointDir(4));  // as it was
  EXPECT_EQ(sup.HeldCheckpointSpec(4), spec);
  EXPECT_TRUE(fs::exists(o.checkpoint_root + "/jobs/4/held-spec"));
  EXPECT_TRUE(sup.DropCheckpoint(4));
  EXPECT_EQ(sup.HeldCheckpointSpec(4), "");
  EXPECT_FALSE(fs::exists(o.checkpoint_root + "/jobs/4/held-spec"));
  EXPECT_EQ(sup.HeldCheckpointSpec(9), "");  // none held
}

// Before an agent stops: a restartable job is stopped with SIGTERM (it
// saves its own checkpoint) and its exit marked checkpoint_kept; a job
// without the library that is not restartable is left as it was, with the
// reason; a warm start is not asked. Those two are then killed as the
// agent stops (KillAll(agent_stopping)), their exits marked so.
TEST_F(SupervisorTest, CheckpointForStopSavesTheJobsThatCan) {
  SupervisorOptions o = Options();
  o.checkpoint_root = dir_.path() + "/ckpt";
  o.library_start_grace = 200ms;
  Supervisor sup(o);
  StartParams restartable =
      Job(1,
          "trap 'echo saved > \"$GANDIVA_CHECKPOINT_DIR/own\"; exit 0' TERM; "
          "while :; do sleep 0.05; done");
  restartable.restartable = true;
  ASSERT_TRUE(sup.Start(restartable).ok());
  ASSERT_TRUE(sup.Start(Job(2, "exec sleep 1000")).ok());
  StartParams warm = Job(3, "exec sleep 1000");
  warm.warm = true;
  ASSERT_TRUE(sup.Start(warm).ok());
  std::this_thread::sleep_for(300ms);  // the shell sets its trap

  std::vector<std::string> failures;
  const std::vector<int64_t> saved = sup.CheckpointForStop(10s, &failures);
  EXPECT_EQ(saved, std::vector<int64_t>{1});
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].find("job 2"), std::string::npos) << failures[0];
  EXPECT_NE(failures[0].find("not declared restartable"), std::string::npos)
      << failures[0];
  EXPECT_EQ(ReadFile(sup.CheckpointDir(1) + "/own"), "saved\n");
  EXPECT_EQ(sup.HeldCheckpoint(1), sup.CheckpointDir(1));
  EXPECT_TRUE(
      std::filesystem::exists(o.checkpoint_root + "/jobs/1/held-checkpoint"));
  // Jobs 2 and 3 run on, for KillAll.
  EXPECT_EQ(sup.Job(2)->state, RunState::kRunning);
  EXPECT_EQ(sup.Job(3)->state, RunState::kRunning);
  sup.KillAll(/*agent_stopping=*/true);
  std::map<int64_t, std::pair<bool, bool>> flags;  // kept, agent_stopping
  for (const ExitRecord& e : sup.PendingExits()) {
    flags[e.job_id] = {e.checkpoint_kept, e.agent_stopping};
  }
  EXPECT_EQ(flags,
            (std::map<int64_t, std::pair<bool, bool>>{
                {1, {true, false}}, {2, {false, true}}, {3, {false, true}}}));
}

// A job moved here (a warm start) that has restored its checkpoint trains
// as any job: a stop saves it too, from where it has got to, rather than
// killing it (and `gandiva down` after `gandiva migrate` loses nothing).
TEST_F(SupervisorTest, CheckpointForStopSavesAJobMovedHereOnceItRestored) {
  SupervisorOptions o = Options();
  o.checkpoint_root = dir_.path() + "/ckpt";
  Supervisor sup(o);
  StartParams warm =
      Job(5, std::string(GANDIVA_AGENT_TEST_JOB) + " 1000000 5 --state");
  warm.warm = true;
  ASSERT_TRUE(sup.Start(warm).ok());
  auto restored = sup.AwaitRestore(5, /*await_first_minibatch=*/true, 30s, [&] {
    const std::string in = sup.IncomingDir(5);
    std::ofstream(in + "/state") << "minibatches 40\n";
    std::ofstream(in + "/" GANDIVA_RESUME_READY_FILE);
    return core::Status::Ok();
  });
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  ASSERT_TRUE(WaitUntil([&] { return sup.Job(5)->minibatches > 45; }));

  std::vector<std::string> failures;
  EXPECT_EQ(sup.CheckpointForStop(10s, &failures), std::vector<int64_t>{5});
  EXPECT_TRUE(failures.empty()) << failures[0];
  const JobView done = Finish(sup, 5);
  EXPECT_EQ(done.exit_code, GANDIVA_EXIT_MIGRATE);
  unsigned long long n = 0;
  ASSERT_EQ(std::sscanf(ReadFile(sup.HeldCheckpoint(5) + "/state").c_str(),
                        "minibatches %llu", &n),
            1);
  EXPECT_GT(n, 45u);
  ASSERT_EQ(sup.PendingExits().size(), 1u);
  EXPECT_TRUE(sup.PendingExits()[0].checkpoint_kept);
}

// Where CRIU works, a stop with it saves a job that has neither the
// library nor checkpoints of its own too: dumped (its exit marked
// checkpoint_kept), held for the next agent on the same checkpoint root,
// whose Start(resume_local) restores it from the dump, with its PID.
TEST_F(SupervisorTest, CheckpointForStopWithCriuDumpsAJobTheNextAgentRestores) {
  SupervisorOptions o = Options();
  o.checkpoint_root = dir_.path() + "/ckpt";
  o.library_start_grace = 200ms;
  Capabilities caps;
  ProbeCriu(&caps, 3s);
  if (!caps.criu) {
    GTEST_SKIP() << "CRIU is not usable here: " << caps.criu_detail;
  }
  pid_t pid = 0;
  {
    Supervisor sup(o);
    sup.SetCapabilities(caps);
    auto r = sup.Start(Job(2, "exec sleep 1000"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    pid = r->pid;
    std::vector<std::string> failures;
    const std::vector<int64_t> saved =
        sup.CheckpointForStop(10s, &failures, {}, /*with_criu=*/true);
    EXPECT_EQ(saved, std::vector<int64_t>{2});
    EXPECT_TRUE(failures.empty()) << failures[0];
    EXPECT_TRUE(
        std::filesystem::exists(o.checkpoint_root + "/jobs/2/held-checkpoint"));
    bool kept = false;
    for (const ExitRecord& e : sup.PendingExits()) {
      kept = kept || (e.job_id == 2 && e.checkpoint_kept);
    }
    EXPECT_TRUE(kept);
    EXPECT_TRUE(ProcessGroupMembers(pid).empty());  // the dump ended it
    sup.KillAll(/*agent_stopping=*/true);
  }
  Supervisor next(o);
  next.SetCapabilities(caps);
  EXPECT_EQ(next.RecoverCheckpoints(), std::vector<int64_t>{2});
  StartParams again = Job(2, "exec sleep 1000");
  again.resume_local = true;
  auto started = next.Start(again);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->pid, pid);  // restored, not started afresh
  EXPECT_EQ(next.Job(2)->state, RunState::kRunning);
}

TEST_F(SupervisorTest, DestructionKillsLiveJobs) {
  pid_t pid = 0;
  {
    Supervisor sup(Options());
    auto r = sup.Start(Job(1, "sleep 1000 & wait"));
    ASSERT_TRUE(r.ok());
    pid = r->pid;
    ASSERT_TRUE(sup.Suspend(1).ok());
  }
  EXPECT_TRUE(ProcessGroupMembers(pid).empty());
}

}  // namespace
}  // namespace gandiva::runtime
