// The agent-side reader: requests, rate window, latency, stopped processes.
// The job's writes are simulated through a second raw mapping of the page.
#include "client/progress_reader.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "client/gandiva_client.h"
#include "client/page_io.h"
#include "gtest/gtest.h"

namespace gandiva::client {
namespace {

constexpr uint64_t kMs = 1000000;

class ReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gandiva_reader_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/page";
    ASSERT_TRUE(CreateProgressPage(path_).ok());
    ASSERT_EQ(internal::OpenPage(path_.c_str(), &job_), GANDIVA_OK);
    auto r = ProgressReader::Open(path_);
    ASSERT_TRUE(r.ok());
    reader_.emplace(std::move(r).value());
  }
  void TearDown() override {
    internal::UnmapPage(&job_);
    reader_.reset();
    std::filesystem::remove_all(dir_);
  }

  // What gandiva_step() does at boundary j at time t.
  void Boundary(uint64_t j, uint64_t t) {
    job_.page->boundary_ns[j % GANDIVA_PAGE_RING].store(t);
    job_.page->minibatches.store(j + 1);
  }

  std::string dir_, path_;
  internal::PageMapping job_;
  std::optional<ProgressReader> reader_;
};

TEST_F(ReaderTest, RequestsGetIncreasingSequenceNumbers) {
  auto a = reader_->Request(RequestKind::kSuspend);
  auto b = reader_->Request(RequestKind::kResize, 8);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, 1u);
  EXPECT_EQ(*b, 2u);
  uint64_t w = job_.page->request.load();
  EXPECT_EQ(gandiva_request_seq(w), 2u);
  EXPECT_EQ(gandiva_request_kind_of(w), uint32_t{GANDIVA_REQUEST_RESIZE});
  EXPECT_EQ(gandiva_request_arg(w), 8u);
  EXPECT_GT(job_.page->request_posted_ns.load(), 0u);
  EXPECT_FALSE(reader_->IsDone(1));
  job_.page->done_seq.store(2);
  EXPECT_TRUE(reader_->IsDone(1));
  EXPECT_TRUE(reader_->IsDone(2));
  EXPECT_FALSE(reader_->IsDone(3));
  EXPECT_EQ(reader_->Read().request_seq, 2u);
}

TEST_F(ReaderTest, RequestArgumentIsBounded) {
  auto r = reader_->Request(RequestKind::kResize, GANDIVA_REQUEST_ARG_MAX + 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(reader_->Read().request_seq, 0u);  // nothing posted
}

TEST_F(ReaderTest, SequenceNumbersSkipZeroWhenTheyWrap) {
  job_.page->request.store(gandiva_request_pack(0xFFFFFFFFu, 0, 0));
  auto r = reader_->Request(RequestKind::kSuspend);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  job_.page->done_seq.store(0xFFFFFFFFu);
  EXPECT_FALSE(reader_->IsDone(1));  // modular: 1 comes after 2^32 - 1
}

TEST_F(ReaderTest, NoRateBeforeTwoBoundaries) {
  EXPECT_FALSE(reader_->MinibatchRate().has_value());
  Boundary(0, 1000 * kMs);
  EXPECT_FALSE(reader_->MinibatchRate().has_value());
  EXPECT_EQ(reader_->Read().last_boundary_ns, 1000 * kMs);
  Boundary(1, 1010 * kMs);
  ASSERT_TRUE(reader_->MinibatchRate().has_value());
  EXPECT_DOUBLE_EQ(*reader_->MinibatchRate(), 100.0);
}

TEST_F(ReaderTest, RateUsesOnlyTheLastWindowOfBoundaries) {
  // 100 boundaries 10 ms apart, then 15 boundaries 20 ms apart: the window
  // (16 boundaries, 15 intervals) sees only the slow ones.
  uint64_t t = 1000 * kMs;
  uint64_t j = 0;
  for (; j < 100; ++j, t += 10 * kMs) Boundary(j, t);
  EXPECT_DOUBLE_EQ(*reader_->MinibatchRate(), 100.0);
  t += 10 * kMs;  // boundary 100 is 20 ms after boundary 99
  for (; j < 116; ++j, t += 20 * kMs) Boundary(j, t);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.rate_window, uint32_t{kRateWindow});
  EXPECT_EQ(s.minibatches, 116u);
  EXPECT_DOUBLE_EQ(*s.rate_per_second, 50.0);
}

TEST_F(ReaderTest, RateWindowStartsAfterAResume) {
  uint64_t t = 1000 * kMs;
  for (uint64_t j = 0; j < 10; ++j, t += 10 * kMs) Boundary(j, t);
  // Suspended for a long time after boundary 9; resumed: rate_since = 10.
  job_.page->rate_since.store(10);
  EXPECT_FALSE(reader_->MinibatchRate().has_value());
  t += 5000 * kMs;
  Boundary(10, t);  // this interval includes the stop: not usable
  EXPECT_FALSE(reader_->MinibatchRate().has_value());
  Boundary(11, t + 25 * kMs);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.rate_window, 2u);
  EXPECT_DOUBLE_EQ(*s.rate_per_second, 40.0);
}

TEST_F(ReaderTest, RateStopsAtAnOverwrittenSlot) {
  uint64_t t = 1000 * kMs;
  for (uint64_t j = 0; j < 20; ++j, t += 10 * kMs) Boundary(j, t);
  // The job is writing boundary 20 into the slot of boundary 4 (the oldest in
  // the window) but has not published the count yet.
  job_.page->boundary_ns[20 % GANDIVA_PAGE_RING].store(t);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.minibatches, 20u);
  EXPECT_EQ(s.rate_window, uint32_t{kRateWindow - 1});
  EXPECT_DOUBLE_EQ(*s.rate_per_second, 100.0);
}

TEST_F(ReaderTest, LatencyOfTheLastServedRequest) {
  EXPECT_FALSE(reader_->LastRequestLatencyNs().has_value());
  job_.page->last_kind.store(GANDIVA_REQUEST_SUSPEND);
  job_.page->last_received_ns.store(5 * kMs);
  job_.page->last_effective_ns.store(7 * kMs);
  job_.page->served_count.store(1);
  job_.page->state.store(GANDIVA_STATE_SUSPENDED);
  job_.page->pid.store(1234);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.last_kind, RequestKind::kSuspend);
  EXPECT_EQ(s.state, JobState::kSuspended);
  EXPECT_EQ(reader_->state(), JobState::kSuspended);
  EXPECT_EQ(reader_->pid(), 1234);
  ASSERT_TRUE(reader_->LastRequestLatencyNs().has_value());
  EXPECT_EQ(*reader_->LastRequestLatencyNs(), static_cast<int64_t>(2 * kMs));
}

TEST_F(ReaderTest, ReaderIsMovable) {
  ProgressReader moved = std::move(*reader_);
  reader_.reset();
  Boundary(0, 1);
  EXPECT_EQ(moved.minibatches(), 1u);
  EXPECT_EQ(moved.path(), path_);
}

TEST(Names, StatesAndKinds) {
  EXPECT_EQ(JobStateName(JobState::kSuspended), "suspended");
  EXPECT_EQ(JobStateName(JobState::kExited), "exited");
  EXPECT_EQ(RequestKindName(RequestKind::kCheckpointAndExit),
            "checkpoint-and-exit");
}

TEST(ProcessIsStopped, SeesAStoppedChild) {
  EXPECT_FALSE(ProcessIsStopped(getpid()));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    raise(SIGSTOP);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status));
  EXPECT_TRUE(ProcessIsStopped(pid));
  kill(pid, SIGCONT);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_FALSE(ProcessIsStopped(pid));  // gone
}

}  // namespace
}  // namespace gandiva::client
