#include "runtime/scheduler/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <tuple>

#include "core/policies/queues.h"
#include "runtime/scheduler/etcd_store.h"
#include "runtime/scheduler/etcd_test_util.h"
#include "runtime/scheduler/event_codec.h"
#include "runtime/scheduler/leadership.h"

namespace gandiva::runtime {
namespace {

// Another connection holding an SQLite database's write lock while it
// lives: a write of the store under test waits out its busy timeout (5 s)
// and fails.
class WriteLock {
 public:
  explicit WriteLock(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr),
              SQLITE_OK);
  }
  ~WriteLock() {
    EXPECT_EQ(sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db_);
  }
  WriteLock(const WriteLock&) = delete;
  WriteLock& operator=(const WriteLock&) = delete;

 private:
  sqlite3* db_ = nullptr;
};

// The same tests for both implementations: SQLite, and etcd (a one-member
// cluster started for the test, with this process leading).
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string name =
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) {
      if (c == '/') c = '-';
    }
    dir_ = std::filesystem::temp_directory_path() /
           ("gandiva-store-test-" + std::to_string(getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "g.db").string();
    if (GetParam() == "etcd") {
      std::string error;
      etcd_ = EtcdForTest::Start(&error);
      ASSERT_NE(etcd_, nullptr) << error;
      auto lead = Leadership::Create(etcd_->Client(), {"/t/", 5, "test"});
      ASSERT_TRUE(lead.ok()) << lead.status().ToString();
      lead_ = *lead;
      ASSERT_TRUE(lead_->Campaign([](const std::string&) {}).ok());
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Opens the store afresh (as a restarted daemon does).
  core::StatusOr<std::unique_ptr<Store>> Open() {
    if (GetParam() == "sqlite") return Store::Open(path_);
    auto s = EtcdStore::Open(lead_);
    if (!s.ok()) return s.status();
    return std::unique_ptr<Store>(std::move(*s));
  }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<EtcdForTest> etcd_;
  std::shared_ptr<Leadership> lead_;
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values("sqlite", "etcd"),
                         [](const auto& i) { return i.param; });

TEST_P(StoreTest, RoundTripAndReopen) {
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    ASSERT_TRUE(st.SetMeta("policy", "{\"x\":1}").ok());
    auto a = st.InsertJob("{\"name\":\"a\"}", 10);
    auto b = st.InsertJob("{\"name\":\"b\"}", 20);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(*a, 1);
    EXPECT_EQ(*b, 2);
    WriteBatch batch;
    JobRow row;
    row.id = 2;
    row.spec_json = "{\"name\":\"b\"}";
    row.state = 5;
    row.submitted_us = 20;
    row.started_us = 25;
    row.ended_us = 30;
    row.exit_code = 0;
    row.minibatches = 7;
    row.server = "s0";
    row.gpus_json = "[0,1]";
    row.suspends = 3;
    row.metric = 0.75;
    row.metric_minibatches = 6;
    row.metric_reports = 2;
    batch.jobs.push_back(row);
    batch.servers.push_back(ServerRow{0, "s0", "127.0.0.1:1", "[]", 1, 1});
    batch.servers.push_back(
        ServerRow{1, "s1", "127.0.0.1:2", "[]", 2, 1, 1'700'000'000, true});
    batch.history.push_back(
        HistoryRow{2, 25, "start", true, 100, "gpus [0,1]"});
    batch.history.push_back(HistoryRow{2, 26, "suspend", false, 5, "why"});
    ASSERT_TRUE(st.Write(batch).ok());
    ASSERT_TRUE(st.AppendEvent(1, "Tick", "{\"kind\":\"Tick\"}").ok());
    ASSERT_TRUE(st.AppendEvent(2, "Tick", "{\"kind\":\"Tick\"}").ok());
  }
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  auto meta = st.GetMeta("policy");
  ASSERT_TRUE(meta.ok());
  ASSERT_TRUE(meta->has_value());
  EXPECT_EQ(**meta, "{\"x\":1}");
  auto missing = st.GetMeta("nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());

  auto jobs = st.LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].state, 1);
  EXPECT_FALSE((*jobs)[0].exit_code.has_value());
  const JobRow& b = (*jobs)[1];
  EXPECT_EQ(b.state, 5);
  EXPECT_EQ(b.exit_code, 0);
  EXPECT_EQ(b.minibatches, 7);
  EXPECT_EQ(b.gpus_json, "[0,1]");
  EXPECT_EQ(b.suspends, 3);
  EXPECT_EQ(b.ended_us, 30);
  EXPECT_EQ(b.metric, 0.75);
  EXPECT_EQ(b.metric_minibatches, 6);
  EXPECT_EQ(b.metric_reports, 2);

  auto servers = st.LoadServers();
  ASSERT_TRUE(servers.ok());
  ASSERT_EQ(servers->size(), 2u);
  EXPECT_EQ((*servers)[0].name, "s0");
  EXPECT_EQ((*servers)[0].away_since_us, 0);
  EXPECT_FALSE((*servers)[0].away_cordon);
  EXPECT_EQ((*servers)[1].sockets, 2);
  EXPECT_EQ((*servers)[1].away_since_us, 1'700'000'000);
  EXPECT_TRUE((*servers)[1].away_cordon);

  auto h = st.History(2);
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->size(), 2u);
  EXPECT_EQ((*h)[0].action, "start");
  EXPECT_FALSE((*h)[1].ok);
  EXPECT_EQ((*h)[1].detail, "why");

  std::vector<int64_t> times;
  ASSERT_TRUE(st.ForEachEvent([&](const EventRow& e) {
                  times.push_back(e.time_us);
                  return core::Status::Ok();
                }).ok());
  EXPECT_EQ(times, (std::vector<int64_t>{1, 2}));
  // Ids stay dense after a reopen.
  auto c = st.InsertJob("{}", 30);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, 3);
}

TEST_P(StoreTest, ASnapshotCompactsTheEventsItIncludes) {
  auto seqs = [](Store& st, int64_t after = 0) {
    std::vector<int64_t> out;
    EXPECT_TRUE(st.ForEachEvent(
                      [&](const EventRow& e) {
                        out.push_back(e.seq);
                        return core::Status::Ok();
                      },
                      after)
                    .ok());
    return out;
  };
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    auto none = st.LoadSnapshot();
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    for (int i = 1; i <= 5; ++i) {
      auto seq = st.AppendEvent(100 * i, "Tick", "{}");
      ASSERT_TRUE(seq.ok());
      EXPECT_EQ(*seq, i);
    }
    EXPECT_EQ(seqs(st, 3), (std::vector<int64_t>{4, 5}));
    // Not an event logged yet: refused, nothing changes.
    const core::Status bad = st.WriteSnapshot({6, 600, "x", "{}"});
    EXPECT_EQ(bad.code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("last event logged is 5"), std::string::npos)
        << bad.message();
    EXPECT_EQ(*st.EventCount(), 5);

    std::string core_bytes("a\0b\xff", 4);  // binary, NULs included
    ASSERT_TRUE(st.WriteSnapshot({3, 300, core_bytes, "{\"d\":1}"}).ok());
    // The events it includes go a chunk at a time.
    EXPECT_EQ(*st.DeleteCompactedEvents(2), 2);
    EXPECT_EQ(seqs(st), (std::vector<int64_t>{3, 4, 5}));
    EXPECT_EQ(*st.DeleteCompactedEvents(2), 1);
    EXPECT_EQ(*st.DeleteCompactedEvents(2), 0);
    EXPECT_EQ(*st.EventCount(), 2);
    EXPECT_EQ(seqs(st), (std::vector<int64_t>{4, 5}));
    // A later snapshot replaces it and takes every event.
    ASSERT_TRUE(st.WriteSnapshot({5, 500, core_bytes + "c", "{}"}).ok());
    EXPECT_EQ(*st.DeleteCompactedEvents(1000), 2);
    EXPECT_EQ(*st.EventCount(), 0);
    auto snap = st.LoadSnapshot();
    ASSERT_TRUE(snap.ok() && snap->has_value());
    EXPECT_EQ((*snap)->seq, 5);
    EXPECT_EQ((*snap)->time_us, 500);
    EXPECT_EQ((*snap)->core, core_bytes + "c");
  }
  // Reopened with no event left: numbering goes on after the snapshot.
  auto s = Open();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->LastEventSeq(), 5);
  auto seq = (*s)->AppendEvent(700, "Tick", "{}");
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(*seq, 6);
  EXPECT_EQ(seqs(**s, 5), (std::vector<int64_t>{6}));
  auto snap = (*s)->LoadSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_EQ((*snap)->core, std::string("a\0b\xff", 4) + "c");
}

// Events appended together take the next seqs in order, however many
// transactions the store needs for them (etcd: 100 operations or 1 MiB each).
TEST_P(StoreTest, EventsAppendedTogetherAreLoggedInOrder) {
  auto events = [](int n, size_t bytes, int64_t t0) {
    std::vector<EventRow> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(EventRow{0, t0 + i, "ProfileReport",
                             std::to_string(t0 + i) + std::string(bytes, 'x')});
    }
    return out;
  };
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    EXPECT_EQ(st.AppendEvents({}).count, 0u);
    ASSERT_TRUE(st.AppendEvent(1, "Tick", "{}").ok());
    // More events than one etcd transaction takes, then more bytes.
    const std::vector<EventRow> many = events(250, 10, 100);
    Store::Appended a = st.AppendEvents(many);
    ASSERT_TRUE(a.status.ok()) << a.status.ToString();
    EXPECT_EQ(a.count, 250u);
    EXPECT_EQ(a.last_seq, 251);
    const std::vector<EventRow> big = events(5, 400 << 10, 1000);
    a = st.AppendEvents(big);
    ASSERT_TRUE(a.status.ok()) << a.status.ToString();
    EXPECT_EQ(a.count, 5u);
    EXPECT_EQ(a.last_seq, 256);
  }
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->LastEventSeq(), 256);
  EXPECT_EQ(*(*s)->EventCount(), 256);
  std::vector<EventRow> read;
  ASSERT_TRUE((*s)->ForEachEvent(
                      [&](const EventRow& e) {
                        read.push_back(e);
                        return core::Status::Ok();
                      },
                      0)
                  .ok());
  ASSERT_EQ(read.size(), 256u);
  for (size_t i = 1; i < read.size(); ++i) {
    const int64_t t = i <= 250 ? 100 + static_cast<int64_t>(i) - 1
                               : 1000 + static_cast<int64_t>(i) - 251;
    SCOPED_TRACE(i);
    EXPECT_EQ(read[i].seq, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(read[i].time_us, t);
    EXPECT_EQ(read[i].kind, "ProfileReport");
    EXPECT_EQ(read[i].json.substr(0, read[i].json.find('x')),
              std::to_string(t));
  }
  EXPECT_EQ(read[255].json.size(), std::to_string(1004).size() + (400 << 10));
  auto next = (*s)->AppendEvent(2000, "Tick", "{}");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, 257);
}

// A start looks for the first change of the queues in the log: found
// after any seq, by kind alone, and none past the last; a kind that is no
// name is refused.
TEST_P(StoreTest, TheFirstEventOfAKindIsFoundAfterAnySeq) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  auto first = st.FirstEventOfKind("QueuesChanged", 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->has_value());
  const std::vector<EventRow> log = {
      {0, 1, "Tick", "{}"},          {0, 2, "QueuesChanged", "{\"a\":1}"},
      {0, 3, "ProfileReport", "{}"}, {0, 4, "QueuesChanged", "{\"b\":2}"},
      {0, 5, "Tick", "{}"},
  };
  ASSERT_TRUE(st.AppendEvents(log).status.ok());
  auto at = [&](const std::string& kind, int64_t after) -> int64_t {
    auto e = st.FirstEventOfKind(kind, after);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() && e->has_value() ? (*e)->seq : 0;
  };
  EXPECT_EQ(at("QueuesChanged", 0), 2);
  EXPECT_EQ(at("QueuesChanged", 1), 2);
  EXPECT_EQ(at("QueuesChanged", 2), 4);
  EXPECT_EQ(at("QueuesChanged", 4), 0);
  EXPECT_EQ(at("Tick", 1), 5);
  EXPECT_EQ(at("JobArrived", 0), 0);
  auto e = st.FirstEventOfKind("QueuesChanged", 3);
  ASSERT_TRUE(e.ok() && e->has_value());
  EXPECT_EQ((*e)->time_us, 4);
  EXPECT_EQ((*e)->kind, "QueuesChanged");
  EXPECT_EQ((*e)->json, "{\"b\":2}");
  if (GetParam() == "sqlite") {
    auto bad = st.FirstEventOfKind("Tick' OR '1", 0);
    EXPECT_EQ(bad.status().code(), core::StatusCode::kInvalidArgument);
  }
}

// A batch that fails says how many of its events were logged: on etcd
// (here with an event over etcd's request limit, in the second
// transaction) those before the transaction that failed, and no gap; on
// SQLite (here with another connection holding the write lock past the
// busy timeout, 5 s) none.
TEST_P(StoreTest, AnEventsBatchThatFailsLogsAPrefix) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  std::vector<EventRow> batch;
  for (int i = 0; i < 150; ++i) batch.push_back(EventRow{0, i, "Tick", "{}"});
  std::optional<WriteLock> lock;
  if (GetParam() == "etcd") {
    batch[120].json = std::string(2 << 20, 'x');
  } else {
    lock.emplace(path_);
  }
  Store::Appended a = st.AppendEvents(batch);
  EXPECT_FALSE(a.status.ok());
  if (lock.has_value()) {
    EXPECT_EQ(a.count, 0u);
    lock.reset();
  } else {
    EXPECT_EQ(a.count, 120u);  // 99 + 21 (the large one alone fails)
    EXPECT_EQ(a.last_seq, 120);
  }
  EXPECT_EQ(st.LastEventSeq(), static_cast<int64_t>(a.count));
  EXPECT_EQ(*st.EventCount(), static_cast<int64_t>(a.count));
  // The log goes on from there.
  auto next = st.AppendEvent(1, "Tick", "{}");
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, static_cast<int64_t>(a.count) + 1);
}

// Jobs stored together get the next ids, in order (on etcd here in three
// transactions), survive a reopen, and the ids go on after them.
TEST_P(StoreTest, JobsInsertedTogetherGetConsecutiveIds) {
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    ASSERT_EQ(*st.InsertJob("{\"name\":\"first\"}", 5), 1);
    std::vector<std::string> specs;
    for (int i = 0; i < 250; ++i) {
      specs.push_back("{\"name\":\"j" + std::to_string(i) + "\"}");
    }
    Store::Inserted in = st.InsertJobs(specs, 10);
    ASSERT_TRUE(in.status.ok()) << in.status.ToString();
    EXPECT_EQ(in.count, 250u);
    EXPECT_EQ(in.first_id, 2);
    EXPECT_EQ(st.InsertJobs({}, 11).count, 0u);
  }
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  auto jobs = st.LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 251u);
  for (int i = 0; i < 250; ++i) {
    const JobRow& r = (*jobs)[static_cast<size_t>(i) + 1];
    EXPECT_EQ(r.id, i + 2);
    EXPECT_EQ(r.spec_json, "{\"name\":\"j" + std::to_string(i) + "\"}");
    EXPECT_EQ(r.state, 1);
    EXPECT_EQ(r.submitted_us, 10);
  }
  EXPECT_EQ(*st.InsertJob("{}", 12), 252);
}

// Ids a store never gave, marked lost (an agent holds such a job: the
// store was restored from an older backup), are not given from then on,
// after a reopen too, and are listed with those lost before; an id the
// store gave is not marked.
TEST_P(StoreTest, IdsMarkedLostAreNotGiven) {
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    ASSERT_EQ(st.InsertJobs(std::vector<std::string>(3, "{}"), 1).count, 3u);
    EXPECT_EQ(st.MarkJobIdsLost(2).value(),
              (std::pair<int64_t, int64_t>{0, 0}));
    EXPECT_EQ(st.MarkJobIdsLost(3).value(),
              (std::pair<int64_t, int64_t>{0, 0}));
    EXPECT_FALSE(st.GetMeta(kRestoreLostJobsMeta).value().has_value());
    EXPECT_EQ(st.MarkJobIdsLost(6).value(),
              (std::pair<int64_t, int64_t>{4, 6}));
    EXPECT_EQ(st.MarkJobIdsLost(5).value(),
              (std::pair<int64_t, int64_t>{0, 0}));
    EXPECT_EQ(*st.InsertJob("{}", 2), 7);
    EXPECT_EQ(st.MarkJobIdsLost(9).value(),
              (std::pair<int64_t, int64_t>{8, 9}));
    EXPECT_EQ(st.GetMeta(kRestoreLostJobsMeta).value(),
              std::optional<std::string>("4-6,8-9"));
  }
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  Store::Inserted in = st.InsertJobs(std::vector<std::string>(2, "{}"), 3);
  ASSERT_TRUE(in.status.ok()) << in.status.ToString();
  EXPECT_EQ(in.first_id, 10);
  EXPECT_EQ(st.MarkJobIdsLost(12).value(),
            (std::pair<int64_t, int64_t>{12, 12}));
  EXPECT_EQ(st.GetMeta(kRestoreLostJobsMeta).value(),
            std::optional<std::string>("4-6,8-9,12-12"));
  EXPECT_EQ(*st.InsertJob("{}", 4), 13);
  EXPECT_FALSE(st.LoadJob(5).value().has_value());
}

// A lost job adopted from the agent that runs it gets a row with its own id
// and is no longer lost, after a reopen too; ids given go on past the lost
// ones; an id that is not lost cannot be adopted.
TEST_P(StoreTest, ALostJobAdoptedGetsItsRowAndIsNoLongerLost) {
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    ASSERT_EQ(st.InsertJobs(std::vector<std::string>(2, "{}"), 1).count, 2u);
    EXPECT_EQ(st.MarkJobIdsLost(6).value(),
              (std::pair<int64_t, int64_t>{3, 6}));
    ASSERT_TRUE(st.AdoptJob(4, "{\"name\":\"four\"}", 77).ok());
    const auto row = st.LoadJob(4).value();
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->spec_json, "{\"name\":\"four\"}");
    EXPECT_EQ(row->submitted_us, 77);
    EXPECT_EQ(row->state, 1);
    EXPECT_EQ(st.GetMeta(kRestoreLostJobsMeta).value(),
              std::optional<std::string>("3-3,5-6"));
    for (int64_t id : {2, 4, 7}) {
      const core::Status again = st.AdoptJob(id, "{}", 1);
      EXPECT_EQ(again.code(), core::StatusCode::kFailedPrecondition) << id;
      EXPECT_NE(again.message().find("is not one a restore lost"),
                std::string::npos)
          << again.message();
    }
    ASSERT_TRUE(st.AdoptJob(6, "{}", 78).ok());
    EXPECT_EQ(*st.InsertJob("{}", 2), 7);
  }
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  EXPECT_EQ(st.GetMeta(kRestoreLostJobsMeta).value(),
            std::optional<std::string>("3-3,5-5"));
  std::vector<int64_t> ids;
  const auto rows = st.LoadJobs();
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  for (const JobRow& r : *rows) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 4, 6, 7}));
  EXPECT_EQ(*st.InsertJob("{}", 3), 8);
  ASSERT_TRUE(st.AdoptJob(3, "{}", 79).ok());
  ASSERT_TRUE(st.AdoptJob(5, "{}", 80).ok());
  EXPECT_EQ(st.GetMeta(kRestoreLostJobsMeta).value(),
            std::optional<std::string>(""));
  EXPECT_EQ(*st.InsertJob("{}", 4), 9);
}

// Archived jobs are left out of LoadJobs, from then on and after a reopen,
// and LoadJob still reads them; ids go on after them. 150 jobs: etcd moves
// them in several transactions.
TEST_P(StoreTest, ArchivedJobsAreLeftOutOfLoadJobsButStillRead) {
  std::vector<JobRow> rows;
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    std::vector<std::string> specs;
    for (int i = 0; i < 150; ++i) {
      specs.push_back("{\"name\":\"j" + std::to_string(i) + "\"}");
    }
    ASSERT_EQ(st.InsertJobs(specs, 10).count, 150u);
    WriteBatch batch;
    for (int i = 0; i < 150; ++i) {
      JobRow r;
      r.id = i + 1;
      r.spec_json = specs[static_cast<size_t>(i)];
      r.state = 7;
      r.submitted_us = 10;
      r.ended_us = 100 + i;
      r.exit_code = i % 3;
      r.minibatches = i * 10;
      r.gpus_json = "[0]";
      batch.jobs.push_back(r);
    }
    ASSERT_TRUE(st.Write(batch).ok());
    rows.assign(batch.jobs.begin(), batch.jobs.begin() + 120);
    const core::Status a = st.ArchiveJobs(rows);
    ASSERT_TRUE(a.ok()) << a.ToString();
    // Again, and a job never stored: passed by.
    JobRow unknown;
    unknown.id = 999;
    std::vector<JobRow> again = {rows[0], unknown};
    ASSERT_TRUE(st.ArchiveJobs(again).ok());
    auto jobs = st.LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 30u);
    EXPECT_EQ(jobs->front().id, 121);
  }
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  auto jobs = st.LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 30u);
  for (size_t i = 0; i < jobs->size(); ++i) {
    EXPECT_EQ((*jobs)[i].id, static_cast<int64_t>(121 + i));
  }
  for (int64_t id : {int64_t{1}, int64_t{77}, int64_t{120}, int64_t{121}}) {
    auto one = st.LoadJob(id);
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    ASSERT_TRUE(one->has_value()) << id;
    EXPECT_EQ((*one)->id, id);
    EXPECT_EQ((*one)->spec_json,
              "{\"name\":\"j" + std::to_string(id - 1) + "\"}");
    EXPECT_EQ((*one)->state, 7);
    EXPECT_EQ((*one)->ended_us, 100 + id - 1);
    EXPECT_EQ((*one)->exit_code, (id - 1) % 3);
    EXPECT_EQ((*one)->minibatches, (id - 1) * 10);
  }
  auto none = st.LoadJob(999);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // The archived ones by pages, in id order.
  std::vector<int64_t> archived;
  for (int64_t after = 0;;) {
    auto page = st.LoadArchivedJobs(after, 50, std::nullopt);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const JobRow& r : *page) archived.push_back(r.id);
    if (page->size() < 50) break;
    after = page->back().id;
  }
  ASSERT_EQ(archived.size(), 120u);
  for (size_t i = 0; i < archived.size(); ++i) {
    EXPECT_EQ(archived[i], static_cast<int64_t>(i + 1));
  }
  auto tail = st.LoadArchivedJobs(118, 10, std::nullopt);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->size(), 2u);
  EXPECT_EQ(tail->back().spec_json, "{\"name\":\"j119\"}");
  // By name: archived ones only, after the id given.
  for (const auto& [name, after, want] :
       std::vector<std::tuple<std::string, int64_t, std::vector<int64_t>>>{
           {"j7", 0, {8}},
           {"j7", 8, {}},
           {"j130", 0, {}},  // not archived
           {"j", 0, {}},
           {"j1*", 0, {}}}) {  // a name, not a pattern
    auto named = st.LoadArchivedJobs(after, 10, name);
    ASSERT_TRUE(named.ok()) << named.status().ToString();
    std::vector<int64_t> got;
    for (const JobRow& r : *named) got.push_back(r.id);
    EXPECT_EQ(got, want) << name;
  }
  // Several of one name, a page of one at a time.
  const std::vector<std::string> same(3, "{\"name\":\"same\"}");
  Store::Inserted in = st.InsertJobs(same, 12);
  ASSERT_EQ(in.count, 3u);
  std::vector<JobRow> rows_same;
  for (int64_t id = in.first_id; id < in.first_id + 3; ++id) {
    JobRow r;
    r.id = id;
    r.spec_json = same[0];
    r.state = 7;
    r.ended_us = 500;
    rows_same.push_back(r);
  }
  WriteBatch b;
  b.jobs = rows_same;
  ASSERT_TRUE(st.Write(b).ok());
  rows_same.erase(rows_same.begin() + 1);  // the middle one stays
  ASSERT_TRUE(st.ArchiveJobs(rows_same).ok());
  std::vector<int64_t> paged;
  for (int64_t after = 0;;) {
    auto page = st.LoadArchivedJobs(after, 1, std::string("same"));
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    if (page->empty()) break;
    paged.push_back(page->front().id);
    after = page->front().id;
  }
  EXPECT_EQ(paged, (std::vector<int64_t>{in.first_id, in.first_id + 2}));
  EXPECT_EQ(*st.InsertJob("{}", 12), 154);
}

// PruneArchive deletes archived jobs that ended before a time, those that
// ended first first, with their history (and, on etcd, their keys in the
// indexes by end and by name); not jobs that are not archived. On etcd
// also the archives from before archive-ended/ and archive-name/ existed.
TEST_P(StoreTest, PruneArchiveDeletesTheArchivedJobsThatEndedFirst) {
  // Job k ended at 1000 - 10k: the later the id, the earlier it ended.
  auto ended = [](int64_t id) { return 1000 - 10 * id; };
  // Named "p0" (even ids) and "p1" (odd ones).
  auto spec = [](int64_t id) {
    return "{\"name\":\"p" + std::to_string(id % 2) + "\"}";
  };
  {
    auto s = Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& st = **s;
    std::vector<std::string> specs;
    for (int64_t id = 1; id <= 10; ++id) specs.push_back(spec(id));
    ASSERT_EQ(st.InsertJobs(specs, 10).count, 10u);
    WriteBatch batch;
    for (int64_t id = 1; id <= 10; ++id) {
      JobRow r;
      r.id = id;
      r.spec_json = spec(id);
      r.state = 7;
      r.ended_us = ended(id);
      batch.jobs.push_back(r);
      for (int h = 0; h < 2; ++h) {
        batch.history.push_back(HistoryRow{id, 5 + h, "start", true, 1, "d"});
      }
    }
    ASSERT_TRUE(st.Write(batch).ok());
    // 9 and 10 ended too but are not archived.
    std::vector<JobRow> rows(batch.jobs.begin(), batch.jobs.begin() + 8);
    ASSERT_TRUE(st.ArchiveJobs(rows).ok());
  }
  if (GetParam() == "etcd") {
    // As archived before archive-ended/ and archive-name/ existed: Open
    // puts their keys.
    const std::pair<std::string, std::string> ranges[] = {
        {"/t/archive-ended/", EtcdClient::PrefixEnd("/t/archive-ended/")},
        {"/t/counters/archive-ended", ""},
        {"/t/archive-name/", EtcdClient::PrefixEnd("/t/archive-name/")},
        {"/t/counters/archive-name", ""}};
    for (const auto& [key, end] : ranges) {
      etcdserverpb::DeleteRangeRequest d;
      d.set_key(key);
      d.set_range_end(end);
      auto rep = etcd_->Client()->DeleteRange(d);
      ASSERT_TRUE(rep.ok()) << rep.status().ToString();
      EXPECT_GT(rep->deleted(), 0) << key;
    }
  }
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  // Ended before 955: 5 to 10; archived of them: 5 to 8, 8 first.
  auto n = st.PruneArchive(955, 3);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 3);
  for (int64_t id : {int64_t{5}, int64_t{6}}) {
    auto one = st.LoadJob(id);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->has_value(), id == 5) << id;
  }
  n = st.PruneArchive(955, 3);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1);
  n = st.PruneArchive(955, 3);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0);
  for (int64_t id = 1; id <= 10; ++id) {
    const bool kept = id <= 4 || id >= 9;
    auto one = st.LoadJob(id);
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    EXPECT_EQ(one->has_value(), kept) << id;
    auto h = st.History(id);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->size(), kept ? 2u : 0u) << id;
  }
  auto archived = st.LoadArchivedJobs(0, 100, std::nullopt);
  ASSERT_TRUE(archived.ok());
  ASSERT_EQ(archived->size(), 4u);
  EXPECT_EQ(archived->back().id, 4);
  for (const auto& [name, want] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"p0", {2, 4}}, {"p1", {1, 3}}, {"p", {}}}) {
    auto named = st.LoadArchivedJobs(0, 100, name);
    ASSERT_TRUE(named.ok()) << named.status().ToString();
    std::vector<int64_t> got;
    for (const JobRow& r : *named) got.push_back(r.id);
    EXPECT_EQ(got, want) << name;
  }
  if (GetParam() == "etcd") {
    // The index holds the archived jobs only.
    etcdserverpb::RangeRequest r;
    r.set_key("/t/archive-name/");
    r.set_range_end(EtcdClient::PrefixEnd("/t/archive-name/"));
    r.set_count_only(true);
    auto rep = etcd_->Client()->Range(r);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    EXPECT_EQ(rep->count(), 4);
  }
  auto jobs = st.LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ(jobs->front().id, 9);

  // Everything archived and pruned: SQLite keeps the row of the highest
  // id (10); either way the next job's id is new.
  auto all = st.LoadJobs();
  ASSERT_TRUE(all.ok());
  ASSERT_TRUE(st.ArchiveJobs(*all).ok());
  n = st.PruneArchive(2000, 100);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, GetParam() == "sqlite" ? 5 : 6);
  EXPECT_EQ(*st.InsertJob("{}", 12), 11);
  s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(*(*s)->InsertJob("{}", 12), 12);
}

// A batch of jobs that fails says how many were stored, as for events
// (AnEventsBatchThatFailsLogsAPrefix): on etcd those before the
// transaction that failed, on SQLite none; the ids go on from there.
TEST_P(StoreTest, AJobsBatchThatFailsStoresAPrefix) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  std::vector<std::string> specs(150, "{}");
  std::optional<WriteLock> lock;
  if (GetParam() == "etcd") {
    specs[120] = "\"" + std::string(2 << 20, 'x') + "\"";
  } else {
    lock.emplace(path_);
  }
  Store::Inserted in = st.InsertJobs(specs, 1);
  EXPECT_FALSE(in.status.ok());
  if (lock.has_value()) {
    EXPECT_EQ(in.count, 0u);
    lock.reset();
  } else {
    EXPECT_EQ(in.count, 120u);  // 99 + 21 (the large one alone fails)
    EXPECT_EQ(in.first_id, 1);
  }
  auto jobs = st.LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ(jobs->size(), in.count);
  auto next = st.InsertJob("{}", 2);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, static_cast<int64_t>(in.count) + 1);
}

// A database written before jobs had a metric gets its columns, its rows
// kept.
TEST(SqliteStoreTest, AnOlderDatabaseGetsTheMetricColumns) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gandiva-store-old-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "old.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(
                db,
                "CREATE TABLE jobs(id INTEGER PRIMARY KEY, spec TEXT NOT NULL, "
                "state INTEGER NOT NULL, submitted_us INTEGER NOT NULL, "
                "started_us INTEGER NOT NULL DEFAULT 0, ended_us INTEGER NOT "
                "NULL DEFAULT 0, exit_code INTEGER, minibatches INTEGER NOT "
                "NULL DEFAULT 0, minibatch_rate REAL NOT NULL DEFAULT 0, "
                "uses_library INTEGER NOT NULL DEFAULT 0, server TEXT NOT NULL "
                "DEFAULT '', gpus TEXT NOT NULL DEFAULT '[]', suspends INTEGER "
                "NOT NULL DEFAULT 0, resumes INTEGER NOT NULL DEFAULT 0);"
                "INSERT INTO jobs(spec, state, submitted_us, minibatches) "
                "VALUES('{}', 5, 10, 77);",
                nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto jobs = (*s)->LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    ASSERT_EQ(jobs->size(), 1u);
    EXPECT_EQ((*jobs)[0].minibatches, 77);
    EXPECT_EQ((*jobs)[0].metric_reports, 0);
    JobRow row = (*jobs)[0];
    row.metric = 0.5;
    row.metric_minibatches = 70;
    row.metric_reports = 7;
    WriteBatch b;
    b.jobs.push_back(row);
    ASSERT_TRUE((*s)->Write(b).ok());
  }
  auto s = Store::Open(path);  // opened again: the columns are there
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto jobs = (*s)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ((*jobs)[0].metric, 0.5);
  EXPECT_EQ((*jobs)[0].metric_minibatches, 70);
  EXPECT_EQ((*jobs)[0].metric_reports, 7);
  std::filesystem::remove_all(dir);
}

// A database written before agents said they stopped gets the servers'
// away columns, its rows kept.
TEST(SqliteStoreTest, AnOlderDatabaseGetsTheServersAwayColumns) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gandiva-store-old-servers-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "old.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE servers(id INTEGER PRIMARY KEY, name "
                         "TEXT NOT NULL UNIQUE, address TEXT NOT NULL, gpus "
                         "TEXT NOT NULL, sockets INTEGER NOT NULL, "
                         "switches_per_socket INTEGER NOT NULL);"
                         "INSERT INTO servers VALUES(0, 'node', "
                         "'127.0.0.1:9', '[]', 2, 1);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto servers = (*s)->LoadServers();
    ASSERT_TRUE(servers.ok()) << servers.status().ToString();
    ASSERT_EQ(servers->size(), 1u);
    EXPECT_EQ((*servers)[0].name, "node");
    EXPECT_EQ((*servers)[0].sockets, 2);
    EXPECT_EQ((*servers)[0].away_since_us, 0);
    ServerRow row = (*servers)[0];
    row.away_since_us = 42;
    row.away_cordon = true;
    WriteBatch b;
    b.servers.push_back(row);
    ASSERT_TRUE((*s)->Write(b).ok());
  }
  auto s = Store::Open(path);  // opened again: the columns are there
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto servers = (*s)->LoadServers();
  ASSERT_TRUE(servers.ok());
  EXPECT_EQ((*servers)[0].away_since_us, 42);
  EXPECT_TRUE((*servers)[0].away_cordon);
  std::filesystem::remove_all(dir);
}

// A backup taken while the store is open and written to (its latest
// transactions still in the WAL) holds everything committed before it, in
// one file that opens as a store; a later backup to the same path replaces
// it.
TEST(SqliteStoreTest, ABackupOfAStoreInUseHoldsWhatWasCommitted) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gandiva-store-backup-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "g.db").string();
  const std::string to = (dir / "backup.db").string();
  auto s = Store::Open(db);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  ASSERT_TRUE(st.SetMeta("cluster_id", "c0ffee").ok());
  const std::vector<std::string> specs(3, "{\"name\":\"a\"}");
  ASSERT_EQ(st.InsertJobs(specs, 10).count, 3u);
  std::vector<EventRow> events(5, EventRow{0, 11, "Tick", "{}"});
  ASSERT_EQ(st.AppendEvents(events).count, 5u);
  ASSERT_TRUE(std::filesystem::exists(db + "-wal"));

  auto b = BackupDatabase(db, to);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->jobs, 3);
  EXPECT_EQ(b->last_job_id, 3);
  EXPECT_EQ(b->events, 5);
  EXPECT_EQ(b->bytes, static_cast<int64_t>(std::filesystem::file_size(to)));
  // One file: no journal, WAL or partial copy beside it.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"backup.db", "g.db", "g.db-shm",
                                             "g.db-wal"}));

  ASSERT_TRUE(st.InsertJob("{\"name\":\"after\"}", 20).ok());
  {
    auto copy = Store::Open(to);
    ASSERT_TRUE(copy.ok()) << copy.status().ToString();
    auto jobs = (*copy)->LoadJobs();
    ASSERT_TRUE(jobs.ok());
    EXPECT_EQ(jobs->size(), 3u);  // not the one submitted after it
    EXPECT_EQ((*copy)->EventCount().value(), 5);
    EXPECT_EQ((*copy)->GetMeta("cluster_id").value(),
              std::optional<std::string>("c0ffee"));
  }
  b = BackupDatabase(db, to);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->jobs, 4);
  auto again = Store::Open(to);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->LoadJobs()->size(), 4u);
  std::filesystem::remove_all(dir);
}

// A restore replaces the store with the backup; the jobs stored after the
// backup are lost, and their ids are not given again, even by a store
// opened later. Refused while the database's lock is held, and for a file
// that is not a store, the database then unchanged.
TEST(SqliteStoreTest, ARestoreReplacesTheStoreAndKeepsTheIdsItLost) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gandiva-store-restore-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "g.db").string();
  const std::string backup = (dir / "backup.db").string();
  {
    auto s = Store::Open(db);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_EQ((*s)->InsertJobs(std::vector<std::string>(2, "{}"), 1).count, 2u);
    ASSERT_TRUE(BackupDatabase(db, backup).ok());
    ASSERT_EQ((*s)->InsertJobs(std::vector<std::string>(3, "{}"), 2).count, 3u);
  }
  {
    auto held = LockDatabaseFile(db);
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    auto busy = RestoreDatabase(db, backup);
    ::close(*held);
    ASSERT_FALSE(busy.ok());
    EXPECT_EQ(
        busy.status().message(),
        "database '" + db + "' is in use by another gandiva-scheduler (pid " +
            std::to_string(getpid()) + "): stop it first, or use another --db");
  }
  const std::string junk = (dir / "junk.db").string();
  std::ofstream(junk) << "no";
  auto bad = RestoreDatabase(db, junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(
      bad.status().message().rfind("'" + junk + "' is not a gandiva store", 0),
      0u)
      << bad.status().message();
  EXPECT_EQ(Store::Open(db).value()->LoadJobs()->size(), 5u);  // unchanged

  // Where the restore cannot be staged, the database stays as it was.
  const std::string staged = db + ".restore-" + std::to_string(getpid());
  std::filesystem::create_directories(staged + "/in-the-way");
  auto blocked = RestoreDatabase(db, backup);
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(
      blocked.status().message().rfind(
          "cannot restore into '" + db + "': cannot make '" + staged + "': ",
          0),
      0u)
      << blocked.status().message();
  EXPECT_EQ(Store::Open(db).value()->LoadJobs()->size(), 5u);
  std::filesystem::remove_all(staged);

  auto r = RestoreDatabase(db, backup);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs, 2);
  EXPECT_EQ(r->last_job_id, 2);
  EXPECT_EQ(r->lost_first, 3);
  EXPECT_EQ(r->lost_last, 5);
  EXPECT_FALSE(std::filesystem::exists(staged));
  {
    auto s = Store::Open(db);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->LoadJobs()->size(), 2u);
    EXPECT_EQ((*s)->GetMeta(kRestoreLostJobsMeta).value(),
              std::optional<std::string>("3-5"));
    EXPECT_FALSE((*s)->LoadJob(4).value().has_value());
    Store::Inserted in = (*s)->InsertJobs(std::vector<std::string>(2, "{}"), 3);
    ASSERT_TRUE(in.status.ok()) << in.status.ToString();
    EXPECT_EQ(in.first_id, 6);  // past the lost ones
    EXPECT_EQ((*s)->InsertJob("{}", 4).value(), 8);
  }
  EXPECT_EQ(Store::Open(db).value()->InsertJob("{}", 5).value(), 9);

  // Restored again from the same backup: the ids given since are lost too,
  // and none of them is given again.
  r = RestoreDatabase(db, backup);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->lost_first, 3);
  EXPECT_EQ(r->lost_last, 9);
  EXPECT_EQ(Store::Open(db).value()->InsertJob("{}", 6).value(), 10);
  std::filesystem::remove_all(dir);
}

// What cannot be backed up is refused, naming the path, and leaves no
// partial file behind.
TEST(SqliteStoreTest, ABackupThatCannotBeMadeNamesThePath) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("gandiva-store-backup-bad-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "g.db").string();
  const std::string to = (dir / "backup.db").string();

  auto none = BackupDatabase(db, to);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "no database at '" + db + "'");

  const std::string text = (dir / "notes.txt").string();
  {
    std::ofstream f(text);
    f << "not a database, but long enough to be read as one's header......"
         "..............................................................\n";
  }
  auto junk = BackupDatabase(text, to);
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      junk.status().message().rfind("'" + text + "' is not a gandiva store", 0),
      0u)
      << junk.status().message();

  const std::string other = (dir / "other.db").string();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE t(x)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  auto foreign = BackupDatabase(other, to);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().message(),
            "'" + other +
                "' is not a gandiva store (no meta, jobs and events tables)");

  ASSERT_TRUE(Store::Open(db).ok());
  const std::string nowhere = (dir / "missing-dir" / "backup.db").string();
  auto unwritable = BackupDatabase(db, nowhere);
  ASSERT_FALSE(unwritable.ok());
  EXPECT_EQ(unwritable.status().message().rfind(
                "cannot write the backup '" + nowhere + "': ", 0),
            0u)
      << unwritable.status().message();
  EXPECT_FALSE(std::filesystem::exists(to));
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos)
        << e.path();
  }
  std::filesystem::remove_all(dir);
}

// Ranges of ids are read back as written, merged where they touch, and a
// malformed one is refused, naming the part.
TEST(IdRangesTest, ParseFormatAndMerge) {
  auto r = ParseIdRanges("8-9,3-5,6-6");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(FormatIdRanges(*r), "3-6,8-9");
  AddIdRange(&*r, 7, 7);
  EXPECT_EQ(FormatIdRanges(*r), "3-9");
  AddIdRange(&*r, 12, 20);
  AddIdRange(&*r, 1, 1);
  EXPECT_EQ(FormatIdRanges(*r), "1-1,3-9,12-20");
  EXPECT_EQ(FindIdRange(*r, 15), (std::pair<int64_t, int64_t>{12, 20}));
  EXPECT_FALSE(FindIdRange(*r, 10).has_value());
  RemoveIdFromRanges(&*r, 15);
  RemoveIdFromRanges(&*r, 3);
  RemoveIdFromRanges(&*r, 1);
  RemoveIdFromRanges(&*r, 10);  // in none
  EXPECT_EQ(FormatIdRanges(*r), "4-9,12-14,16-20");
  EXPECT_TRUE(ParseIdRanges("").value().empty());
  for (const char* bad : {"3", "5-3", "0-2", "3-5,", "3-5x", "a-b"}) {
    auto p = ParseIdRanges(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("is not FIRST-LAST"), std::string::npos)
        << p.status().message();
  }
  EXPECT_EQ(ParseIdRanges("1-2,5-3").status().message(),
            "'1-2,5-3': '5-3' is not FIRST-LAST (ids, FIRST <= LAST)");
}

TEST(EventCodecTest, EveryKindRoundTrips) {
  core::JobSpec spec;
  spec.name = "resnet";
  spec.gpus = 4;
  spec.priority = 2;
  spec.owner = "ann";
  spec.group = "hp";
  spec.vc = "vc1";
  spec.elastic = true;
  spec.total_minibatches = 1000;
  spec.model = 3;
  spec.carrier = core::Carrier::kProcessImage;
  spec.retries = 3;
  core::ServerUp up;
  up.spec = core::ServerSpec{"s1", 8, 2, 2, 79.5, "turned off (--no-criu)"};
  up.id = core::ServerId(1);
  core::ProfileReport pr{core::JobId(4), 12.5, 100, 3.25, 0.75};
  const std::vector<core::EventBody> events = {
      core::JobArrived{core::JobId(4), spec},
      core::JobFinished{core::JobId(4), false},
      core::JobFinished{core::JobId(4), false, true, false},
      core::JobFinished{core::JobId(4), false, false, true},
      pr,
      core::ActionDone{core::ActionId(9), core::JobId(4),
                       core::Duration::Micros(77)},
      core::ActionFailed{core::ActionId(9), core::JobId(4),
                         core::Duration::Micros(5), "no \"agent\""},
      up,
      core::ServerDown{core::ServerId(1)},
      core::Tick{},
      core::KillRequest{core::JobId(4), "user"},
      core::PriorityRequest{core::JobId(4), -3},
      core::HoldRequest{core::JobId(4), false},
      core::MechanismRequest{core::MechanismRequest::Kind::kPack,
                             core::JobId(4), core::ServerId(), core::JobId(2),
                             0},
      core::ActionFailed{core::ActionId(10), core::JobId(4),
                         core::Duration::Micros(5), "no library", true},
      core::CordonRequest{core::ServerId(1), true},
      core::CordonRequest{core::ServerId(0), false},
      core::DrainRequest{core::ServerId(1), false},
      core::DrainRequest{core::ServerId(2), true},
      core::CarrierKnown{core::JobId(4), core::Carrier::kSelf},
      core::CarrierKnown{core::JobId(4), core::Carrier::kRestart},
      core::ProcessLost{core::JobId(4), true},
      core::ProcessLost{core::JobId(4), false},
      [&] {
        core::JobArrived e{
            core::JobId(5), spec, {core::GpuId(3), core::GpuId(2)}, true};
        e.submitted = core::Time::FromMicros(1234);
        return e;
      }(),
      core::QueuesChanged{{{.name = "org",
                            .quota = 4,
                            .weight = 2,
                            .limit = 6,
                            .members = {"ann", "bob"},
                            .max_priority = 5},
                           {.name = "team", .parent = "org", .quota = 2}},
                          core::FlatQueues({{"a", 3}})},
      core::JobFound{core::JobId(6), {core::GpuId(1)}, false},
  };
  for (const core::EventBody& e : events) {
    const std::string text = EncodeEvent(e);
    auto back = DecodeEvent(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status().ToString();
    EXPECT_EQ(back->index(), e.index());
    EXPECT_EQ(EncodeEvent(*back), text);
  }
  auto arrived =
      std::get<core::JobArrived>(*DecodeEvent(EncodeEvent(events[0])));
  EXPECT_EQ(arrived.spec.vc, "vc1");
  EXPECT_EQ(arrived.spec.model, 3);
  EXPECT_EQ(arrived.spec.carrier, core::Carrier::kProcessImage);
  EXPECT_EQ(arrived.spec.retries, 3);
  auto failed = std::get<core::JobFinished>(*DecodeEvent(
      EncodeEvent(core::JobFinished{core::JobId(4), false, false, true})));
  EXPECT_FALSE(failed.permanent);
  EXPECT_TRUE(failed.checkpoint);
  // A log written before the fields: a plain failure.
  failed = std::get<core::JobFinished>(
      *DecodeEvent(R"({"kind":"JobFinished","job":4,"success":false})"));
  EXPECT_FALSE(failed.permanent);
  EXPECT_FALSE(failed.checkpoint);
  EXPECT_TRUE(arrived.placed_on.empty());
  EXPECT_EQ(EncodeEvent(events[0]).find("placed_on"), std::string::npos);
  auto adopted = std::get<core::JobArrived>(
      *DecodeEvent(EncodeEvent(events[events.size() - 3])));
  EXPECT_EQ(adopted.placed_on,
            (std::vector<core::GpuId>{core::GpuId(3), core::GpuId(2)}));
  EXPECT_TRUE(adopted.suspended);
  EXPECT_EQ(adopted.submitted, core::Time::FromMicros(1234));
  EXPECT_EQ(arrived.submitted, core::Time::Never());
  auto found =
      std::get<core::JobFound>(*DecodeEvent(EncodeEvent(events.back())));
  EXPECT_EQ(found.job, core::JobId(6));
  EXPECT_EQ(found.placed_on, std::vector<core::GpuId>{core::GpuId(1)});
  EXPECT_FALSE(found.suspended);
  auto drain = std::get<core::DrainRequest>(
      *DecodeEvent(EncodeEvent(core::DrainRequest{core::ServerId(2), true})));
  EXPECT_EQ(drain.server, core::ServerId(2));
  EXPECT_TRUE(drain.cordon_only);
  auto server = std::get<core::ServerUp>(*DecodeEvent(EncodeEvent(up)));
  EXPECT_EQ(server.spec.gpu_memory_gb, 79.5);
  EXPECT_EQ(server.spec.process_images_unusable, "turned off (--no-criu)");
  auto carrier = std::get<core::CarrierKnown>(*DecodeEvent(EncodeEvent(
      core::CarrierKnown{core::JobId(7), core::Carrier::kRestart})));
  EXPECT_EQ(carrier.job, core::JobId(7));
  EXPECT_EQ(carrier.carrier, core::Carrier::kRestart);
  auto lost = std::get<core::ProcessLost>(
      *DecodeEvent(EncodeEvent(core::ProcessLost{core::JobId(8), true})));
  EXPECT_EQ(lost.job, core::JobId(8));
  EXPECT_TRUE(lost.checkpoint);
  auto queues = std::get<core::QueuesChanged>(
      *DecodeEvent(EncodeEvent(events[events.size() - 2])));
  EXPECT_EQ(queues.queues,
            std::get<core::QueuesChanged>(events[events.size() - 2]).queues);
  EXPECT_EQ(queues.previous, core::FlatQueues({{"a", 3}}));
  for (const char* bad :
       {R"({"kind":"QueuesChanged","queues":[{"name":"a","quota":1.5}],)"
        R"("previous":[]})",
        R"({"kind":"QueuesChanged","queues":[{"name":"a","quota":1,)"
        R"("members":"ann"}],"previous":[]})",
        R"({"kind":"QueuesChanged","queues":"a","previous":[]})",
        R"({"kind":"QueuesChanged","queues":[]})"}) {
    EXPECT_FALSE(DecodeEvent(bad).ok()) << bad;
  }
  auto bad_carrier = DecodeEvent(
      "{\"kind\":\"CarrierKnown\",\"job\":7,\"carrier\":\"teleport\"}");
  ASSERT_FALSE(bad_carrier.ok());
  EXPECT_NE(bad_carrier.status().message().find("unknown carrier 'teleport'"),
            std::string::npos)
      << bad_carrier.status().ToString();
  // A log written before servers reported their GPUs' memory.
  auto older = DecodeEvent(
      "{\"kind\":\"ServerUp\",\"id\":-1,\"name\":\"s0\",\"gpus\":2,"
      "\"sockets\":1,\"switches_per_socket\":1}");
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_EQ(std::get<core::ServerUp>(*older).spec.gpu_memory_gb, 0);
  EXPECT_EQ(std::get<core::ServerUp>(*older).spec.process_images_unusable, "");
  // A log written before jobs' carriers were: moves freely.
  std::string spec_text = EncodeEvent(core::JobArrived{core::JobId(4), spec});
  const std::string field = "\"carrier\":\"process-image\",";
  const size_t at = spec_text.find(field);
  ASSERT_NE(at, std::string::npos) << spec_text;
  spec_text.erase(at, field.size());
  auto before = DecodeEvent(spec_text);
  ASSERT_TRUE(before.ok()) << spec_text << ": " << before.status().ToString();
  EXPECT_EQ(std::get<core::JobArrived>(*before).spec.carrier,
            core::Carrier::kSelf);
  EXPECT_EQ(std::string(EventKindName(core::HoldRequest{})), "HoldRequest");
  EXPECT_FALSE(DecodeEvent("{\"kind\":\"Nope\"}").ok());
  EXPECT_FALSE(DecodeEvent("not json").ok());
}

// A damaged log: an integer field that holds no integer of its type makes
// the event malformed; it is neither converted (a float past the type's
// range was undefined behaviour) nor cut short.
TEST(EventCodecTest, IntegerFieldsTakeOnlyIntegersTheyHold) {
  for (const char* job : {"2.5", "1e48", "2222222222222222222222222222222222",
                          "2147483648", "-2147483649", "\"4\"", "true"}) {
    const std::string text = std::string("{\"kind\":\"JobFinished\",\"job\":") +
                             job + ",\"success\":true}";
    auto e = DecodeEvent(text);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_EQ(e.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("malformed"), std::string::npos)
        << e.status().ToString();
  }
  auto last = DecodeEvent(
      "{\"kind\":\"JobFinished\",\"job\":2147483647,\"success\":true}");
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(std::get<core::JobFinished>(*last).job, core::JobId(2147483647));
  auto took = DecodeEvent(
      "{\"kind\":\"ActionDone\",\"action\":9223372036854775807,\"job\":-1,"
      "\"took_us\":-9223372036854775808}");
  ASSERT_TRUE(took.ok()) << took.status().ToString();
  EXPECT_EQ(std::get<core::ActionDone>(*took).took.micros(),
            std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(DecodeEvent("{\"kind\":\"ActionDone\",\"action\":"
                           "9223372036854775808,\"job\":1,\"took_us\":0}")
                   .ok());
}

}  // namespace
}  // namespace gandiva::runtime
