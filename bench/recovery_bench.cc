// The scheduler daemon's recovery time with and without event-log
// compaction, printed (asserts nothing).
//
// Builds a database the way the daemon fills one: a core (the gandiva policy
// with the daemon's options) fed servers coming up, jobs arriving and
// ending, every action done, a Tick a second and each running job's rate
// every 2 s; each event logged before it is handled, each job in the jobs
// table. Then, side by side:
//  - a daemon started on the whole log (every event replayed);
//  - a daemon started on a copy compacted at `--tail` events before the end
//    (a snapshot, then the tail replayed): what `--snapshot-every N`
//    bounds a recovery to, at most N events;
//  - the core's Snapshot() and Restore() at the end state, and one
//    compaction (the snapshot written and the tail's events deleted).
//
//   gandiva_bench_recovery [--servers N] [--events N] [--tail N] [--reps N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/policies/registry.h"
#include "core/scheduler.h"
#include "runtime/scheduler/event_codec.h"
#include "runtime/scheduler/scheduler_server.h"
#include "runtime/scheduler/store.h"

namespace {

namespace fs = std::filesystem;
using namespace gandiva;
using Clock = std::chrono::steady_clock;

// The daemon's chunk (kCompactionChunk in scheduler_server.cc).
constexpr int64_t kChunk = 5000;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gandiva_bench_recovery: %s\n", what.c_str());
  std::exit(1);
}

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The policy as the daemon builds it with its defaults.
std::unique_ptr<core::Policy> DaemonPolicy() {
  core::PolicyOptions po;
  po.gandiva.pack_min_alone_reports = 5;
  po.gandiva.allow_split = false;
  po.fifo.relax_locality = false;
  auto p = core::MakePolicy("gandiva", po);
  if (!p.ok()) Die(p.status().ToString());
  return std::move(*p);
}

struct Built {
  int64_t events = 0;
  int64_t jobs = 0;
  int64_t snapshot_seq = 0;  // where the compacted copy's snapshot is
  int64_t snapshot_time_us = 0;
  std::string snapshot;  // the core then
  std::string final_snapshot;
  double build_s = 0;
};

Built Build(const std::string& db, int servers, int64_t events, int64_t tail) {
  Built b;
  const auto t0 = Clock::now();
  auto store = runtime::Store::Open(db);
  if (!store.ok()) Die(store.status().ToString());
  if (auto st = (*store)->SetMeta("policy",
                                  "{\"policy\":\"gandiva\",\"quantum_us\":"
                                  "60000000,\"max_height\":4}");
      !st.ok()) {
    Die(st.ToString());
  }
  core::Scheduler sched(DaemonPolicy());
  std::mt19937_64 rng(1);
  int64_t now_us = 1'700'000'000'000'000;
  std::vector<core::Action> pending;
  auto feed = [&](core::EventBody body) {
    auto seq = (*store)->AppendEvent(now_us, runtime::EventKindName(body),
                                     runtime::EncodeEvent(body));
    if (!seq.ok()) Die(seq.status().ToString());
    std::vector<core::Action> out;
    (void)sched.Handle(core::Event{core::Time::FromMicros(now_us), body}, out);
    for (const core::Action& a : out) {
      if (a.kind != core::ActionKind::kKill &&
          a.kind != core::ActionKind::kSetPriority) {
        pending.push_back(a);
      }
    }
    ++b.events;
    if (b.events == events - tail) {
      b.snapshot_seq = *seq;
      b.snapshot_time_us = now_us;
      b.snapshot = sched.Snapshot();
    }
  };
  runtime::WriteBatch rows;
  for (int s = 0; s < servers; ++s) {
    core::ServerSpec spec;
    spec.name = "node-" + std::to_string(s);
    spec.gpus = 8;
    feed(core::ServerUp{spec, core::ServerId()});
    runtime::ServerRow row;
    row.id = s;
    row.name = spec.name;
    row.address = "127.0.0.1:1";  // never called: no agent registers
    row.gpus_json = "[";
    for (int g = 0; g < spec.gpus; ++g) {
      row.gpus_json +=
          (g ? ",{\"local\":" : "{\"local\":") + std::to_string(g) + "}";
    }
    row.gpus_json += "]";
    rows.servers.push_back(row);
  }
  if (auto st = (*store)->Write(rows); !st.ok()) Die(st.ToString());
  auto submit = [&] {
    static const int kGpus[] = {1, 1, 1, 1, 1, 2, 2, 4, 8};
    core::JobSpec spec;
    spec.name = "job";
    spec.gpus = kGpus[rng() % std::size(kGpus)];
    spec.elastic = rng() % 5 == 0;
    const std::string json =
        "{\"name\":\"job\",\"gpus\":" + std::to_string(spec.gpus) +
        ",\"command\":\"true\"" + (spec.elastic ? ",\"elastic\":true}" : "}");
    auto id = (*store)->InsertJob(json, now_us);
    if (!id.ok()) Die(id.status().ToString());
    ++b.jobs;
    feed(core::JobArrived{core::JobId(static_cast<int32_t>(*id)), spec});
  };
  // About 1.3 jobs a GPU: some time-slice.
  const int64_t initial = servers * 8 * 13 / 10 / 2;
  for (int64_t i = 0; i < initial; ++i) submit();
  int64_t round = 0;
  while (b.events < events) {
    now_us += 1'000'000;
    ++round;
    std::vector<core::Action> done;
    done.swap(pending);
    for (const core::Action& a : done) {
      if (b.events >= events) break;
      feed(core::ActionDone{a.id, a.job, core::Duration::Millis(500)});
    }
    if (b.events < events) feed(core::Tick{});
    // Rates every 2 s (the daemon's --profile-interval-s).
    std::vector<core::JobId> reporting;
    sched.state().ForEachJob([&](const core::Job& j) {
      if (j.state == core::JobState::kRunning && !j.busy() &&
          (j.id.value + round) % 2 == 0) {
        reporting.push_back(j.id);
      }
    });
    for (core::JobId id : reporting) {
      if (b.events >= events) break;
      feed(core::ProfileReport{id, 5.0 + id.value % 7, round * 10 + id.value,
                               4.0, 0.6});
    }
    // Some running jobs end; as many arrive.
    std::vector<core::JobId> ending;
    sched.state().ForEachJob([&](const core::Job& j) {
      if (j.state == core::JobState::kRunning && !j.busy() &&
          rng() % 400 == 0) {
        ending.push_back(j.id);
      }
    });
    for (core::JobId id : ending) {
      if (b.events >= events) break;
      feed(core::JobFinished{id, true});
      if (b.events < events) submit();
    }
  }
  b.final_snapshot = sched.Snapshot();
  b.build_s = Ms(t0) / 1000;
  return b;
}

// Starts a daemon on `db` and returns how long Start took (open, restore,
// replay, serve), in ms.
double Recover(const std::string& db) {
  runtime::SchedulerOptions o;
  o.listen = "127.0.0.1:0";
  o.db_path = db;
  o.agent_timeout_s = 3600;
  o.snapshot_every_events = 0;  // leave the database as it is
  const auto t0 = Clock::now();
  auto s = runtime::SchedulerServer::Start(o);
  const double ms = Ms(t0);
  if (!s.ok()) Die(s.status().ToString());
  (*s)->Shutdown();
  return ms;
}

void CopyDb(const std::string& from, const std::string& to) {
  fs::remove(to);
  fs::remove(to + "-wal");
  fs::remove(to + "-shm");
  fs::copy_file(from, to);
}

}  // namespace

int main(int argc, char** argv) {
  int servers = 250;
  int64_t events = 500'000;
  int64_t tail = 50'000;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--servers") && i + 1 < argc) {
      servers = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--events") && i + 1 < argc) {
      events = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--tail") && i + 1 < argc) {
      tail = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      Die(std::string("unknown argument ") + argv[i]);
    }
  }
  if (servers < 1 || tail < 1 || events <= tail + servers || reps < 1) {
    Die("need --servers >= 1, --tail >= 1, --events > tail + servers");
  }
  const fs::path dir = fs::temp_directory_path() /
                       ("gandiva-bench-recovery-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string full = (dir / "full.db").string();

  double load[3];
  if (getloadavg(load, 3) == 3) {
    std::printf("load average %.2f %.2f %.2f\n", load[0], load[1], load[2]);
  }
  std::printf("building a log of %lld events on %d servers x 8 GPUs...\n",
              static_cast<long long>(events), servers);
  std::fflush(stdout);
  const Built b = Build(full, servers, events, tail);
  std::printf(
      "built in %.1f s: %lld jobs, database %.1f MB (%.0f bytes an "
      "event)\n",
      b.build_s, static_cast<long long>(b.jobs),
      static_cast<double>(fs::file_size(full)) / 1e6,
      static_cast<double>(fs::file_size(full)) / static_cast<double>(events));

  // The compacted copy: the snapshot at `events - tail`, the tail logged.
  const std::string compacted = (dir / "compacted.db").string();
  CopyDb(full, compacted);
  {
    auto store = runtime::Store::Open(compacted);
    if (!store.ok()) Die(store.status().ToString());
    const std::string daemon =
        "{\"version\":1,\"clock_us\":" + std::to_string(b.snapshot_time_us) +
        ",\"jobs\":{},\"pending\":[]}";
    if (auto st = (*store)->WriteSnapshot(
            {b.snapshot_seq, b.snapshot_time_us, b.snapshot, daemon});
        !st.ok()) {
      Die(st.ToString());
    }
    for (;;) {  // as the daemon does after a compaction
      auto n = (*store)->DeleteCompactedEvents(kChunk);
      if (!n.ok()) Die(n.status().ToString());
      if (*n < kChunk) break;
    }
  }

  std::vector<double> whole, from_snapshot;
  for (int r = 0; r < reps; ++r) {
    const std::string a = (dir / "a.db").string();
    CopyDb(full, a);
    whole.push_back(Recover(a));
    CopyDb(compacted, a);
    from_snapshot.push_back(Recover(a));
  }

  // The core alone, at the end state.
  std::vector<double> save_ms, restore_ms;
  for (int r = 0; r < std::max(reps, 5); ++r) {
    core::Scheduler a(DaemonPolicy());
    if (!a.Restore(b.final_snapshot).ok()) Die("restore failed");
    auto t0 = Clock::now();
    const std::string bytes = a.Snapshot();
    save_ms.push_back(Ms(t0));
    core::Scheduler c(DaemonPolicy());
    t0 = Clock::now();
    if (!c.Restore(bytes).ok()) Die("restore failed");
    restore_ms.push_back(Ms(t0));
  }

  // One compaction of the tail as the daemon does it, each step a hold of
  // its event loop: the snapshot written, then its events deleted a chunk
  // per loop iteration.
  double write_ms = 0;
  std::vector<double> chunk_ms;
  {
    const std::string a = (dir / "a.db").string();
    CopyDb(compacted, a);
    auto store = runtime::Store::Open(a);
    if (!store.ok()) Die(store.status().ToString());
    const int64_t last = (*store)->LastEventSeq();
    auto t0 = Clock::now();
    if (auto st = (*store)->WriteSnapshot(
            {last, 0, b.final_snapshot, "{\"version\":1}"});
        !st.ok()) {
      Die(st.ToString());
    }
    write_ms = Ms(t0);
    for (;;) {
      t0 = Clock::now();
      auto n = (*store)->DeleteCompactedEvents(kChunk);
      if (!n.ok()) Die(n.status().ToString());
      chunk_ms.push_back(Ms(t0));
      if (*n < kChunk) break;
    }
  }

  const double w = Median(whole), f = Median(from_snapshot);
  std::printf(
      "\nrecovery (gandiva-scheduler start on the database), median "
      "of %d\n",
      reps);
  std::printf(
      "  %-44s %10.0f ms  (%.0f events/s)\n",
      ("whole log: " + std::to_string(events) + " events replayed").c_str(), w,
      static_cast<double>(events) / (w / 1000));
  std::printf(
      "  %-44s %10.0f ms  (x%.1f faster)\n",
      ("snapshot + " + std::to_string(tail) + " events replayed").c_str(), f,
      w / f);
  std::printf(
      "core snapshot at the end (%lld jobs, %d GPUs): %.2f MB, "
      "Snapshot %.1f ms, Restore %.1f ms (medians)\n",
      static_cast<long long>(b.jobs), servers * 8,
      static_cast<double>(b.final_snapshot.size()) / 1e6, Median(save_ms),
      Median(restore_ms));
  std::printf(
      "one compaction of %lld events: snapshot written in %.0f ms, events "
      "deleted in %zu chunks of %lld (median %.0f ms, longest %.0f ms)\n",
      static_cast<long long>(tail), write_ms, chunk_ms.size(),
      static_cast<long long>(kChunk), Median(chunk_ms),
      *std::max_element(chunk_ms.begin(), chunk_ms.end()));
  fs::remove_all(dir);
  return 0;
}
