// The scheduler daemon time-slicing many jobs, printed (asserts nothing):
// how many suspends and resumes it concludes a second, and how long a
// client's GetJob waits meanwhile. Each switch of a quantum suspends one
// job and resumes another on every GPU, and each agent's reply is an
// ActionDone event logged: thousands at once on a large cluster.
//
// --agents agents of --gpus-per-agent virtual GPUs register (one fake
// agent service answers for all, at once, starting nothing), two one-GPU
// jobs per GPU are submitted (gandiva policy, --quantum-s), and for
// --seconds the jobs' suspend and resume counts are read before and after,
// while a thread sends GetJob back to back. Side by side per store
// (SQLite, SQLite with --durable-sync, etcd: a one-member etcd on loopback
// started here): the outcomes of a loop pass logged together in one
// append (the default), and each in its own
// (SchedulerOptions::log_action_outcomes_together = false).
//
//   gandiva_bench_switch [--agents N] [--gpus-per-agent G] [--quantum-s Q]
//                        [--seconds S] [--stores sqlite,durable,etcd]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "daemon_bench.h"

namespace gandiva::bench {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gandiva_bench_switch: %s\n", what.c_str());
  std::exit(1);
}

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int agents = 50;
  int gpus = 8;
  double quantum_s = 1;
  double seconds = 10;
};

struct Run {
  double switches_per_s = 0;  // suspends + resumes concluded
  double get_median_ms = 0, get_p99_ms = 0;
};

// Suspends + resumes of all jobs so far.
int64_t Switches(rpc::Scheduler::Stub& stub) {
  int64_t n = 0;
  rpc::ListJobsRequest req;
  req.set_all(true);
  req.set_max_jobs(10000);
  do {
    rpc::ListJobsReply list;
    grpc::Status s = stub.ListJobs(Ctx().get(), req, &list);
    if (!s.ok()) Die("ListJobs: " + s.error_message());
    for (const rpc::JobInfo& j : list.jobs()) n += j.suspends() + j.resumes();
    req.set_after_id(list.next_after_id());
  } while (req.after_id() != 0);
  return n;
}

Run Measure(const Config& c, runtime::SchedulerOptions o,
            const std::string& agent_address) {
  o.listen = "127.0.0.1:0";
  o.policy = "gandiva";
  o.quantum_s = c.quantum_s;
  o.agent_timeout_s = 3600;  // the agents never report
  o.tick_ms = 100;
  auto server = runtime::SchedulerServer::Start(o);
  if (!server.ok()) Die("daemon: " + server.status().ToString());
  auto stub = rpc::Scheduler::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));
  RegisterAgents(*stub, c.agents, c.gpus, agent_address);
  const int jobs = 2 * c.agents * c.gpus;
  for (int j = 0; j < jobs; j += 1000) {
    rpc::SubmitJobsRequest sub;
    for (int k = j; k < std::min(jobs, j + 1000); ++k) {
      rpc::JobSpec* s = sub.add_specs();
      s->set_name("j" + std::to_string(k));
      s->set_command("true");
      s->set_gpus(1);
    }
    rpc::SubmitJobsReply rep;
    grpc::Status s = stub->SubmitJobs(Ctx(600).get(), sub, &rep);
    if (!s.ok()) Die("SubmitJobs: " + s.error_message());
  }
  // Time-slicing under way: a few quanta first.
  std::this_thread::sleep_for(std::chrono::duration<double>(3 * c.quantum_s));

  std::atomic<bool> stop{false};
  std::vector<double> lat;
  std::thread prober([&] {
    for (int64_t id = 1; !stop.load(); id = id % jobs + 1) {
      rpc::JobIdRequest r;
      r.set_job_id(id);
      rpc::JobInfo info;
      const auto s0 = Clock::now();
      grpc::Status s = stub->GetJob(Ctx().get(), r, &info);
      if (!s.ok()) Die("GetJob: " + s.error_message());
      lat.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
    }
  });
  const int64_t before = Switches(*stub);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(c.seconds));
  const int64_t after = Switches(*stub);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  prober.join();
  (*server)->Shutdown();

  Run out;
  out.switches_per_s = static_cast<double>(after - before) / took;
  std::sort(lat.begin(), lat.end());
  if (!lat.empty()) {
    out.get_median_ms = lat[lat.size() / 2];
    out.get_p99_ms =
        lat[static_cast<size_t>(0.99 * static_cast<double>(lat.size() - 1))];
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
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Die(std::string(argv[i]) + ": needs a value");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--agents")) {
      c.agents = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--gpus-per-agent")) {
      c.gpus = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--quantum-s")) {
      c.quantum_s = std::atof(next());
    } else if (!std::strcmp(argv[i], "--seconds")) {
      c.seconds = std::atof(next());
    } else if (!std::strcmp(argv[i], "--stores")) {
      stores = next();
    } else {
      Die(std::string("unknown flag ") + argv[i] +
          " (flags: --agents N --gpus-per-agent G --quantum-s Q --seconds S "
          "--stores sqlite,durable,etcd)");
    }
  }
  if (c.agents < 1 || c.gpus < 1 || c.quantum_s <= 0 || c.seconds <= 0) {
    Die("need --agents, --gpus-per-agent >= 1, --quantum-s, --seconds > 0");
  }
  const std::vector<std::string> kinds = ParseStores(stores);
  NullAgent agent;
  std::string agent_address;
  std::unique_ptr<grpc::Server> agent_server =
      ServeAgent(&agent, &agent_address);
  Stores store("bench-switch");

  const int gpus = c.agents * c.gpus;
  std::printf(
      "gandiva_bench_switch: %d agents x %d GPUs, two one-GPU jobs on each "
      "GPU (%d), gandiva policy, quantum %.2g s; %.0f s measured each "
      "run\n\n",
      c.agents, c.gpus, 2 * gpus, c.quantum_s, c.seconds);
  std::printf(
      "| store | action outcomes logged | suspends + resumes/s | GetJob "
      "median | p99 |\n|---|---|---|---|---|\n");
  std::fflush(stdout);  // before etcd's start forks
  int run = 0;
  for (const std::string& kind : kinds) {
    for (const bool together : {true, false}) {
      runtime::SchedulerOptions o;
      o.log_action_outcomes_together = together;
      auto lead = store.Use(kind, kind + "-" + std::to_string(run++), o);
      const Run r = Measure(c, o, agent_address);
      if (lead != nullptr) lead->Resign();
      std::printf("| %s | %s | %.0f | %.2f ms | %.2f ms |\n", StoreLabel(kind),
                  together ? "a pass's together (default)" : "one append each",
                  r.switches_per_s, r.get_median_ms, r.get_p99_ms);
      std::fflush(stdout);
    }
  }
  agent_server->Shutdown();
  return 0;
}
