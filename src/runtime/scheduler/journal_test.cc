#include "runtime/scheduler/journal.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/scheduler/event_codec.h"
#include "runtime/scheduler/faulty_store.h"

namespace gandiva::runtime {
namespace {

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gandiva-journal-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto s = Store::Open((dir_ / "state.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::make_unique<FaultyStore>(std::move(*s));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Journal::Io Io() {
    return Journal::Io{
        *store_, [this] { return leading_; },
        [this](int64_t us) {
          slept_us_ += us;
          if (++sleeps_ == heal_after_sleeps_) {
            store_->Fail(FaultyStore::Op::kAppendEvents, core::Status::Ok());
          }
        },
        [this](const std::string& m) { warnings_.push_back(m); }};
  }
  // The events in the log, as their kinds.
  std::vector<std::string> Logged() {
    std::vector<std::string> kinds;
    EXPECT_TRUE(store_
                    ->ForEachEvent(
                        [&](const EventRow& r) {
                          kinds.push_back(r.kind);
                          return core::Status::Ok();
                        },
                        0)
                    .ok());
    return kinds;
  }

  std::filesystem::path dir_;
  std::unique_ptr<FaultyStore> store_;
  bool leading_ = false;
  int sleeps_ = 0;
  int heal_after_sleeps_ = -1;
  int64_t slept_us_ = 0;
  std::vector<std::string> warnings_;
  // What the handler saw: each event's kind and time.
  std::vector<std::pair<std::string, int64_t>> handled_;
  Journal::Handle Handler(core::Status outcome = core::Status::Ok()) {
    return [this, outcome](core::Time t, const core::EventBody& body) {
      handled_.emplace_back(EventKindName(body), t.micros());
      return outcome;
    };
  }
};

// Events deferred together are logged in one append, before any is
// handled, and handled in order with their own times.
TEST_F(JournalTest, EventsComeLoggedInOneAppendThenHandledInOrder) {
  Journal j;
  j.Defer(10, core::Tick{});
  j.Defer(20, core::KillRequest{core::JobId(3), "user"});
  EXPECT_EQ(j.queued(), 2u);
  size_t logged_when_handled = 0;
  const auto each =
      j.Flush(Io(), [&](core::Time t, const core::EventBody& body) {
        logged_when_handled = Logged().size();
        handled_.emplace_back(EventKindName(body), t.micros());
        return core::Status::Ok();
      });
  ASSERT_EQ(each.size(), 2u);
  EXPECT_TRUE(each[0].ok() && each[1].ok());
  EXPECT_EQ(logged_when_handled, 2u);
  EXPECT_EQ(handled_, (std::vector<std::pair<std::string, int64_t>>{
                          {"Tick", 10}, {"KillRequest", 20}}));
  EXPECT_EQ(Logged(), (std::vector<std::string>{"Tick", "KillRequest"}));
  EXPECT_EQ(j.appends(), 1);
  EXPECT_TRUE(j.empty());
  EXPECT_FALSE(j.unlogged());
  EXPECT_TRUE(warnings_.empty());
}

// The handler's outcome is each event's; while it runs, the journal says
// how many of the batch are still to come.
TEST_F(JournalTest, EachOutcomeIsTheHandlersAndTheRestOfTheBatchIsCounted) {
  Journal j;
  for (int i = 0; i < 3; ++i) j.Defer(i, core::Tick{});
  std::vector<size_t> left;
  const auto each = j.Flush(Io(), [&](core::Time t, const core::EventBody&) {
    left.push_back(j.handling_left());
    return t.micros() == 1 ? core::InvalidArgument("no") : core::Status::Ok();
  });
  EXPECT_EQ(left, (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(j.handling_left(), 0u);
  EXPECT_TRUE(each[0].ok());
  EXPECT_EQ(each[1].code(), core::StatusCode::kInvalidArgument);
  EXPECT_TRUE(each[2].ok());
}

// An event the store will not take is not handled: it is warned of,
// marked unlogged, and its outcome is the store's error.
TEST_F(JournalTest, EventsThatCannotBeLoggedAreNotHandled) {
  store_->Fail(FaultyStore::Op::kAppendEvents,
               core::Status(core::StatusCode::kInternal, "disk full"));
  Journal j;
  j.Defer(1, core::Tick{});
  j.Defer(2, core::Tick{});
  const auto each = j.Flush(Io(), Handler());
  ASSERT_EQ(each.size(), 2u);
  EXPECT_EQ(each[0].code(), core::StatusCode::kInternal);
  EXPECT_EQ(each[1].code(), core::StatusCode::kInternal);
  EXPECT_TRUE(handled_.empty());
  EXPECT_TRUE(Logged().empty());
  EXPECT_TRUE(j.unlogged());
  EXPECT_EQ(j.appends(), 0);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_EQ(warnings_[0],
            "cannot log 2 events, not handled: INTERNAL: disk full");
  j.ClearUnlogged();
  EXPECT_FALSE(j.unlogged());
  // Nothing is kept for later: the next flush logs only what comes next.
  store_->Fail(FaultyStore::Op::kAppendEvents, core::Status::Ok());
  j.Defer(3, core::KillRequest{core::JobId(1), "x"});
  (void)j.Flush(Io(), Handler());
  EXPECT_EQ(Logged(), std::vector<std::string>{"KillRequest"});
}

// A store out of reach for a moment while this daemon leads (etcd electing
// its leader): the journal waits and tries again, then logs and handles
// the events in order. A daemon that does not lead gives up at once.
TEST_F(JournalTest, AStoreOutOfReachIsWaitedForWhileLeading) {
  store_->Fail(FaultyStore::Op::kAppendEvents,
               core::Status(core::StatusCode::kUnavailable, "no leader"));
  leading_ = true;
  heal_after_sleeps_ = 3;
  Journal j;
  j.Defer(1, core::Tick{});
  const auto each = j.Flush(Io(), Handler());
  EXPECT_TRUE(each[0].ok());
  EXPECT_EQ(sleeps_, 3);
  EXPECT_EQ(slept_us_, 300'000);
  EXPECT_EQ(handled_.size(), 1u);
  EXPECT_FALSE(j.unlogged());

  store_->Fail(FaultyStore::Op::kAppendEvents,
               core::Status(core::StatusCode::kUnavailable, "no leader"));
  leading_ = false;
  j.Defer(2, core::Tick{});
  const auto again = j.Flush(Io(), Handler());
  EXPECT_EQ(again[0].code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(sleeps_, 3);
  EXPECT_EQ(handled_.size(), 1u);
  EXPECT_TRUE(j.unlogged());
}

}  // namespace
}  // namespace gandiva::runtime
