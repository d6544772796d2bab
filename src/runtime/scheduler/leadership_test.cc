#include "runtime/scheduler/leadership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "runtime/scheduler/etcd_store.h"
#include "runtime/scheduler/etcd_test_util.h"
#include "runtime/tls/test_certs.h"

namespace gandiva::runtime {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LeadershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    etcd_ = EtcdForTest::Start(&error);
    ASSERT_NE(etcd_, nullptr) << error;
  }
  std::shared_ptr<Leadership> Make(const std::string& who, int64_t ttl = 2) {
    auto l = Leadership::Create(etcd_->Client(), {"/c/", ttl, who});
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    return l.ok() ? *l : nullptr;
  }
  static void Quiet(const std::string&) {}
  // Polls `pred` until it holds (true) or `timeout` passes (false).
  static bool WaitFor(const std::function<bool()>& pred,
                      std::chrono::milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    while (!pred()) {
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(50ms);
    }
    return true;
  }
  std::unique_ptr<EtcdForTest> etcd_;
};

TEST_F(LeadershipTest, AStandbyWaitsAndTakesOverWhenTheLeaderResigns) {
  auto a = Make("a");
  auto b = Make("b");
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  EXPECT_TRUE(a->leading());
  EXPECT_EQ(*a->Leader(), "a");
  std::vector<std::string> notes;
  std::mutex mu;
  auto waiting = std::async(std::launch::async, [&] {
    return b->Campaign([&](const std::string& s) {
      std::lock_guard lock(mu);
      notes.push_back(s);
    });
  });
  EXPECT_EQ(waiting.wait_for(1500ms), std::future_status::timeout);
  {
    std::lock_guard lock(mu);
    ASSERT_FALSE(notes.empty());
    EXPECT_EQ(notes[0], "standby: a leads");
  }
  a->Resign();
  EXPECT_FALSE(a->leading());
  // A resignation frees the key at once, not when the lease would lapse:
  // at once it is free or b's.
  const std::string now = *a->Leader();
  EXPECT_TRUE(now.empty() || now == "b") << now;
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
  EXPECT_TRUE(b->leading());
  EXPECT_EQ(*b->Leader(), "b");
  EXPECT_GT(b->fence(), a->fence());
}

TEST_F(LeadershipTest, ALeaderThatStopsRenewingLosesTheKeyAfterItsTtl) {
  auto b = Make("b", 5);
  auto a = Make("a", 3);
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  a.reset();  // gone without resigning: as if it crashed
  // The key outlives its holder until the lease lapses...
  EXPECT_EQ(*b->Leader(), "a");
  // ...then b takes it.
  auto won = std::async(std::launch::async, [&] { return b->Campaign(Quiet); });
  ASSERT_EQ(won.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(won.get().ok());
  EXPECT_EQ(*b->Leader(), "b");
}

TEST_F(LeadershipTest, CancelEndsACampaign) {
  auto a = Make("a");
  auto b = Make("b");
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  auto waiting =
      std::async(std::launch::async, [&] { return b->Campaign(Quiet); });
  std::this_thread::sleep_for(300ms);
  b->Cancel();
  ASSERT_EQ(waiting.wait_for(3s), std::future_status::ready);
  EXPECT_EQ(waiting.get().code(), core::StatusCode::kUnavailable);
  EXPECT_FALSE(b->leading());
}

// A leader whose key was taken over (it was cut off past its lease) can no
// longer write, and is told it lost the lead.
TEST_F(LeadershipTest, AFencedWriteOfAFormerLeaderIsRefused) {
  auto a = Make("a", 5);
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  std::promise<std::string> lost;
  a->OnLost([&](const std::string& why) { lost.set_value(why); });
  auto store_a = EtcdStore::Open(a);
  ASSERT_TRUE(store_a.ok());
  ASSERT_TRUE((*store_a)->SetMeta("k", "from a").ok());

  // The key goes (as when a's lease lapses) and b takes it.
  etcdserverpb::DeleteRangeRequest del;
  del.set_key(a->leader_key());
  ASSERT_TRUE(etcd_->Client()->DeleteRange(del).ok());
  auto b = Make("b", 5);
  ASSERT_TRUE(b->Campaign(Quiet).ok());
  auto store_b = EtcdStore::Open(b);
  ASSERT_TRUE(store_b.ok());

  const core::Status refused = (*store_a)->SetMeta("k", "from a, late");
  EXPECT_EQ(refused.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("no longer holds"), std::string::npos)
      << refused.message();
  EXPECT_EQ((*store_a)->AppendEvent(1, "Tick", "{}").status().code(),
            core::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store_a)->LastEventSeq(), 0);  // nothing counted
  auto f = lost.get_future();
  ASSERT_EQ(f.wait_for(3s), std::future_status::ready);
  EXPECT_NE(f.get().find("refused"), std::string::npos);
  EXPECT_FALSE(a->leading());

  ASSERT_TRUE((*store_b)->SetMeta("k", "from b").ok());
  EXPECT_EQ(**(*store_b)->GetMeta("k"), "from b");
}

// A leader cut off from etcd pauses 2/3 of the TTL after the last renewal
// that held, before etcd could let a standby have the key; it is not told
// it lost the lead while it cannot know.
TEST_F(LeadershipTest, ALeaderCutOffFromEtcdPausesBeforeItsLeaseLapses) {
  auto a = Make("a", 3);
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  std::promise<std::string> paused;
  std::atomic<int> lost{0};
  a->OnPause([&](bool p, const std::string& why) {
    if (p) paused.set_value(why);
  });
  a->OnLost([&](const std::string&) { ++lost; });
  etcd_->Kill();  // etcd dies
  auto f = paused.get_future();
  ASSERT_EQ(f.wait_for(20s), std::future_status::ready);
  EXPECT_NE(f.get().find("could not be renewed for 2000 ms"),
            std::string::npos);
  EXPECT_TRUE(a->paused());
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(lost.load(), 0);
  a->StopRenewing();
}

// etcd restarted (killed and started again on its data, as an upgrade or a
// crash would): a leader paused by the outage finds its lease held when
// etcd answers again, and leads on with its key and fence: no change of
// leader, and its fenced writes go through again.
TEST_F(LeadershipTest, ALeaderRidesOutAnEtcdRestart) {
  auto a = Make("a", 3);
  auto b = Make("b", 3);
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  const int64_t fence = a->fence();
  auto store = EtcdStore::Open(a);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::atomic<int> pauses{0}, resumes{0}, lost{0};
  a->OnPause([&](bool p, const std::string&) { ++(p ? pauses : resumes); });
  a->OnLost([&](const std::string&) { ++lost; });
  auto standby =
      std::async(std::launch::async, [&] { return b->Campaign(Quiet); });
  for (const auto outage : {500ms, 2500ms}) {
    etcd_->Kill();
    std::this_thread::sleep_for(outage);
    std::string error;
    ASSERT_TRUE(etcd_->Restart(&error)) << error;
    ASSERT_TRUE(WaitFor([&] { return !a->paused() && resumes == pauses; }, 20s))
        << "outage of " << outage.count() << " ms";
    EXPECT_TRUE(a->leading());
    EXPECT_EQ(a->fence(), fence);
    EXPECT_EQ(*a->Leader(), "a");
    ASSERT_TRUE(
        (*store)->SetMeta("k", "after " + std::to_string(outage.count())).ok());
  }
  EXPECT_GE(pauses.load(), 1);  // the longer outage paused it
  EXPECT_EQ(lost.load(), 0);
  EXPECT_EQ(standby.wait_for(0s), std::future_status::timeout);
  b->Cancel();
  EXPECT_FALSE(standby.get().ok());
}

// A leader whose lease lapsed (here revoked behind its back, as etcd does
// to the lease of a daemon cut off past its TTL) is told it lost the lead,
// and may campaign again: it stands by, and leads again with a new fence.
TEST_F(LeadershipTest, ALeaderThatLostItsLeaseCampaignsAgain) {
  auto a = Make("a", 3);
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  const int64_t first = a->fence();
  std::promise<std::string> lost;
  a->OnLost([&](const std::string& why) { lost.set_value(why); });
  // Revoke its lease from another client: the key goes with it.
  etcdserverpb::RangeRequest r;
  r.set_key(a->leader_key());
  auto held = etcd_->Client()->Range(r);
  ASSERT_TRUE(held.ok() && held->kvs_size() == 1);
  ASSERT_TRUE(etcd_->Client()->LeaseRevoke(held->kvs(0).lease()).ok());
  auto f = lost.get_future();
  ASSERT_EQ(f.wait_for(20s), std::future_status::ready);
  EXPECT_NE(f.get().find("lease expired"), std::string::npos);
  EXPECT_FALSE(a->leading());
  a->OnLost(nullptr);
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  EXPECT_TRUE(a->leading());
  EXPECT_GT(a->fence(), first);
}

TEST_F(LeadershipTest, BadOptionsAreRefusedByName) {
  auto ttl = Leadership::Create(etcd_->Client(), {"/c/", 1, "a"});
  EXPECT_EQ(ttl.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(ttl.status().message().find("--lease-ttl-s"), std::string::npos);
  auto prefix = Leadership::Create(etcd_->Client(), {"", 5, "a"});
  EXPECT_NE(prefix.status().message().find("--etcd-prefix"), std::string::npos);
  auto endpoints = EtcdClient::Create("nohostport", std::nullopt);
  EXPECT_EQ(endpoints.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(endpoints.status().message().find("--etcd"), std::string::npos);
}

// The client tries the next endpoint when one is unreachable.
TEST_F(LeadershipTest, TheClientFailsOverToAnotherEndpoint) {
  auto c =
      EtcdClient::Create("127.0.0.1:1," + etcd_->endpoint(), std::nullopt, 1s);
  ASSERT_TRUE(c.ok());
  etcdserverpb::PutRequest put;
  put.set_key("/x");
  put.set_value("1");
  auto rep = (*c)->Put(put);
  EXPECT_TRUE(rep.ok()) << rep.status().ToString();
}

// Many rows: several transactions under etcd's limits; a snapshot larger
// than one request in chunks.
TEST_F(LeadershipTest, LargeWritesAndSnapshotsGoInPieces) {
  auto a = Make("a", 5);
  ASSERT_TRUE(a->Campaign(Quiet).ok());
  auto st = EtcdStore::Open(a);
  ASSERT_TRUE(st.ok());
  WriteBatch batch;
  for (int i = 1; i <= 350; ++i) {
    auto id = (*st)->InsertJob("{}", i);
    ASSERT_TRUE(id.ok());
    JobRow r;
    r.id = *id;
    r.spec_json = "{\"name\":\"job" + std::to_string(i) + "\"}";
    r.state = 3;
    r.server = std::string(4000, 's');  // 1.4 MB in all: over one request
    batch.jobs.push_back(r);
    batch.history.push_back(HistoryRow{*id, i, "start", true, 1, ""});
    batch.history.push_back(HistoryRow{*id, i, "suspend", true, 2, ""});
  }
  ASSERT_TRUE((*st)->Write(batch).ok());
  std::string big(3'500'000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE((*st)->AppendEvent(1, "Tick", "{}").ok());
  ASSERT_TRUE((*st)->WriteSnapshot({1, 5, big, "{\"d\":2}"}).ok());
  ASSERT_TRUE((*st)->WriteSnapshot({1, 6, big + "x", "{\"d\":3}"}).ok());

  auto again = EtcdStore::Open(a);  // as a new leader reads it
  ASSERT_TRUE(again.ok());
  auto jobs = (*again)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 350u);
  EXPECT_EQ((*jobs)[349].spec_json, "{\"name\":\"job350\"}");
  EXPECT_EQ((*jobs)[349].state, 3);
  auto h = (*again)->History(200);
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(h->size(), 2u);
  EXPECT_EQ((*h)[1].action, "suspend");
  auto snap = (*again)->LoadSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value()) << snap.status().ToString();
  EXPECT_EQ((*snap)->core, big + "x");
  EXPECT_EQ((*snap)->daemon, "{\"d\":3}");
  EXPECT_EQ((*snap)->time_us, 6);
  // The first snapshot's chunks went with the second.
  etcdserverpb::RangeRequest r;
  r.set_key("/c/snapshot-data/");
  r.set_range_end(EtcdClient::PrefixEnd("/c/snapshot-data/"));
  r.set_count_only(true);
  EXPECT_EQ(etcd_->Client()->Range(r)->count(), 5);  // 4 core + 1 daemon
  EXPECT_EQ(*(*again)->InsertJob("{}", 1), 351);
}

// etcd with TLS client certificates (--etcd-tls-*): served with the
// cluster's certificate, refused without one.
TEST(EtcdTlsTest, OnlyAClientWithACertificateOfTheCaIsServed) {
  const std::filesystem::path certs =
      std::filesystem::temp_directory_path() /
      ("gandiva-etcd-tls-" + std::to_string(::getpid()));
  std::filesystem::create_directories(certs);
  const TlsFiles files = testing::MakeTestCertificates(certs, "etcd");
  ASSERT_FALSE(files.ca.empty()) << "openssl could not make certificates";
  std::string error;
  auto etcd = EtcdForTest::Start(&error, files);
  ASSERT_NE(etcd, nullptr) << error;
  auto lead = Leadership::Create(etcd->Client(), {"/tls/", 5, "a"});
  ASSERT_TRUE(lead.ok());
  ASSERT_TRUE((*lead)->Campaign([](const std::string&) {}).ok());
  auto st = EtcdStore::Open(*lead);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_TRUE((*st)->SetMeta("k", "v").ok());
  (*lead)->Resign();

  auto plain = EtcdClient::Create(etcd->endpoint(), std::nullopt,
                                  std::chrono::seconds(1));
  ASSERT_TRUE(plain.ok());
  etcdserverpb::RangeRequest r;
  r.set_key("/tls/meta/k");
  EXPECT_FALSE((*plain)->Range(r).ok());
  auto rogue = LoadTls(testing::MakeTestCertificates(certs, "rogue"), "x");
  ASSERT_TRUE(rogue.ok());
  auto other =
      EtcdClient::Create(etcd->endpoint(), *rogue, std::chrono::seconds(1));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE((*other)->Range(r).ok());
  auto ours = etcd->Client()->Range(r);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  ASSERT_EQ(ours->kvs_size(), 1);
  EXPECT_EQ(ours->kvs(0).value(), "v");
  std::filesystem::remove_all(certs);
}

}  // namespace
}  // namespace gandiva::runtime
