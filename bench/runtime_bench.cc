// Runtime mechanism latencies on this machine, printed (asserts nothing):
//  - suspend request -> stopped and resume request -> running again, over N
//    cycles each, for a C++ job with the job-side library (stops at a
//    mini-batch boundary), a PyTorch job with the Python integration, and a
//    job without the library (SIGSTOP/SIGCONT);
//  - the scheduler daemon's gRPC round trip (Ping) on loopback;
//  - a Submit's round trip (through the daemon's event loop: logged,
//    handled, published) as the jobs on record grow: with no agent the
//    jobs stay queued, and each is killed (ended) once measured, up to
//    --ended-jobs N (default 5000); then the same as queued jobs
//    accumulate (submitted and left queued), up to --queued-jobs N
//    (default 5000); then a Kill's round trip for the job at the head of
//    the queue (every job behind it moves up), 200 times; and a request
//    that changes nothing (SetPriority to the priority a queued job has),
//    which still goes through a pass of the loop, 200 times.
//
//   gandiva_bench_runtime [--cycles N] [--pings N] [--ended-jobs N]
//                         [--queued-jobs N] [--skip-python]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/supervisor.h"
#include "runtime/scheduler/scheduler_server.h"

namespace {

namespace fs = std::filesystem;
using namespace gandiva;
using Clock = std::chrono::steady_clock;

struct Stats {
  double median_ms = 0, p95_ms = 0, max_ms = 0;
};

Stats Summarise(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.median_ms = ms[ms.size() / 2];
  s.p95_ms = ms[std::min(ms.size() - 1, (ms.size() * 95 + 99) / 100 - 1)];
  s.max_ms = ms.back();
  return s;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gandiva_bench_runtime: %s\n", what.c_str());
  std::exit(1);
}

// The round trip (ms) of `call`, a gRPC call that returns its status; dies
// naming `what` if it failed.
template <typename Call>
double RoundTripMs(const char* what, Call call) {
  const auto t0 = Clock::now();
  const grpc::Status st = call();
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!st.ok()) Die(std::string(what) + ": " + st.error_message());
  return ms;
}

std::chrono::milliseconds sup_grace{0};

void CycleJob(runtime::Supervisor& sup, int64_t id, const std::string& label,
              const std::string& command,
              const std::map<std::string, std::string>& env, bool library,
              int cycles) {
  runtime::StartParams p;
  p.job_id = id;
  p.command = command;
  p.env = env;
  p.gpus = {0};
  auto started = sup.Start(p);
  if (!started.ok()) Die(label + ": " + started.status().ToString());
  const auto t_start = Clock::now();
  // Let it get going (a library job: until it has attached and stepped).
  // A job without the library is first suspended only after the agent's
  // grace for a library to attach (library_start_grace), which a suspend
  // of a just-started job would otherwise wait out.
  if (!library) {
    std::this_thread::sleep_until(t_start + sup_grace +
                                  std::chrono::milliseconds(200));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    auto v = sup.Job(id);
    if (!v.ok()) Die(label + ": " + v.status().ToString());
    if (v->state == runtime::RunState::kExited) Die(label + ": exited early");
    if (!library || (v->uses_library && v->minibatches > 0)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<double> suspend_ms, resume_ms;
  int at_boundary = 0;
  for (int c = 0; c < cycles; ++c) {
    auto s = sup.Suspend(id);
    if (!s.ok()) Die(label + ": suspend: " + s.status().ToString());
    suspend_ms.push_back(static_cast<double>(s->took_us) / 1e3);
    at_boundary += s->at_boundary;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto r = sup.Resume(id);
    if (!r.ok()) Die(label + ": resume: " + r.status().ToString());
    resume_ms.push_back(static_cast<double>(r->took_us) / 1e3);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  (void)sup.Kill(id);
  const Stats s = Summarise(suspend_ms), r = Summarise(resume_ms);
  std::printf("%-22s %6d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %8d\n",
              label.c_str(), cycles, s.median_ms, s.p95_ms, s.max_ms,
              r.median_ms, r.p95_ms, r.max_ms, at_boundary);
}

}  // namespace

int main(int argc, char** argv) {
  int cycles = 50;
  int pings = 2000;
  int ended_jobs = 5000;
  int queued_jobs = 5000;
  bool python = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cycles") && i + 1 < argc) {
      cycles = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--pings") && i + 1 < argc) {
      pings = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--ended-jobs") && i + 1 < argc) {
      ended_jobs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--queued-jobs") && i + 1 < argc) {
      queued_jobs = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--skip-python")) {
      python = false;
    } else {
      Die(std::string("unknown argument ") + argv[i]);
    }
  }
  const fs::path dir = fs::temp_directory_path() /
                       ("gandiva-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);

  runtime::SupervisorOptions so;
  so.name = "bench";
  so.work_dir = dir / "agent";
  so.num_gpus = 1;
  runtime::Supervisor sup(so);
  sup_grace = so.library_start_grace;
  std::printf("suspend and resume latency on this machine (ms)\n");
  std::printf("%-22s %6s %10s %10s %10s %10s %10s %10s %8s\n", "job", "cycles",
              "susp_med", "susp_p95", "susp_max", "res_med", "res_p95",
              "res_max", "boundary");
  CycleJob(sup, 1, "C++ with library",
           std::string(GANDIVA_BENCH_TEST_JOB) + " 100000000 5", {}, true,
           cycles);
  if (python) {
    CycleJob(sup, 2, "PyTorch with library",
             "/usr/bin/python3 " + std::string(GANDIVA_SOURCE_DIR) +
                 "/examples/train_cnn.py --steps 100000000 --log-every 1000000",
             {{"PYTHONPATH", std::string(GANDIVA_SOURCE_DIR) + "/python"},
              {"GANDIVA_CLIENT_LIB", GANDIVA_CLIENT_LIB_PATH},
              {"OMP_NUM_THREADS", "1"}},
             true, cycles);
  }
  CycleJob(sup, 3, "shell, no library",
           "while :; do i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done; done",
           {}, false, cycles);

  runtime::SchedulerOptions o;
  o.listen = "127.0.0.1:0";
  o.db_path = (dir / "bench.db").string();
  auto server = runtime::SchedulerServer::Start(o);
  if (!server.ok()) Die(server.status().ToString());
  auto channel = grpc::CreateChannel((*server)->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = rpc::Scheduler::NewStub(channel);
  std::vector<double> rtt;
  for (int i = 0; i < pings + 100; ++i) {
    grpc::ClientContext ctx;
    rpc::Empty req, rep;
    const auto t0 = Clock::now();
    grpc::Status st = stub->Ping(&ctx, req, &rep);
    const double us =
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!st.ok()) Die("Ping: " + st.error_message());
    if (i >= 100) rtt.push_back(us / 1e3);  // the first 100 warm up
  }
  const Stats r = Summarise(rtt);
  std::printf(
      "\nscheduler gRPC round trip (Ping, loopback, %d calls): median "
      "%.1f us, p95 %.1f us, max %.1f us\n",
      pings, r.median_ms * 1e3, r.p95_ms * 1e3, r.max_ms * 1e3);

  // The Submit round trips, side by side: this daemon, and one that builds
  // every live job's published info again after each request
  // (SchedulerOptions::reuse_unchanged_job_info = false), each window of
  // one measured right after the other's.
  runtime::SchedulerOptions o_full = o;
  o_full.db_path = (dir / "bench-full.db").string();
  o_full.reuse_unchanged_job_info = false;
  auto full = runtime::SchedulerServer::Start(o_full);
  if (!full.ok()) Die(full.status().ToString());
  auto full_stub = rpc::Scheduler::NewStub(grpc::CreateChannel(
      (*full)->address(), grpc::InsecureChannelCredentials()));
  // The jobs left queued on each, in the order submitted.
  std::vector<int64_t> kept_ids, full_kept_ids;
  // Kills job `id`; returns the Kill's round trip (ms).
  auto kill = [&](rpc::Scheduler::Stub* to, int64_t id) {
    rpc::KillRequest req;
    req.set_job_id(id);
    rpc::Empty done;
    grpc::ClientContext ctx;
    return RoundTripMs("Kill", [&] { return to->Kill(&ctx, req, &done); });
  };
  // Submits a job and kills it unless `keep`; returns the Submit's round
  // trip (ms).
  auto submit_and_kill = [&](rpc::Scheduler::Stub* to, bool keep) {
    rpc::SubmitRequest sub;
    sub.mutable_spec()->set_name("b");
    sub.mutable_spec()->set_command("true");
    sub.mutable_spec()->set_gpus(1);
    rpc::SubmitReply id;
    grpc::ClientContext ctx;
    const double ms =
        RoundTripMs("Submit", [&] { return to->Submit(&ctx, sub, &id); });
    if (keep) {
      (to == stub.get() ? kept_ids : full_kept_ids).push_back(id.job_id());
    } else {
      (void)kill(to, id.job_id());
    }
    return ms;
  };
  // 200 submits measured at 0 jobs and at each tenth of the way, on both.
  constexpr int kWindow = 200;
  auto grow = [&](int upto, bool keep) {
    const int step = std::max(upto / 10, kWindow);
    int on_record = 0;
    for (int mark = 0; mark <= upto; mark += step) {
      while (on_record < mark) {
        (void)submit_and_kill(stub.get(), keep);
        (void)submit_and_kill(full_stub.get(), keep);
        ++on_record;
      }
      std::vector<double> reuse_w, full_w;
      for (int i = 0; i < kWindow; ++i) {
        reuse_w.push_back(submit_and_kill(stub.get(), keep));
        full_w.push_back(submit_and_kill(full_stub.get(), keep));
      }
      on_record += kWindow;
      const Stats a = Summarise(reuse_w), b = Summarise(full_w);
      std::printf("%-12d %10.3f %10.3f %10.3f %12.3f %12.3f %8.1f\n", mark,
                  a.median_ms, a.p95_ms, a.max_ms, b.median_ms, b.p95_ms,
                  b.median_ms / a.median_ms);
    }
  };
  auto header = [](const char* first) {
    std::printf("%-12s %10s %10s %10s %12s %12s %8s\n", first, "median_ms",
                "p95_ms", "max_ms", "rebuild_med", "rebuild_p95", "x_med");
  };
  std::printf(
      "\nSubmit round trip as ended jobs accumulate (each job submitted, "
      "measured, then killed; no agent); 'rebuild': a daemon that builds "
      "every live job's info again after each request\n");
  header("ended jobs");
  grow(ended_jobs, /*keep=*/false);
  std::printf(
      "\nSubmit round trip as queued jobs accumulate (on top of those ended; "
      "no agent)\n");
  header("queued jobs");
  grow(queued_jobs, /*keep=*/true);
  std::printf(
      "\nKill round trip of the job at the head of the queue (every job "
      "behind it moves up; %d calls)\n",
      kWindow);
  header("queued jobs");
  {
    std::vector<double> reuse_w, full_w;
    const size_t n = std::min(kept_ids.size(), full_kept_ids.size());
    for (size_t i = 0; i < std::min<size_t>(kWindow, n); ++i) {
      reuse_w.push_back(kill(stub.get(), kept_ids[i]));
      full_w.push_back(kill(full_stub.get(), full_kept_ids[i]));
    }
    const Stats a = Summarise(reuse_w), b = Summarise(full_w);
    std::printf("%-12zu %10.3f %10.3f %10.3f %12.3f %12.3f %8.1f\n", n,
                a.median_ms, a.p95_ms, a.max_ms, b.median_ms, b.p95_ms,
                b.median_ms / a.median_ms);
  }
  std::printf(
      "\nA request that changes nothing (SetPriority to a queued job's own "
      "priority; a pass of the loop, the queue unchanged; %d calls)\n",
      kWindow);
  header("queued jobs");
  {
    auto same_priority = [&](rpc::Scheduler::Stub* to, int64_t id) {
      rpc::SetPriorityRequest req;
      req.set_job_id(id);
      req.set_priority(0);
      rpc::SetPriorityReply rep;
      grpc::ClientContext ctx;
      return RoundTripMs("SetPriority",
                         [&] { return to->SetPriority(&ctx, req, &rep); });
    };
    std::vector<double> reuse_w, full_w;
    const size_t n = std::min(kept_ids.size(), full_kept_ids.size());
    if (n > static_cast<size_t>(kWindow)) {
      for (int i = 0; i < kWindow; ++i) {
        reuse_w.push_back(same_priority(stub.get(), kept_ids.back()));
        full_w.push_back(same_priority(full_stub.get(), full_kept_ids.back()));
      }
      const Stats a = Summarise(reuse_w), b = Summarise(full_w);
      std::printf("%-12zu %10.3f %10.3f %10.3f %12.3f %12.3f %8.1f\n",
                  n - kWindow, a.median_ms, a.p95_ms, a.max_ms, b.median_ms,
                  b.p95_ms, b.median_ms / a.median_ms);
    }
  }
  (*full)->Shutdown();
  (*server)->Shutdown();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
