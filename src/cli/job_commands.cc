// `gandiva submit|ls|show|logs|kill|suspend|resume|servers`: the user's view
// of a running cluster, as a client of the daemon's Scheduler service (and,
// for logs, of the agent's TailLog).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "cli/job_filter.h"
#include "cli/job_spec.h"
#include "cli/scheduler_client.h"
#include "runtime/scheduler/limits.h"

namespace gandiva::cli {
namespace {

// "no job N", with the daemon's reason when it says more than that.
std::string NoJob(int64_t id, const grpc::Status& st) {
  const std::string plain = "no job " + std::to_string(id);
  const std::string& why = st.error_message();
  return why.empty() || why == plain ? plain : plain + " (" + why + ")";
}

using std::chrono::milliseconds;

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A SchedulerSession that also finds jobs by id or name.
class Session : public SchedulerSession {
 public:
  using SchedulerSession::SchedulerSession;

  // Every job `req` asks for, page after page, into `out` (in id order).
  bool ListAll(rpc::ListJobsRequest req, rpc::ListJobsReply* out,
               std::string* error) {
    out->Clear();
    for (;;) {
      rpc::ListJobsReply page;
      const grpc::Status st = stub().ListJobs(Context().get(), req, &page);
      if (!st.ok()) {
        *error = DescribeRpcError(st, where());
        return false;
      }
      for (rpc::JobInfo& j : *page.mutable_jobs()) {
        *out->add_jobs() = std::move(j);
      }
      if (!page.lost_jobs().empty()) out->set_lost_jobs(page.lost_jobs());
      if (page.next_after_id() == 0) return true;
      req.set_after_id(page.next_after_id());
    }
  }

  // The id a user's JOB argument names: a number, or a job's name (unique
  // among live jobs, else among all).
  bool ResolveJob(const std::string& arg, int64_t* id, std::string* error) {
    char* end = nullptr;
    const long long n = std::strtoll(arg.c_str(), &end, 10);
    if (!arg.empty() && end != nullptr && *end == '\0') {
      if (n <= 0) {
        *error = "job ids are positive integers, got '" + arg + "'";
        return false;
      }
      *id = n;
      return true;
    }
    // The jobs of that name (the name quoted: a pattern matches itself
    // only).
    rpc::ListJobsRequest req;
    req.set_all(true);
    for (char c : arg) {
      if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') {
        req.mutable_name()->push_back('\\');
      }
      req.mutable_name()->push_back(c);
    }
    rpc::ListJobsReply named;
    if (!ListAll(req, &named, error)) return false;
    std::vector<const rpc::JobInfo*> live, all;
    auto collect = [&] {
      for (const auto& j : named.jobs()) {
        if (j.spec().name() != arg) continue;
        all.push_back(&j);
        if (!IsEnded(j.state())) live.push_back(&j);
      }
    };
    collect();
    if (all.empty()) {
      // Perhaps an ended job the scheduler archived (--keep-ended-jobs).
      req.set_archived(true);
      named.Clear();
      if (!ListAll(req, &named, error)) return false;
      collect();
    }
    const auto& pick = live.empty() ? all : live;
    if (pick.size() == 1) {
      *id = pick[0]->id();
      return true;
    }
    if (pick.empty()) {
      *error = "no job named '" + arg + "'";
    } else {
      std::string ids;
      for (const auto* j : pick) ids += " " + std::to_string(j->id());
      *error = "several jobs are named '" + arg + "' (ids" + ids +
               "): name one by its id";
    }
    return false;
  }

  // What a failed call about job `id` says: "no job N" for an unknown id.
  std::string JobError(int64_t id, const grpc::Status& st) const {
    return st.error_code() == grpc::StatusCode::NOT_FOUND
               ? NoJob(id, st)
               : DescribeRpcError(st, where());
  }

  // GetJob with a clear message for an unknown id.
  bool GetJob(int64_t id, rpc::JobInfo* info, std::string* error) {
    rpc::JobIdRequest req;
    req.set_job_id(id);
    const grpc::Status st = stub().GetJob(Context().get(), req, info);
    if (st.ok()) return true;
    *error = JobError(id, st);
    return false;
  }
};

// ------------------------------------------------------------------ submit

struct SubmitFlags {
  ConnectionFlags conn;
  std::vector<std::string> files;
  std::string name;
  bool dry_run = false;
};

void PrintSpec(const rpc::JobSpec& spec) {
  std::printf("name: %s\ncommand: %s\ngpus: %d\npriority: %d\nowner: %s\n",
              spec.name().c_str(), spec.command().c_str(), spec.gpus(),
              spec.priority(), spec.owner().c_str());
  std::printf("queue: %s\n", spec.queue().c_str());
  std::printf("group: %s\nelastic: %s\nrestartable: %s\nworkdir: %s\n",
              spec.group().c_str(), spec.elastic() ? "true" : "false",
              spec.restartable() ? "true" : "false", spec.workdir().c_str());
  std::map<std::string, std::string> env(spec.env().begin(), spec.env().end());
  std::printf("env:%s\n", env.empty() ? " {}" : "");
  for (const auto& [k, v] : env) {
    std::printf("  %s: %s\n", k.c_str(), v.c_str());
  }
  std::printf("total_minibatches: %lld\n",
              static_cast<long long>(spec.total_minibatches()));
}

// Every file's specs, in order; the first file that is refused refuses the
// submission (nothing is sent). Several jobs go in one SubmitJobs request:
// all are submitted or none.
int RunSubmit(const SubmitFlags& f) {
  std::vector<rpc::JobSpec> specs;
  for (const std::string& file : f.files) {
    auto more = LoadJobSpecs(file);
    if (!more.ok()) {
      std::fprintf(stderr, "gandiva submit: %s%s\n",
                   more.status().message().c_str(),
                   f.files.size() > 1 ? "; no job was submitted" : "");
      return 1;
    }
    for (rpc::JobSpec& spec : *more) specs.push_back(std::move(spec));
  }
  if (!f.name.empty()) {
    if (std::string why = CheckJobName(f.name); !why.empty()) {
      std::fprintf(stderr, "gandiva submit: --name: %s\n", why.c_str());
      return 1;
    }
    if (specs.size() != 1) {
      std::fprintf(stderr,
                   "gandiva submit: --name: names one job, and the specs "
                   "given hold %zu\n",
                   specs.size());
      return 1;
    }
    specs[0].set_name(f.name);
  }
  if (static_cast<int>(specs.size()) > runtime::kMaxJobsPerSubmit) {
    std::fprintf(stderr,
                 "gandiva submit: at most %d jobs in one submission, the "
                 "specs given hold %zu\n",
                 runtime::kMaxJobsPerSubmit, specs.size());
    return 1;
  }
  if (f.dry_run) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (i > 0) std::printf("---\n");
      PrintSpec(specs[i]);
    }
    return 0;
  }
  Session s("submit", f.conn);
  if (specs.size() == 1) {
    rpc::SubmitRequest req;
    *req.mutable_spec() = specs[0];
    rpc::SubmitReply reply;
    const grpc::Status st = s.stub().Submit(Context().get(), req, &reply);
    if (!st.ok()) return s.Fail(st);
    std::printf("%lld\n", static_cast<long long>(reply.job_id()));
    return 0;
  }
  rpc::SubmitJobsRequest req;
  for (rpc::JobSpec& spec : specs) *req.add_specs() = std::move(spec);
  rpc::SubmitJobsReply reply;
  const grpc::Status st = s.stub().SubmitJobs(Context().get(), req, &reply);
  if (!st.ok()) return s.Fail(st);
  for (int64_t id : reply.job_ids()) {
    std::printf("%lld\n", static_cast<long long>(id));
  }
  return 0;
}

// ---------------------------------------------------------------------- ls

struct LsFlags {
  ConnectionFlags conn;
  bool all = false;
  bool archived = false;  // implies all
  bool json = false;
  bool quiet = false;
  std::string states;  // --state
  std::string owner;
  std::string name;
};

int RunLs(const LsFlags& f) {
  JobFilter filter;
  filter.owner = f.owner;
  filter.name = f.name;
  if (!f.states.empty()) {
    auto states = ParseStates(f.states);
    if (!states.ok()) {
      std::fprintf(stderr, "gandiva ls: --state: %s\n",
                   states.status().message().c_str());
      return 1;
    }
    filter.states = std::move(*states);
  }
  Session s("ls", f.conn);
  // The daemon filters (an end state asked for includes the ended jobs).
  rpc::ListJobsRequest req;
  req.set_all(f.all || f.archived);
  req.set_archived(f.archived);
  filter.ToRequest(&req);
  rpc::ListJobsReply reply;
  std::string error;
  if (!s.ListAll(req, &reply, &error)) return s.Fail(error);
  if (f.json) {
    std::printf("%s\n", ToJson(reply).c_str());
    return 0;
  }
  std::vector<const rpc::JobInfo*> jobs;
  for (const auto& j : reply.jobs()) jobs.push_back(&j);
  std::sort(jobs.begin(), jobs.end(),
            [](const auto* a, const auto* b) { return a->id() < b->id(); });
  if (f.quiet) {
    for (const auto* j : jobs) {
      std::printf("%lld\n", static_cast<long long>(j->id()));
    }
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "GPUS",
                                                 "SERVER", "PROGRESS", "RATE",
                                                 "METRIC", "SUSPENDS", "AGE"}};
  // The servers whose agent is away or out of reach: what their jobs show
  // is as last heard (no list of them: none marked).
  std::set<std::string> unheard;
  rpc::ListServersReply servers;
  if (s.stub().ListServers(Context().get(), rpc::Empty(), &servers).ok()) {
    for (const auto& srv : servers.servers()) {
      if (srv.silent_since_us() > 0 || srv.away_since_us() > 0) {
        unheard.insert(srv.name());
      }
    }
  }
  auto on_unheard = [&](const rpc::JobInfo& j) {
    if (IsEnded(j.state()) || j.state() == rpc::QUEUED) return false;
    if (unheard.contains(j.server())) return true;
    return std::any_of(
        j.parts().begin(), j.parts().end(),
        [&](const rpc::JobPart& p) { return unheard.contains(p.server()); });
  };
  bool marked = false;
  const int64_t now = NowUs();
  for (const auto* j : jobs) {
    const std::string server = Placement(*j);
    const bool unknown = on_unheard(*j);
    marked = marked || unknown;
    char rate[32] = "-";
    if (j->progress().minibatch_rate() > 0 && !IsEnded(j->state()) &&
        !unknown) {
      std::snprintf(rate, sizeof rate, "%.1f", j->progress().minibatch_rate());
    }
    char metric[32] = "-";
    if (j->progress().metric_reports() > 0) {
      std::snprintf(metric, sizeof metric, "%.4g", j->progress().metric());
    }
    rows.push_back(
        {std::to_string(j->id()), j->spec().name(),
         StateName(j->state()) + (unknown ? "?" : ""),
         std::to_string(GpusOf(*j)), server,
         FormatProgress(j->progress().minibatches(),
                        j->spec().total_minibatches()),
         rate, metric, std::to_string(j->suspends()),
         j->submitted_us() > 0 ? FormatAge(now - j->submitted_us()) : "-"});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  if (marked) {
    std::printf(
        "(?: its agent is out of reach or away; the job is shown as last "
        "heard of: `gandiva show JOB` says what it waits for)\n");
  }
  if (jobs.empty()) {
    std::printf(!filter.empty() ? "(no jobs match)\n"
                : f.all
                    ? "(no jobs)\n"
                    : "(no live jobs; `gandiva ls --all` shows ended ones)\n");
  }
  if ((f.all || f.archived) && !reply.lost_jobs().empty()) {
    // Where the listing of every job has gaps that are not deleted jobs:
    // "2-2,5-7" as "2, 5-7".
    std::string lost;
    std::stringstream ranges(reply.lost_jobs());
    for (std::string r; std::getline(ranges, r, ',');) {
      const size_t dash = r.find('-');
      if (dash != std::string::npos &&
          r.substr(0, dash) == r.substr(dash + 1)) {
        r = r.substr(0, dash);
      }
      lost += (lost.empty() ? "" : ", ") + r;
    }
    std::printf(
        "(lost: %s %s, submitted after the backup the store was restored "
        "from)\n",
        lost.find_first_of(",-") == std::string::npos ? "job" : "jobs",
        lost.c_str());
  }
  return 0;
}

// -------------------------------------------------------------------- show

struct JobFlags {
  ConnectionFlags conn;
  std::string job;
  bool json = false;
};

// How the job can be moved to other GPUs (migrate, a pack or resume
// elsewhere, resize), as the daemon decides it.
std::string MovesBy(Session& s, const rpc::JobInfo& j) {
  if (j.uses_library() || j.progress().uses_library()) {
    return "checkpoint at a mini-batch boundary (the job-side library)";
  }
  if (j.spec().restartable()) {
    return "restart from its own checkpoints (restartable)";
  }
  if (j.server().empty() || IsEnded(j.state())) {
    return "the library if it attaches, else CRIU where it works";
  }
  rpc::ListServersReply servers;
  if (!s.stub().ListServers(Context().get(), rpc::Empty(), &servers).ok()) {
    return "unknown (the server list did not come)";
  }
  for (const auto& srv : servers.servers()) {
    if (srv.name() != j.server()) continue;
    const rpc::AgentCapabilities& c = srv.capabilities();
    if (c.criu()) {
      return "CRIU (usable on " + srv.name() +
             "; the destination needs it too; not a resize)";
    }
    return "cannot move: no library seen, not restartable, and CRIU is not "
           "usable on " +
           srv.name() + " (" + c.criu_detail() + ")";
  }
  return "unknown (server " + j.server() + " is not listed)";
}

int RunShow(const JobFlags& f) {
  Session s("show", f.conn);
  int64_t id = 0;
  std::string error;
  rpc::JobInfo j;
  if (!s.ResolveJob(f.job, &id, &error) || !s.GetJob(id, &j, &error)) {
    return s.Fail(error);
  }
  if (f.json) {
    std::printf("%s\n", ToJson(j).c_str());
    return 0;
  }
  const rpc::JobSpec& spec = j.spec();
  const int64_t now = NowUs();
  auto when = [now](int64_t us) {
    return us > 0 ? FormatClock(us) + " (" + FormatAge(now - us) + " ago)"
                  : std::string("-");
  };
  std::printf("job %lld: %s\n", static_cast<long long>(j.id()),
              spec.name().c_str());
  std::printf("  state:        %s", StateName(j.state()).c_str());
  if (j.parts_size() > 1) {
    std::printf(" on %d servers (%s; rank 0 on %s)", j.parts_size(),
                Placement(j).c_str(), j.server().c_str());
  } else if (!j.server().empty()) {
    std::printf(" on %s, GPU %s", j.server().c_str(),
                JoinGpus(j.gpus()).c_str());
  }
  if (j.state() == rpc::FAILED && j.start_failures() > 0) {
    std::printf(", its last %d starts failed", j.start_failures());
  } else if (IsEnded(j.state())) {
    std::printf(", exit code %d", j.exit_code());
  }
  std::printf("\n");
  if (j.archived()) {
    std::printf(
        "  archived:     yes (the scheduler keeps only the jobs that ended "
        "last in memory; this one is read from its store: `ls --archived` "
        "lists it)\n");
  }
  if (!j.waiting_reason().empty()) {
    std::printf("  waiting:      %s\n", j.waiting_reason().c_str());
  }
  if (j.state() == rpc::QUEUED && j.start_failures() > 0) {
    std::printf("  start:        failed %d time%s in a row (see history); ",
                j.start_failures(), j.start_failures() == 1 ? "" : "s");
    if (j.start_retry_us() > now) {
      std::printf("tried again in %s\n",
                  FormatAge(j.start_retry_us() - now).c_str());
    } else {
      std::printf("waits for GPUs to try again\n");
    }
  }
  if (j.state() == rpc::SUSPENDED && j.start_failures() > 0) {
    std::printf("  resume:       failed %d time%s in a row (see history)",
                j.start_failures(), j.start_failures() == 1 ? "" : "s");
    if (j.start_retry_us() > now) {
      std::printf("; tried again in %s",
                  FormatAge(j.start_retry_us() - now).c_str());
    }
    std::printf("\n");
  }
  if (spec.retries() > 0) {
    std::printf("  retries:      %d of %d taken (see history)",
                j.run_failures(), spec.retries());
    if (j.state() == rpc::QUEUED && j.start_failures() == 0 &&
        j.start_retry_us() > now) {
      std::printf("; runs again in %s",
                  FormatAge(j.start_retry_us() - now).c_str());
    }
    std::printf("\n");
  }
  if (spec.checkpoint_every_minibatches() > 0) {
    std::printf("  checkpoints:  every %lld mini-batches (periodic)\n",
                static_cast<long long>(spec.checkpoint_every_minibatches()));
  } else if (spec.checkpoint_every_us() > 0) {
    std::printf("  checkpoints:  every %s (periodic)\n",
                FormatAge(spec.checkpoint_every_us()).c_str());
  }
  const char* withheld = "(withheld: another user's job)";
  std::printf("  command:      %s\n",
              j.withheld() ? withheld : spec.command().c_str());
  std::printf("  workdir:      %s\n", spec.workdir().c_str());
  if (GpusOf(j) != spec.gpus()) {
    std::printf("  gpus:         %d (submitted with %d; resized)\n", GpusOf(j),
                spec.gpus());
  } else {
    std::printf("  gpus:         %d\n", spec.gpus());
  }
  if (j.priority() != spec.priority()) {
    std::printf("  priority:     %d (submitted with %d)\n", j.priority(),
                spec.priority());
  } else {
    std::printf("  priority:     %d\n", spec.priority());
  }
  std::printf("  owner:        %s\n", spec.owner().c_str());
  std::printf("  queue:        %s\n",
              spec.queue().empty() ? "- (shared)" : spec.queue().c_str());
  std::printf("  group:        %s\n",
              spec.group().empty() ? "-" : spec.group().c_str());
  std::printf("  elastic:      %s\n", spec.elastic() ? "yes" : "no");
  std::printf("  restartable:  %s\n", spec.restartable() ? "yes" : "no");
  std::printf("  moves by:     %s\n", MovesBy(s, j).c_str());
  std::map<std::string, std::string> env(spec.env().begin(), spec.env().end());
  std::printf("  env:         %s%s\n", j.withheld() || env.empty() ? " " : "",
              j.withheld()  ? withheld
              : env.empty() ? "-"
                            : "");
  for (const auto& [k, v] : env) {
    std::printf("    %s=%s\n", k.c_str(), v.c_str());
  }
  std::printf("  submitted:    %s\n", when(j.submitted_us()).c_str());
  std::printf("  started:      %s\n", when(j.started_us()).c_str());
  std::printf("  ended:        %s\n", when(j.ended_us()).c_str());
  const rpc::Progress& p = j.progress();
  std::printf(
      "  progress:     %s mini-batches",
      FormatProgress(p.minibatches(), spec.total_minibatches()).c_str());
  if (p.minibatch_rate() > 0) {
    std::printf(", %.1f mini-batches/s", p.minibatch_rate());
  }
  std::printf("\n");
  if (p.metric_reports() > 0) {
    std::printf("  metric:       %.6g (reported after mini-batch %lld)\n",
                p.metric(), static_cast<long long>(p.metric_minibatches()));
  }
  std::printf("  library:      %s\n",
              j.uses_library() || p.uses_library()
                  ? "yes (suspends at mini-batch boundaries)"
                  : "no (plain SIGSTOP/SIGCONT)");
  if (!p.sharing().empty()) {
    std::printf("  gpu sharing:  %s\n",
                p.sharing() == "mps"           ? "packed, under NVIDIA MPS"
                : p.sharing() == "time-shared" ? "packed (no MPS: the GPU "
                                                 "time-shares the two)"
                                               : p.sharing().c_str());
  }
  if (p.world_size() > 1) {
    std::printf("  world size:   %d processes\n", p.world_size());
  }
  std::printf("  suspends:     %d (resumes %d)\n", j.suspends(), j.resumes());
  if (p.gpu_memory_bytes() > 0 || p.gpu_utilization() > 0) {
    std::printf("  gpu:          %.0f%% busy, %.1f MiB\n",
                100 * p.gpu_utilization(),
                static_cast<double>(p.gpu_memory_bytes()) / (1 << 20));
  }
  if (!j.server().empty()) {
    // The agent of its server keeps it (all of it, after a move); each
    // other part's, the output of its ranks since that part started.
    std::printf("  log:          on %s (gandiva logs %lld)", j.server().c_str(),
                static_cast<long long>(j.id()));
    for (int i = 1; i < j.parts_size(); ++i) {
      std::printf("; part %d on %s (--part %d)", i, j.parts(i).server().c_str(),
                  i);
    }
    std::printf("\n");
  } else {
    std::printf("  log:          -\n");
  }
  std::printf("history:%s\n", j.history().empty() ? " (none)" : "");
  std::vector<std::vector<std::string>> rows;
  for (const auto& h : j.history()) {
    std::string at = j.submitted_us() > 0 && h.time_us() >= j.submitted_us()
                         ? "+" + FormatTook(h.time_us() - j.submitted_us())
                         : FormatClock(h.time_us());
    rows.push_back(
        {"  " + FormatClock(h.time_us()).substr(11), at, h.action(),
         h.ok() ? FormatTook(h.took_us()) : "FAILED",
         h.ok() ? h.detail() : FormatTook(h.took_us()) + " " + h.detail()});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  return 0;
}

// -------------------------------------------------------------------- logs

struct LogsFlags {
  ConnectionFlags conn;
  std::string job;
  bool follow = false;
  int part = 0;  // of a job that spans servers, in rank order
};

// The server holding the log of part `part` of the job ("" while it has
// none); false, with *error, for a part the job does not have.
bool LogServer(const rpc::JobInfo& j, int part, std::string* server,
               std::string* error) {
  if (j.parts_size() > 1) {
    if (part < 0 || part >= j.parts_size()) {
      std::string on;
      for (int i = 0; i < j.parts_size(); ++i) {
        on += (i > 0 ? ", " : "") + std::to_string(i) + " on " +
              j.parts(i).server();
      }
      *error = "--part " + std::to_string(part) + ": job " +
               std::to_string(j.id()) + " has parts " + on;
      return false;
    }
    *server = j.parts(part).server();
    return true;
  }
  if (part != 0) {
    *error =
        "--part " + std::to_string(part) + ": job " + std::to_string(j.id()) +
        (j.server().empty()
             ? " runs nowhere now"
             : " runs on one server (" + j.server() + "): it has part 0 only");
    return false;
  }
  *server = j.server();
  return true;
}

int RunLogs(const LogsFlags& f) {
  Session s("logs", f.conn);
  int64_t id = 0;
  std::string error;
  rpc::JobInfo j;
  if (!s.ResolveJob(f.job, &id, &error) || !s.GetJob(id, &j, &error)) {
    return s.Fail(error);
  }
  // Wait for a queued job to get a log (with -f), else say there is none.
  std::string server;
  while (true) {
    const bool placed = !j.server().empty();
    if (!LogServer(j, f.part, &server, &error)) {
      // A part it does not have; a job not placed yet may get it.
      if (placed || !f.follow || IsEnded(j.state())) return s.Fail(error);
    } else if (!server.empty()) {
      break;
    }
    if (!f.follow || IsEnded(j.state())) {
      return s.Fail("job " + std::to_string(id) + " (" + StateName(j.state()) +
                    ") has no log yet");
    }
    std::this_thread::sleep_for(milliseconds(500));
    if (!s.GetJob(id, &j, &error)) return s.Fail(error);
  }

  // Through the agent of the job's server (all of it, after a move).
  rpc::ListServersReply servers;
  const grpc::Status st =
      s.stub().ListServers(Context().get(), rpc::Empty(), &servers);
  if (!st.ok()) return s.Fail(st);
  std::string agent_address;
  for (const auto& srv : servers.servers()) {
    if (srv.name() == server) agent_address = srv.address();
  }
  if (agent_address.empty()) {
    return s.Fail("the log of job " + std::to_string(id) + " is on server '" +
                  server + "', which is not known to the scheduler");
  }
  // The agent reads the log to its owner or an admin: the daemon says
  // which with a ticket (none from a daemon before tickets).
  rpc::LogTicketReply ticket;
  rpc::LogTicketRequest for_job;
  for_job.set_job_id(id);
  for_job.set_server(server);
  const grpc::Status ticketed =
      s.stub().LogTicket(Context().get(), for_job, &ticket);
  if (!ticketed.ok() &&
      ticketed.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
    return s.Fail(ticketed);
  }
  auto agent = ConnectAgent(agent_address);
  rpc::TailLogRequest req;
  req.set_job_id(id);
  req.set_follow(f.follow);
  req.set_ticket(ticket.ticket());
  grpc::ClientContext ctx;
  if (!f.follow) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::minutes(1));
  }
  auto reader = agent->TailLog(&ctx, req);
  rpc::LogChunk chunk;
  while (reader->Read(&chunk)) {
    if (chunk.skipped() > 0) {
      std::printf(
          "[gandiva: %lld bytes of older output dropped here: the agent "
          "keeps the last --max-log-mb of a job's log]\n",
          static_cast<long long>(chunk.skipped()));
    }
    std::fwrite(chunk.data().data(), 1, chunk.data().size(), stdout);
    std::fflush(stdout);
  }
  const grpc::Status tail = reader->Finish();
  if (!tail.ok()) {
    return s.Fail("agent " + server + " at " + agent_address + ": " +
                  tail.error_message());
  }
  return 0;
}

// ---------------------------------------------------- kill/suspend/resume

enum class Act { kKill, kSuspend, kResume };

struct ActFlags {
  ConnectionFlags conn;
  std::vector<std::string> jobs;
};

// Every job of the command line: one that cannot be acted on is reported
// and the others are still acted on (in requests of up to
// kMaxJobsPerRequest jobs); 1 if any could not be.
int RunAct(Act act, const ActFlags& f) {
  const char* name = act == Act::kKill      ? "kill"
                     : act == Act::kSuspend ? "suspend"
                                            : "resume";
  const char* done = act == Act::kKill      ? "killed"
                     : act == Act::kSuspend ? "suspended"
                                            : "resumed";
  Session s(name, f.conn);
  int status = 0;
  std::vector<int64_t> ids;
  for (const std::string& job : f.jobs) {
    int64_t id = 0;
    std::string error;
    if (s.ResolveJob(job, &id, &error)) {
      ids.push_back(id);
    } else {
      status = s.Fail(error);
    }
  }
  rpc::JobsRequest req;
  if (act == Act::kKill) {
    const char* user = std::getenv("USER");
    req.set_reason(std::string("gandiva kill by ") +
                   (user != nullptr ? user : "a user"));
  }
  for (size_t at = 0; at < ids.size();
       at += static_cast<size_t>(runtime::kMaxJobsPerRequest)) {
    const size_t end = std::min(
        ids.size(), at + static_cast<size_t>(runtime::kMaxJobsPerRequest));
    req.clear_job_ids();
    for (size_t i = at; i < end; ++i) req.add_job_ids(ids[i]);
    rpc::JobsReply reply;
    auto ctx = Context(std::chrono::seconds(60));
    const grpc::Status st =
        act == Act::kKill      ? s.stub().KillJobs(ctx.get(), req, &reply)
        : act == Act::kSuspend ? s.stub().SuspendJobs(ctx.get(), req, &reply)
                               : s.stub().ResumeJobs(ctx.get(), req, &reply);
    if (!st.ok()) return s.Fail(st);
    for (const rpc::JobOutcome& o : reply.outcomes()) {
      if (o.code() == 0 && !o.note().empty()) {
        std::printf("job %lld: %s\n", static_cast<long long>(o.job_id()),
                    o.note().c_str());
      } else if (o.code() == 0) {
        std::printf("job %lld %s\n", static_cast<long long>(o.job_id()), done);
      } else {
        status = s.Fail(s.JobError(
            o.job_id(),
            grpc::Status(static_cast<grpc::StatusCode>(o.code()), o.error())));
      }
    }
  }
  return status;
}

// ---------------------------------------------------------------- priority

struct PriorityFlags {
  ConnectionFlags conn;
  std::string job;
  int priority = 0;
};

int RunPriority(const PriorityFlags& f) {
  Session s("priority", f.conn);
  int64_t id = 0;
  std::string error;
  if (!s.ResolveJob(f.job, &id, &error)) return s.Fail(error);
  rpc::SetPriorityRequest req;
  req.set_job_id(id);
  req.set_priority(f.priority);
  rpc::SetPriorityReply reply;
  const grpc::Status st = s.stub().SetPriority(Context().get(), req, &reply);
  if (!st.ok()) return s.Fail(s.JobError(id, st));
  std::printf("job %lld: priority %d (was %d)\n", static_cast<long long>(id),
              f.priority, reply.was());
  return 0;
}

// ------------------------------------------- migrate/pack/unpack/resize

enum class Mech { kMigrate, kPack, kUnpack, kResize };

struct MechFlags {
  ConnectionFlags conn;
  std::string job;
  std::string server;  // migrate --to
  std::string with;    // pack --with
  int gpus = 0;        // resize --gpus
  bool no_wait = false;
  double timeout_s = 300;
};

// Waits until the job's history shows the outcome of the mechanism asked
// for at or after `since_us` (the daemon's clock); prints it.
int AwaitOutcome(Session& s, int64_t id, const std::vector<std::string>& names,
                 int64_t since_us, double timeout_s) {
  const auto end =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < end) {
    rpc::JobInfo j;
    std::string error;
    if (!s.GetJob(id, &j, &error)) return s.Fail(error);
    for (const auto& h : j.history()) {
      if (h.time_us() < since_us) continue;
      if (std::find(names.begin(), names.end(), h.action()) == names.end()) {
        continue;
      }
      if (h.ok()) {
        std::printf("job %lld: %s done in %s%s%s\n", static_cast<long long>(id),
                    h.action().c_str(), FormatTook(h.took_us()).c_str(),
                    h.detail().empty() ? "" : ": ", h.detail().c_str());
        return 0;
      }
      return s.Fail("job " + std::to_string(id) + ": " + h.action() +
                    " failed: " + h.detail() + " (the job stays as it was)");
    }
    if (IsEnded(j.state())) {
      return s.Fail("job " + std::to_string(id) + " ended before the " +
                    names[0] + " was done");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s.Fail("job " + std::to_string(id) + ": no outcome after " +
                std::to_string(static_cast<int>(timeout_s)) +
                " s; see `gandiva show " + std::to_string(id) + "`");
}

int RunMech(Mech mech, const MechFlags& f) {
  const char* name = mech == Mech::kMigrate  ? "migrate"
                     : mech == Mech::kPack   ? "pack"
                     : mech == Mech::kUnpack ? "unpack"
                                             : "resize";
  Session s(name, f.conn);
  int64_t id = 0;
  std::string error;
  if (!s.ResolveJob(f.job, &id, &error)) return s.Fail(error);
  // The history's clock is the daemon's; read the latest entry to start
  // after it.
  rpc::JobInfo before;
  if (!s.GetJob(id, &before, &error)) return s.Fail(error);
  int64_t since = 0;
  for (const auto& h : before.history())
    since = std::max(since, h.time_us() + 1);
  rpc::Empty reply;
  grpc::Status st;
  std::vector<std::string> outcome = {name};
  switch (mech) {
    case Mech::kMigrate: {
      rpc::MigrateRequest req;
      req.set_job_id(id);
      req.set_server(f.server);
      st = s.stub().Migrate(Context().get(), req, &reply);
      break;
    }
    case Mech::kPack: {
      int64_t with = 0;
      if (!s.ResolveJob(f.with, &with, &error)) return s.Fail(error);
      rpc::PackRequest req;
      req.set_job_id(id);
      req.set_with_job_id(with);
      st = s.stub().Pack(Context().get(), req, &reply);
      break;
    }
    case Mech::kUnpack: {
      rpc::JobIdRequest req;
      req.set_job_id(id);
      st = s.stub().Unpack(Context().get(), req, &reply);
      break;
    }
    case Mech::kResize: {
      rpc::ResizeRequest req;
      req.set_job_id(id);
      req.set_gpus(f.gpus);
      st = s.stub().Resize(Context().get(), req, &reply);
      outcome = {"grow", "shrink"};
      break;
    }
  }
  if (!st.ok()) return s.Fail(st);
  if (f.no_wait) {
    std::printf("job %lld: %s under way (see `gandiva show %lld`)\n",
                static_cast<long long>(id), name, static_cast<long long>(id));
    return 0;
  }
  return AwaitOutcome(s, id, outcome, since, f.timeout_s);
}

// ------------------------------------------------------------------- drain

struct DrainFlags {
  ConnectionFlags conn;
  std::string server;
  bool undo = false;
  bool cordon_only = false;
  bool no_wait = false;
  double timeout_s = 600;
};

// 0 when every job placed on the server moved off it (with --no-wait: is
// moving off it), or nothing was asked to move; 1 when some stay or a move
// failed, or on an error. A packed pair is unpacked first, then the server
// drained again (up to three rounds) to move it.
int RunDrain(const DrainFlags& f) {
  Session s("drain", f.conn);
  rpc::DrainRequest req;
  req.set_server(f.server);
  req.set_undo(f.undo);
  req.set_cordon_only(f.cordon_only);
  rpc::DrainReply reply;
  grpc::Status st = s.stub().Drain(Context().get(), req, &reply);
  if (!st.ok()) return s.Fail(st);
  if (f.undo) {
    std::printf("server %s is open again: new jobs may be placed there\n",
                f.server.c_str());
    return 0;
  }
  std::printf("server %s is cordoned: nothing new is placed there\n",
              f.server.c_str());
  if (f.cordon_only) return 0;
  // The outcome for each job, from the last round it was in: empty when it
  // moved (or is moving, with --no-wait), else why it stays.
  std::map<int64_t, std::string> stays;
  // When the drain's request for `id` went in (its history's last).
  auto requested_at = [&](int64_t id, int64_t* since) {
    rpc::JobInfo j;
    std::string error;
    if (!s.GetJob(id, &j, &error)) return false;
    *since = 0;
    for (const auto& h : j.history()) {
      if (h.action() == "request" &&
          h.detail() == "operator: drain " + f.server) {
        *since = std::max(*since, h.time_us());
      }
    }
    return true;
  };
  constexpr int kRounds = 3;
  for (int round = 1;; ++round) {
    std::vector<int64_t> moving, unpacking;
    for (const rpc::DrainedJob& j : reply.jobs()) {
      const auto id = static_cast<long long>(j.job_id());
      if (!j.moved_to().empty()) {
        std::printf("job %lld: migrating to %s\n", id, j.moved_to().c_str());
        moving.push_back(j.job_id());
        stays[j.job_id()].clear();
      } else if (j.unpacking()) {
        std::printf("job %lld: %s\n", id, j.reason().c_str());
        unpacking.push_back(j.job_id());
        stays[j.job_id()] = j.reason();
      } else {
        std::printf("job %lld: stays: %s\n", id, j.reason().c_str());
        stays[j.job_id()] = j.reason();
      }
    }
    if (f.no_wait) break;
    // Wait for each move's and unpack's outcome.
    for (int64_t id : moving) {
      int64_t since = 0;
      if (!requested_at(id, &since)) return 1;
      if (AwaitOutcome(s, id, {"migrate"}, since, f.timeout_s) != 0) {
        stays[id] = "its migration failed";
      }
    }
    bool unpacked = false;
    for (int64_t id : unpacking) {
      int64_t since = 0;
      if (!requested_at(id, &since)) return 1;
      unpacked |= AwaitOutcome(s, id, {"unpack"}, since, f.timeout_s) == 0;
    }
    if (!unpacked || round == kRounds) break;
    std::printf("draining %s again: what was unpacked can move now\n",
                f.server.c_str());
    reply.Clear();
    st = s.stub().Drain(Context().get(), req, &reply);
    if (!st.ok()) return s.Fail(st);
  }
  int stay = 0;
  for (const auto& [id, why] : stays) stay += !why.empty();
  if (stays.empty()) {
    std::printf("no job is placed there\n");
  } else if (stay > 0) {
    std::printf(
        "%d of %zu jobs stay on %s: run `gandiva drain %s` again once there "
        "is room elsewhere, or let them end there\n",
        stay, stays.size(), f.server.c_str(), f.server.c_str());
  } else if (f.no_wait) {
    std::printf(
        "(watch the moves with `gandiva ls`; `gandiva drain %s "
        "--undo` opens it again)\n",
        f.server.c_str());
  } else {
    std::printf("%s is empty (`gandiva drain %s --undo` opens it again)\n",
                f.server.c_str(), f.server.c_str());
  }
  return stay > 0 ? 1 : 0;
}

// ----------------------------------------------------------------- servers

struct ServersFlags {
  ConnectionFlags conn;
  bool json = false;
};

std::string JoinIds(const google::protobuf::RepeatedField<int64_t>& ids) {
  if (ids.empty()) return "-";
  std::string s;
  for (int64_t id : ids) {
    if (!s.empty()) s += ",";
    s += std::to_string(id);
  }
  return s;
}

int RunServers(const ServersFlags& f) {
  Session s("servers", f.conn);
  rpc::ListServersReply reply;
  const grpc::Status st =
      s.stub().ListServers(Context().get(), rpc::Empty(), &reply);
  if (!st.ok()) return s.Fail(st);
  if (f.json) {
    std::printf("%s\n", ToJson(reply).c_str());
    return 0;
  }
  if (reply.servers().empty()) {
    std::printf("(no servers: start agents, or `gandiva up`)\n");
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "ADDRESS", "UP", "GPUS", "FREE", "HEIGHT", "AFFINITY"}};
  const int64_t now_us =
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  for (const auto& srv : reply.servers()) {
    std::string up = !srv.up() ? "no" : srv.cordoned() ? "cordoned" : "yes";
    auto left = [&](int64_t until_us) {
      return std::to_string(std::max<int64_t>(
                 0, (until_us - now_us + 999'999) / 1'000'000)) +
             " s left)";
    };
    if (srv.away_since_us() > 0) {
      // Its agent stopped; declared down unless it is back in time.
      up = "away (" + left(srv.away_until_us());
    } else if (srv.silent_since_us() > 0) {
      // Its agent is not heard of; declared down unless it is back in time.
      up = "out of reach (" + left(srv.silent_until_us());
    } else if (srv.awaiting_until_us() > 0) {
      // The daemon restarted; its agent has not registered since.
      up = "awaiting agent (" + left(srv.awaiting_until_us());
    }
    rows.push_back({std::to_string(srv.id()), srv.name(), srv.address(), up,
                    std::to_string(srv.gpus_size()),
                    std::to_string(srv.free_gpus()),
                    std::to_string(srv.height()),
                    srv.affinity() > 0 ? std::to_string(srv.affinity()) : "-"});
  }
  std::fputs(FormatTable(rows).c_str(), stdout);
  std::printf("\n");
  std::vector<std::vector<std::string>> gpu_rows = {
      {"SERVER", "GPU", "KIND", "MEMORY", "RUNNING", "WAITING"}};
  for (const auto& srv : reply.servers()) {
    for (int i = 0; i < srv.gpus_size(); ++i) {
      const rpc::Gpu& g = srv.gpus(i);
      const rpc::GpuJobs* jobs =
          i < srv.gpu_jobs_size() ? &srv.gpu_jobs(i) : nullptr;
      char memory[32] = "-";  // what packing checks jobs' memory against
      if (g.memory_bytes() > 0) {
        std::snprintf(memory, sizeof memory, "%.1f GiB",
                      static_cast<double>(g.memory_bytes()) / (1 << 30));
      }
      gpu_rows.push_back({srv.name(), std::to_string(g.local()),
                          g.name().empty() ? "-" : g.name(), memory,
                          jobs != nullptr ? JoinIds(jobs->running()) : "-",
                          jobs != nullptr ? JoinIds(jobs->waiting()) : "-"});
    }
  }
  std::fputs(FormatTable(gpu_rows).c_str(), stdout);
  std::printf("\n");
  for (const auto& srv : reply.servers()) {
    const rpc::AgentCapabilities& c = srv.capabilities();
    std::printf("%s: CRIU %s, MPS %s\n", srv.name().c_str(),
                c.criu() ? ("yes (" + c.criu_detail() + ")").c_str()
                         : ("no (" + c.criu_detail() + ")").c_str(),
                c.mps() ? ("yes (" + c.mps_detail() + ")").c_str()
                        : ("no (" + c.mps_detail() + ")").c_str());
  }
  return 0;
}

}  // namespace

void AddJobCommands(CLI::App& app, int& exit_code) {
  {
    auto f = std::make_shared<SubmitFlags>();
    CLI::App* sub = app.add_subcommand(
        "submit",
        "Submit jobs described by YAML specs (fields: examples/README.md; "
        "several in a file as documents separated by ---), all or none; "
        "prints their ids, one a line");
    sub->add_option(
           "spec", f->files,
           "Job spec files (YAML; - for standard input), in the order of "
           "their jobs")
        ->required();
    sub->add_option("--name", f->name, "Name the job (overrides the spec's)");
    sub->add_flag("--dry-run", f->dry_run,
                  "Check the spec and print it with its defaults; submit "
                  "nothing");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunSubmit(*f); });
  }
  {
    auto f = std::make_shared<LsFlags>();
    CLI::App* sub = app.add_subcommand("ls", "List jobs");
    sub->add_flag("-a,--all", f->all, "Include ended jobs");
    sub->add_flag("--archived", f->archived,
                  "Include ended jobs, and those the scheduler archived "
                  "(beyond its --keep-ended-jobs), read from its store");
    sub->add_option("--state", f->states,
                    "Only jobs in these states, comma-separated: queued, "
                    "running, suspended, migrating, finished, failed, "
                    "killed; live, ended (an end state includes ended jobs)");
    sub->add_option("--owner", f->owner, "Only the jobs of this owner");
    sub->add_option("--name", f->name,
                    "Only jobs whose name matches this shell pattern "
                    "('search-*')");
    sub->add_flag("-q,--quiet", f->quiet,
                  "Print only the jobs' ids, one a line (for `gandiva kill "
                  "$(gandiva ls -q ...)`)");
    sub->add_flag("--json", f->json,
                  "Print the jobs as JSON (the ListJobsReply message) for "
                  "scripts");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunLs(*f); });
  }
  {
    auto f = std::make_shared<JobFlags>();
    CLI::App* sub = app.add_subcommand(
        "show", "Everything about a job, with its mechanism history");
    sub->add_option("job", f->job, "Job id or name")->required();
    sub->add_flag("--json", f->json,
                  "Print the job as JSON (the JobInfo message) for scripts");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunShow(*f); });
  }
  {
    auto f = std::make_shared<LogsFlags>();
    CLI::App* sub =
        app.add_subcommand("logs", "Print a job's log (stdout and stderr)");
    sub->add_option("job", f->job, "Job id or name")->required();
    sub->add_flag("-f,--follow", f->follow, "Keep printing until the job ends");
    sub->add_option(
        "--part", f->part,
        "Of a job spanning servers: the log of this part (in rank "
        "order, as `gandiva show` lists them; default 0, rank 0's)");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunLogs(*f); });
  }
  struct ActDef {
    const char* name;
    const char* help;
    Act act;
  };
  for (const ActDef& d :
       {ActDef{"kill", "Kill jobs", Act::kKill},
        ActDef{"suspend", "Suspend jobs (at their next mini-batch boundary)",
               Act::kSuspend},
        ActDef{"resume", "Resume jobs suspended by `gandiva suspend`",
               Act::kResume}}) {
    auto f = std::make_shared<ActFlags>();
    CLI::App* sub = app.add_subcommand(d.name, d.help);
    sub->add_option("job", f->jobs,
                    "Job ids or names (e.g. $(gandiva ls -q --name "
                    "'search-*')); all in one request, the others still "
                    "acted on when one cannot be")
        ->required();
    AddConnectionFlags(sub, &f->conn);
    const Act act = d.act;
    sub->callback([f, act, &exit_code] { exit_code = RunAct(act, *f); });
  }
  struct MechDef {
    const char* name;
    const char* help;
    Mech mech;
  };
  for (const MechDef& d :
       {MechDef{"migrate",
                "Move a job to another server (checkpoint at a mini-batch "
                "boundary, transfer, resume there)",
                Mech::kMigrate},
        MechDef{"pack",
                "Run a waiting job on the GPUs of a running one, both at "
                "once; the scheduler undoes it if they measure slower than "
                "time-slicing",
                Mech::kPack},
        MechDef{"unpack", "Suspend a packed job; its partner runs alone",
                Mech::kUnpack},
        MechDef{"resize",
                "Grow or shrink an elastic job (restart from a checkpoint at "
                "the new size)",
                Mech::kResize}}) {
    auto f = std::make_shared<MechFlags>();
    CLI::App* sub = app.add_subcommand(d.name, d.help);
    sub->add_option("job", f->job, "Job id or name")->required();
    if (d.mech == Mech::kMigrate) {
      sub->add_option("--to", f->server, "The server's name (gandiva servers)")
          ->required();
    } else if (d.mech == Mech::kPack) {
      sub->add_option("--with", f->with, "The running job to share GPUs with")
          ->required();
    } else if (d.mech == Mech::kResize) {
      sub->add_option("--gpus", f->gpus, "The new GPU count (a power of two)")
          ->required();
    }
    sub->add_flag("--no-wait", f->no_wait,
                  "Return once the request is accepted");
    sub->add_option("--timeout-s", f->timeout_s, "How long to wait for it")
        ->capture_default_str();
    AddConnectionFlags(sub, &f->conn);
    const Mech mech = d.mech;
    sub->callback([f, mech, &exit_code] { exit_code = RunMech(mech, *f); });
  }
  {
    auto f = std::make_shared<PriorityFlags>();
    CLI::App* sub = app.add_subcommand(
        "priority",
        "Change a live job's priority: it goes ahead of the queued jobs of "
        "lower priority (and, under the gandiva policy, may run at once in "
        "place of lower-priority jobs)");
    sub->add_option("job", f->job, "Job id or name")->required();
    sub->add_option("priority", f->priority,
                    "The new priority (an integer; higher runs first)")
        ->required();
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunPriority(*f); });
  }
  {
    auto f = std::make_shared<DrainFlags>();
    CLI::App* sub = app.add_subcommand(
        "drain",
        "Cordon a server (nothing new is placed there) and migrate its jobs "
        "to the open servers with the most room; exits 1 if some stay");
    sub->add_option("server", f->server, "The server's name (gandiva servers)")
        ->required();
    sub->add_flag("--undo", f->undo, "Open the server again");
    sub->add_flag("--cordon-only", f->cordon_only,
                  "Cordon it; move nothing (its jobs end there)");
    sub->add_flag("--no-wait", f->no_wait,
                  "Return once the moves are under way");
    sub->add_option("--timeout-s", f->timeout_s,
                    "How long to wait for each move")
        ->capture_default_str();
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunDrain(*f); });
  }
  {
    auto f = std::make_shared<ServersFlags>();
    CLI::App* sub = app.add_subcommand(
        "servers", "List servers, their GPUs and the jobs placed on each");
    sub->add_flag("--json", f->json,
                  "Print the servers as JSON (the ListServersReply message) "
                  "for scripts");
    AddConnectionFlags(sub, &f->conn);
    sub->callback([f, &exit_code] { exit_code = RunServers(*f); });
  }
}

}  // namespace gandiva::cli
