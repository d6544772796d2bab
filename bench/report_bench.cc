// The scheduler daemon under its agents' reports, printed (asserts
// nothing): how many profile reports it logs and hands to the core a
// second. They are the events a large cluster logs most: every running
// job's mini-batch rate, each --profile-interval-s (2 s by default), so
// 5,000 a second for 10,000 one-GPU jobs.
//
// --agents agents of --gpus-per-agent virtual GPUs each register (one fake
// agent service answers for all; it starts nothing) and a one-GPU job is
// placed on every GPU (fifo). Then --reporters threads send the agents'
// reports back to back for --seconds, each report with a profile of every
// job on its agent, with --profile-interval-s 0 so that each one is logged
// and fed to the core. Side by side per store (SQLite, SQLite with
// --durable-sync, etcd: a one-member etcd on loopback started here, the
// `etcd` binary from Debian's etcd-server): the profile reports of a loop
// pass logged together in one append (the default) and each in its own
// (SchedulerOptions::log_profile_reports_together = false); with
// --compare-rebuild, a third run builds every job's and server's published
// info again on each pass of the loop
// (SchedulerOptions::reuse_unchanged_job_info = false); with
// --compare-row-writes, another writes the job rows whose progress alone
// changed after every pass, not every 5 s (--progress-write-interval-s 0).
//
// With --ended-jobs N, N jobs are submitted and killed before the agents
// register (a daemon that has run many jobs: the registrations' time
// should not grow with them).
//
// The jobs are submitted in SubmitJobs requests of --submit-batch (1,000);
// with --compare-submit the first half goes one Submit request each, and
// the submission rates of both halves are printed side by side.
//
//   gandiva_bench_reports [--agents N] [--gpus-per-agent G]
//                         [--reporters R] [--seconds S]
//                         [--stores sqlite,durable,etcd] [--compare-rebuild]
//                         [--compare-row-writes] [--compare-submit]
//                         [--submit-batch B] [--ended-jobs N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon_bench.h"

namespace gandiva::bench {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gandiva_bench_reports: %s\n", what.c_str());
  std::exit(1);
}

namespace {

using Clock = std::chrono::steady_clock;

struct Run {
  // Jobs submitted a second at setup: one Submit each (the first half,
  // with --compare-submit), and in SubmitJobs requests of --submit-batch.
  double submit_one_per_s = 0;
  double submit_batch_per_s = 0;
  // Seconds the --agents registrations took, one after another.
  double register_s = 0;
  double reports_per_s = 0;
  double events_per_s = 0;
  double median_ms = 0, p99_ms = 0;
  int64_t failed = 0;
};

struct Config {
  int agents = 100;
  int gpus = 8;
  int reporters = 8;
  double seconds = 5;
  int submit_batch = 1000;
  bool compare_submit = false;
  int ended_jobs = 0;
};

Run Measure(const Config& c, runtime::SchedulerOptions o,
            const std::string& agent_address) {
  o.listen = "127.0.0.1:0";
  o.policy = "fifo";
  o.profile_interval_s = 0;
  o.agent_timeout_s = 3600;  // the agents report only in the window
  auto server = runtime::SchedulerServer::Start(o);
  if (!server.ok()) Die("daemon: " + server.status().ToString());
  auto stub = rpc::Scheduler::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));

  // Jobs of the daemon's past: submitted and killed (queued: no agent yet).
  for (int done = 0; done < c.ended_jobs;) {
    const int n = std::min(c.ended_jobs - done, 10000);
    rpc::SubmitJobsRequest req;
    for (int j = 0; j < n; ++j) {
      rpc::JobSpec* s = req.add_specs();
      s->set_name("past");
      s->set_command("true");
      s->set_gpus(1);
    }
    rpc::SubmitJobsReply ids;
    grpc::Status st = stub->SubmitJobs(Ctx().get(), req, &ids);
    if (!st.ok()) Die("SubmitJobs: " + st.error_message());
    rpc::JobsRequest kill;
    for (int64_t id : ids.job_ids()) kill.add_job_ids(id);
    rpc::JobsReply killed;
    st = stub->KillJobs(Ctx().get(), kill, &killed);
    if (!st.ok()) Die("KillJobs: " + st.error_message());
    done += n;
  }

  const auto t_register = Clock::now();
  RegisterAgents(*stub, c.agents, c.gpus, agent_address);
  const double register_s =
      std::chrono::duration<double>(Clock::now() - t_register).count();
  const int jobs = c.agents * c.gpus;
  Run out;
  out.register_s = register_s;
  auto spec = [](int j) {
    rpc::JobSpec s;
    s.set_name("j" + std::to_string(j));
    s.set_command("true");
    s.set_gpus(1);
    return s;
  };
  const int one_each = c.compare_submit ? jobs / 2 : 0;
  auto t_submit = Clock::now();
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  for (int j = 0; j < one_each; ++j) {
    rpc::SubmitRequest sub;
    *sub.mutable_spec() = spec(j);
    rpc::SubmitReply rep;
    grpc::Status s = stub->Submit(Ctx().get(), sub, &rep);
    if (!s.ok()) Die("Submit: " + s.error_message());
  }
  if (one_each > 0) out.submit_one_per_s = one_each / since(t_submit);
  t_submit = Clock::now();
  for (int j = one_each; j < jobs; j += c.submit_batch) {
    rpc::SubmitJobsRequest sub;
    for (int k = j; k < std::min(jobs, j + c.submit_batch); ++k) {
      *sub.add_specs() = spec(k);
    }
    rpc::SubmitJobsReply rep;
    grpc::Status s = stub->SubmitJobs(Ctx(600).get(), sub, &rep);
    if (!s.ok()) Die("SubmitJobs: " + s.error_message());
  }
  if (jobs > one_each) {
    out.submit_batch_per_s = (jobs - one_each) / since(t_submit);
  }
  // Each agent's jobs, once all run.
  std::map<std::string, std::vector<int64_t>> on;
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (true) {
    on.clear();
    int running = 0;
    rpc::ListJobsRequest req;
    req.add_states(rpc::RUNNING);
    req.set_max_jobs(10000);
    do {
      rpc::ListJobsReply list;
      grpc::Status s = stub->ListJobs(Ctx().get(), req, &list);
      if (!s.ok()) Die("ListJobs: " + s.error_message());
      for (const rpc::JobInfo& j : list.jobs()) {
        ++running;
        on[j.server()].push_back(j.id());
      }
      req.set_after_id(list.next_after_id());
    } while (req.after_id() != 0);
    if (running == jobs) break;
    if (Clock::now() > deadline) {
      Die(std::to_string(running) + " of " + std::to_string(jobs) +
          " jobs running after 5 minutes");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  (*server)->Sync();

  std::vector<std::string> names;
  for (const auto& [name, ids] : on) names.push_back(name);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<double> latencies;
  int64_t ok = 0, events = 0, failed = 0;
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int t = 0; t < c.reporters; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> lat;
      int64_t my_ok = 0, my_events = 0, my_failed = 0, step = 0;
      while (!stop.load()) {
        for (size_t i = static_cast<size_t>(t); i < names.size() && !stop;
             i += static_cast<size_t>(c.reporters)) {
          rpc::AgentReport r;
          r.set_name(names[i]);
          ++step;
          for (int64_t id : on[names[i]]) {
            rpc::JobProfile* p = r.add_profiles();
            p->set_job_id(id);
            p->mutable_progress()->set_minibatches(step * 10);
            p->mutable_progress()->set_minibatch_rate(
                5.0 + static_cast<double>(step % 7));
            p->mutable_progress()->set_uses_library(true);
          }
          rpc::AgentReportReply rep;
          const auto s0 = Clock::now();
          grpc::Status s = stub->Report(Ctx().get(), r, &rep);
          lat.push_back(
              std::chrono::duration<double, std::milli>(Clock::now() - s0)
                  .count());
          if (s.ok()) {
            ++my_ok;
            my_events += r.profiles_size();
          } else {
            ++my_failed;
          }
        }
      }
      std::lock_guard lock(mu);
      latencies.insert(latencies.end(), lat.begin(), lat.end());
      ok += my_ok;
      events += my_events;
      failed += my_failed;
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(c.seconds));
  stop = true;
  for (std::thread& t : threads) t.join();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  (*server)->Shutdown();

  out.reports_per_s = static_cast<double>(ok) / took;
  out.events_per_s = static_cast<double>(events) / took;
  out.failed = failed;
  std::sort(latencies.begin(), latencies.end());
  if (!latencies.empty()) {
    out.median_ms = latencies[latencies.size() / 2];
    out.p99_ms = latencies[static_cast<size_t>(
        0.99 * static_cast<double>(latencies.size() - 1))];
  }
  return out;
}

}  // namespace
}  // namespace gandiva::bench

int main(int argc, char** argv) {
  using namespace gandiva;
  using namespace gandiva::bench;
  Config c;
  std::string stores = "sqlite,durable,etcd";
  bool compare_rebuild = false;
  bool compare_row_writes = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Die(std::string(argv[i]) + ": needs a value");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--agents")) {
      c.agents = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--gpus-per-agent")) {
      c.gpus = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--reporters")) {
      c.reporters = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--seconds")) {
      c.seconds = std::atof(next());
    } else if (!std::strcmp(argv[i], "--stores")) {
      stores = next();
    } else if (!std::strcmp(argv[i], "--compare-rebuild")) {
      compare_rebuild = true;
    } else if (!std::strcmp(argv[i], "--compare-row-writes")) {
      compare_row_writes = true;
    } else if (!std::strcmp(argv[i], "--compare-submit")) {
      c.compare_submit = true;
    } else if (!std::strcmp(argv[i], "--submit-batch")) {
      c.submit_batch = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--ended-jobs")) {
      c.ended_jobs = std::atoi(next());
    } else {
      Die(std::string("unknown flag ") + argv[i] +
          " (flags: --agents N --gpus-per-agent G --reporters R --seconds S "
          "--stores sqlite,durable,etcd --compare-rebuild "
          "--compare-row-writes --compare-submit --submit-batch B "
          "--ended-jobs N)");
    }
  }
  if (c.agents < 1 || c.gpus < 1 || c.reporters < 1 || c.seconds <= 0 ||
      c.ended_jobs < 0) {
    Die("need --agents, --gpus-per-agent, --reporters >= 1, --seconds > 0 "
        "and --ended-jobs >= 0");
  }
  if (c.submit_batch < 1 || c.submit_batch > runtime::kMaxJobsPerSubmit) {
    Die("--submit-batch: between 1 and " +
        std::to_string(runtime::kMaxJobsPerSubmit));
  }
  const std::vector<std::string> kinds = ParseStores(stores);
  NullAgent agent;
  std::string agent_address;
  std::unique_ptr<grpc::Server> agent_server =
      ServeAgent(&agent, &agent_address);
  Stores store("bench-reports");

  std::printf(
      "gandiva_bench_reports: %d agents x %d GPUs, a one-GPU job on each "
      "(%d), %d reporters sending reports back to back for %.0f s each run, "
      "every job's profile in each; %d jobs ended before the agents "
      "register\n\n",
      c.agents, c.gpus, c.agents * c.gpus, c.reporters, c.seconds,
      c.ended_jobs);
  std::printf(
      "| store | profile reports logged | reports/s | profile events "
      "logged and fed/s | report round trip median | p99 | failed | "
      "agents registered in |\n"
      "|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);  // before etcd's start forks
  int run = 0;
  // Per store, the default run's submissions (--compare-submit).
  std::vector<std::pair<std::string, Run>> submits;
  for (const std::string& kind : kinds) {
    const char* label = StoreLabel(kind);
    double per_s[4] = {0, 0, 0, 0};
    for (const int variant : {0, 1, 2, 3}) {
      if (variant == 2 && !compare_rebuild) continue;
      if (variant == 3 && !compare_row_writes) continue;
      const bool together = variant != 1;
      runtime::SchedulerOptions o;
      o.log_profile_reports_together = together;
      o.reuse_unchanged_job_info = variant != 2;
      if (variant == 3) o.progress_write_interval_s = 0;
      const std::string name = kind + "-" + std::to_string(run++);
      auto lead = store.Use(kind, name, o);
      Run r = Measure(c, o, agent_address);
      if (variant == 0) submits.emplace_back(label, r);
      per_s[variant] = r.events_per_s;
      std::printf(
          "| %s | %s | %.0f | %.0f | %.2f ms | %.2f ms | %lld | %.2f s |\n",
          label,
          variant == 0   ? "together (default)"
          : variant == 1 ? "one append each"
          : variant == 2 ? "together, every info built again"
                         : "together, progress rows every pass",
          r.reports_per_s, r.events_per_s, r.median_ms, r.p99_ms,
          static_cast<long long>(r.failed), r.register_s);
      std::fflush(stdout);
      if (lead != nullptr) lead->Resign();
    }
    std::printf("| %s | together / one each | | x%.2f | | | | |\n", label,
                per_s[1] > 0 ? per_s[0] / per_s[1] : 0);
    if (compare_rebuild) {
      std::printf("| %s | infos reused / built again | | x%.2f | | | | |\n",
                  label, per_s[2] > 0 ? per_s[0] / per_s[2] : 0);
    }
    if (compare_row_writes) {
      std::printf(
          "| %s | progress rows every 5 s / every pass | | x%.2f | | | | |\n",
          label, per_s[3] > 0 ? per_s[0] / per_s[3] : 0);
    }
    std::fflush(stdout);
  }
  if (c.compare_submit) {
    const int jobs = c.agents * c.gpus;
    std::printf(
        "\nSubmitting the jobs (each placed and started as it arrives), in "
        "the default runs: the first half one Submit request each, the "
        "second in SubmitJobs requests of %d\n\n"
        "| store | one request each: jobs | jobs/s | requests of %d: jobs | "
        "jobs/s | ratio |\n|---|---|---|---|---|---|\n",
        c.submit_batch, c.submit_batch);
    for (const auto& [label, r] : submits) {
      std::printf(
          "| %s | %d | %.0f | %d | %.0f | x%.1f |\n", label.c_str(), jobs / 2,
          r.submit_one_per_s, jobs - jobs / 2, r.submit_batch_per_s,
          r.submit_one_per_s > 0 ? r.submit_batch_per_s / r.submit_one_per_s
                                 : 0);
    }
  }
  agent_server->Shutdown();
  return 0;
}
