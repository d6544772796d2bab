// The daemon's store, SQLite against etcd, side by side; printed (asserts
// nothing). Starts its own one-member etcd on loopback (the `etcd` binary,
// Debian's etcd-server), with its data on the same disk as the SQLite file.
//
// Per store: appending events (each its own transaction: the latency an
// event fed alone pays; then 10 and 100 in one AppendEvents, as the daemon
// logs the profile reports of a loop pass together), writing a batch of
// job rows and history (what the daemon writes after each loop
// iteration), reading the log back (what a recovery reads), writing
// and reading a snapshot, and archiving ended jobs (500 at a time, as a
// compaction does) and deleting them from the archive (--keep-archived-for:
// Store::PruneChunk() at a time, as the daemon does, each chunk holding its
// event loop).
//
//   gandiva_bench_store [--events N] [--read N] [--snapshot-mb M]
//                       [--archive N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "runtime/scheduler/etcd_store.h"
#include "runtime/scheduler/etcd_test_util.h"
#include "runtime/scheduler/leadership.h"
#include "runtime/scheduler/store.h"

namespace {

namespace fs = std::filesystem;
using namespace gandiva;
using namespace gandiva::runtime;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gandiva_bench_store: %s\n", what.c_str());
  std::exit(1);
}

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since)
      .count();
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<size_t>(q * (v.size() - 1))];
}

void Check(const core::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

struct Figures {
  double append_p50 = 0, append_p99 = 0;
  // Per event, appended 10 and 100 at a time (median of the batches).
  double append10_p50 = 0, append100_p50 = 0;
  double batch_p50 = 0;
  double read_per_s = 0;
  double snap_write_ms = 0, snap_read_ms = 0;
  // Per chunk of kChunk jobs archived.
  double archive_p50 = 0;
  // The archived jobs of one name (kNames names; median of the names
  // looked up), and the whole archive read kChunk rows a call (what a
  // lookup without an index reads).
  double lookup_p50 = 0, read_archive_ms = 0;
  // Deleting from the archive, `chunk` jobs a call: the median and the
  // longest call, and the time per 1,000 jobs in all.
  struct Prune {
    int64_t chunk = 0;
    double p50 = 0, max = 0, per_1000 = 0;
  };
  Prune prune_500;   // the first half of the archive, 500 a call
  Prune prune_pass;  // the second half, Store::PruneChunk() a call
};

constexpr int kChunk = 500;   // as a compaction archives them
constexpr int kNames = 1000;  // the archived jobs' names: sweep-0 ...

// A profile event as the daemon logs it.
const std::string kEvent =
    "{\"kind\":\"ProfileReport\",\"job\":123,\"minibatch_rate\":12.5,"
    "\"minibatches\":4567,\"gpu_utilization\":0.8,\"memory_gb\":3.25}";

Figures Measure(Store& st, int events, int read, size_t snapshot_bytes,
                int archive) {
  Figures f;
  std::vector<double> lat;
  for (int i = 0; i < events; ++i) {
    const auto t0 = Clock::now();
    Check(st.AppendEvent(i, "ProfileReport", kEvent).status(), "append");
    lat.push_back(Ms(t0));
  }
  f.append_p50 = Quantile(lat, 0.5);
  f.append_p99 = Quantile(lat, 0.99);
  auto together = [&](size_t n) {
    const std::vector<EventRow> rows(n,
                                     EventRow{0, 1, "ProfileReport", kEvent});
    std::vector<double> per;
    for (int i = 0; i < std::max<int>(3, events / static_cast<int>(n)); ++i) {
      const auto t0 = Clock::now();
      Store::Appended a = st.AppendEvents(rows);
      Check(a.status, "append together");
      per.push_back(Ms(t0) / static_cast<double>(n));
    }
    return Quantile(per, 0.5);
  };
  f.append10_p50 = together(10);
  f.append100_p50 = together(100);

  // Rows as the daemon writes them: 100 changed jobs, 20 history lines.
  std::vector<int64_t> ids;
  for (int i = 0; i < 100; ++i) {
    auto id = st.InsertJob("{\"name\":\"j\",\"gpus\":1}", i);
    Check(id.status(), "insert");
    ids.push_back(*id);
  }
  std::vector<double> batch;
  for (int rep = 0; rep < 20; ++rep) {
    WriteBatch b;
    for (int64_t id : ids) {
      JobRow r;
      r.id = id;
      r.spec_json = "{\"name\":\"j\",\"gpus\":1}";
      r.state = 3;
      r.minibatches = rep * 100;
      r.minibatch_rate = 12.5;
      r.server = "server-17";
      r.gpus_json = "[0]";
      b.jobs.push_back(r);
    }
    for (int i = 0; i < 20; ++i) {
      b.history.push_back(HistoryRow{ids[i], rep, "suspend", true, 1234, ""});
    }
    const auto t0 = Clock::now();
    Check(st.Write(b), "write");
    batch.push_back(Ms(t0));
  }
  f.batch_p50 = Quantile(batch, 0.5);

  // The log a recovery reads: `read` events in all.
  for (int i = events; i < read; ++i) {
    Check(st.AppendEvent(i, "ProfileReport", kEvent).status(), "append");
  }
  const auto t0 = Clock::now();
  int64_t n = 0;
  Check(st.ForEachEvent(
            [&](const EventRow&) {
              ++n;
              return core::Status::Ok();
            },
            0),
        "read");
  f.read_per_s = n / (Ms(t0) / 1000);

  std::string snap(snapshot_bytes, '\0');
  for (size_t i = 0; i < snap.size(); ++i) {
    snap[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  const auto t1 = Clock::now();
  Check(st.WriteSnapshot({st.LastEventSeq(), 1, snap, "{}"}), "snapshot");
  f.snap_write_ms = Ms(t1);
  const auto t2 = Clock::now();
  auto back = st.LoadSnapshot();
  Check(back.status(), "load snapshot");
  f.snap_read_ms = Ms(t2);
  if (!back->has_value() || (*back)->core != snap) Die("snapshot differs");

  // `archive` ended jobs with 4 history lines each, archived, looked up
  // by name and pruned.
  std::vector<double> archived;
  auto spec_of = [](int k) {
    return "{\"name\":\"sweep-" + std::to_string(k % kNames) +
           "\",\"gpus\":1,\"command\":[\"python3\",\"train.py\",\"--lr\","
           "\"0.001\"]}";
  };
  for (int done = 0; done < archive; done += kChunk) {
    const int chunk = std::min(kChunk, archive - done);
    std::vector<std::string> specs;
    for (int i = 0; i < chunk; ++i) specs.push_back(spec_of(done + i));
    Store::Inserted in = st.InsertJobs(specs, done);
    Check(in.status, "insert jobs");
    WriteBatch b;
    for (int i = 0; i < chunk; ++i) {
      JobRow r;
      r.id = in.first_id + i;
      r.spec_json = specs[static_cast<size_t>(i)];
      r.state = 7;
      r.submitted_us = done;
      r.started_us = done + 1;
      r.ended_us = done + i + 2;
      r.exit_code = 0;
      r.minibatches = 12345;
      r.server = "server-17";
      r.gpus_json = "[3]";
      for (const char* action : {"start", "suspend", "resume", "exit"}) {
        b.history.push_back(HistoryRow{r.id, done, action, true, 1234, ""});
      }
      b.jobs.push_back(std::move(r));
    }
    Check(st.Write(b), "write jobs");
    const auto t3 = Clock::now();
    Check(st.ArchiveJobs(b.jobs), "archive");
    archived.push_back(Ms(t3));
  }
  std::vector<double> lookups;
  for (int k = 0; k < 21 && archive > 0; ++k) {
    const int name = k * 37 % std::min(kNames, archive);
    const auto t = Clock::now();
    auto rows = st.LoadArchivedJobs(0, 1000, "sweep-" + std::to_string(name));
    Check(rows.status(), "look up a name");
    lookups.push_back(Ms(t));
    const size_t want = static_cast<size_t>((archive - 1 - name) / kNames + 1);
    if (rows->size() != want) Die("a name's lookup found the wrong jobs");
  }
  f.lookup_p50 = lookups.empty() ? 0 : Quantile(lookups, 0.5);
  const auto t4 = Clock::now();
  int64_t read_back = 0;
  for (int64_t after = 0;;) {
    auto rows = st.LoadArchivedJobs(after, kChunk, std::nullopt);
    Check(rows.status(), "read the archive");
    if (rows->empty()) break;
    read_back += static_cast<int64_t>(rows->size());
    after = rows->back().id;
  }
  f.read_archive_ms = Ms(t4);
  if (read_back != archive) Die("the archive read back is not all of it");
  // The first half 500 a call, the rest PruneChunk() a call (the jobs
  // ended in id order: the k-th, from 0, at k + 2).
  auto prune = [&](int64_t ended_before, int64_t chunk) {
    Figures::Prune p;
    p.chunk = chunk;
    std::vector<double> ms;
    int64_t deleted = 0;
    double total_ms = 0;
    for (;;) {
      const auto t3 = Clock::now();
      auto gone = st.PruneArchive(ended_before, chunk);
      Check(gone.status(), "prune");
      if (*gone == 0) break;
      ms.push_back(Ms(t3));
      total_ms += ms.back();
      deleted += *gone;
      if (*gone < chunk) break;
    }
    p.p50 = Quantile(ms, 0.5);
    p.max = ms.empty() ? 0 : Quantile(ms, 1);
    p.per_1000 =
        deleted > 0 ? total_ms * 1000 / static_cast<double>(deleted) : 0;
    return p;
  };
  f.prune_500 = prune(archive / 2 + 2, kChunk);
  f.prune_pass = prune(std::numeric_limits<int64_t>::max(), st.PruneChunk());
  f.archive_p50 = Quantile(archived, 0.5);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int events = 2000, read = 50'000;
  double snapshot_mb = 2;
  int archive = 20'000;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Die(std::string(argv[i]) + ": needs a value");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--events")) {
      events = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--read")) {
      read = std::atoi(next());
    } else if (!std::strcmp(argv[i], "--snapshot-mb")) {
      snapshot_mb = std::atof(next());
    } else if (!std::strcmp(argv[i], "--archive")) {
      archive = std::atoi(next());
    } else {
      Die(std::string("unknown flag ") + argv[i] +
          " (flags: --events N --read N --snapshot-mb M --archive N)");
    }
  }
  if (events < 1 || read < events || snapshot_mb <= 0 || archive < 0) {
    Die("need --events >= 1, --read >= --events, --snapshot-mb > 0, "
        "--archive >= 0");
  }
  const size_t snap_bytes = static_cast<size_t>(snapshot_mb * (1 << 20));
  const fs::path dir = fs::temp_directory_path() /
                       ("gandiva-bench-store-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  auto sqlite = Store::Open((dir / "normal.db").string());
  Check(sqlite.status(), "sqlite");
  const Figures n = Measure(**sqlite, events, read, snap_bytes, archive);
  auto durable = Store::Open((dir / "full.db").string(), /*durable_sync=*/true);
  Check(durable.status(), "sqlite");
  const Figures d = Measure(**durable, events, read, snap_bytes, archive);

  std::string error;
  auto etcd = EtcdForTest::Start(&error);
  if (etcd == nullptr) Die(error);
  auto lead = Leadership::Create(etcd->Client(), {"/bench/", 5, "bench"});
  Check(lead.status(), "leadership");
  Check((*lead)->Campaign([](const std::string&) {}), "campaign");
  auto es = EtcdStore::Open(*lead);
  Check(es.status(), "etcd store");
  const Figures e = Measure(**es, events, read, snap_bytes, archive);
  fs::remove_all(dir);

  std::printf(
      "gandiva_bench_store: %d appends, a 100-row batch x20, %d "
      "events read back, a %.1f MB snapshot, %d jobs archived and "
      "deleted\n\n",
      events, read, snapshot_mb, archive);
  std::printf(
      "| | SQLite (synchronous=NORMAL, the default) | SQLite "
      "(--durable-sync) | etcd (1 member, loopback, fsync per write) |\n"
      "|---|---|---|---|\n");
  auto row = [](const char* what, double a, double b, double c,
                const char* unit) {
    std::printf("| %s | %.3f %s | %.3f %s | %.3f %s |\n", what, a, unit, b,
                unit, c, unit);
  };
  row("append one event, median", n.append_p50, d.append_p50, e.append_p50,
      "ms");
  row("append one event, p99", n.append_p99, d.append_p99, e.append_p99, "ms");
  row("append 10 events together, median per event", n.append10_p50,
      d.append10_p50, e.append10_p50, "ms");
  row("append 100 events together, median per event", n.append100_p50,
      d.append100_p50, e.append100_p50, "ms");
  std::printf(
      "| events logged a second, one at a time / 100 together | %.0f / %.0f "
      "| %.0f / %.0f | %.0f / %.0f |\n",
      1000 / n.append_p50, 1000 / n.append100_p50, 1000 / d.append_p50,
      1000 / d.append100_p50, 1000 / e.append_p50, 1000 / e.append100_p50);
  row("write 100 job rows + 20 history, median", n.batch_p50, d.batch_p50,
      e.batch_p50, "ms");
  std::printf(
      "| read the log back | %.0f events/s | %.0f events/s | %.0f "
      "events/s |\n",
      n.read_per_s, d.read_per_s, e.read_per_s);
  row("write the snapshot", n.snap_write_ms, d.snap_write_ms, e.snap_write_ms,
      "ms");
  row("read the snapshot", n.snap_read_ms, d.snap_read_ms, e.snap_read_ms,
      "ms");
  row("archive 500 ended jobs, median", n.archive_p50, d.archive_p50,
      e.archive_p50, "ms");
  row("look up the archived jobs of one name (of 1,000), median", n.lookup_p50,
      d.lookup_p50, e.lookup_p50, "ms");
  row("read the whole archive, 500 a call", n.read_archive_ms,
      d.read_archive_ms, e.read_archive_ms, "ms");
  for (const auto& [label, which] :
       {std::pair{"500 a call", &Figures::prune_500},
        std::pair{"Store::PruneChunk() a call, as a pass of the loop",
                  &Figures::prune_pass}}) {
    const Figures::Prune &a = n.*which, &b = d.*which, &c = e.*which;
    std::printf(
        "| delete archived jobs (4 history lines each), %s: jobs a call | "
        "%lld | %lld | %lld |\n",
        label, static_cast<long long>(a.chunk), static_cast<long long>(b.chunk),
        static_cast<long long>(c.chunk));
    row("... a call, median", a.p50, b.p50, c.p50, "ms");
    row("... a call, the longest", a.max, b.max, c.max, "ms");
    row("... in all, per 1,000 jobs", a.per_1000, b.per_1000, c.per_1000, "ms");
  }
  return 0;
}
