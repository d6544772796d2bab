#include "runtime/scheduler/dispatcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

namespace gandiva::runtime {
namespace {

using std::chrono::seconds;

// A gate a task waits at until the test opens it.
struct Gate {
  std::promise<void> opened;
  std::shared_future<void> wait = opened.get_future().share();
  void Open() { opened.set_value(); }
};

TEST(DispatcherTest, AJobsTasksRunOneAtATimeInTheOrderHandedOver) {
  Dispatcher d(4);
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  std::promise<void> all;
  for (int i = 0; i < 50; ++i) {
    d.Run(7, [&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      {
        std::lock_guard lock(mu);
        order.push_back(i);
      }
      running.fetch_sub(1);
      if (i == 49) all.set_value();
    });
  }
  ASSERT_EQ(all.get_future().wait_for(seconds(10)), std::future_status::ready);
  EXPECT_FALSE(overlapped);
  std::vector<int> want(50);
  for (int i = 0; i < 50; ++i) want[static_cast<size_t>(i)] = i;
  std::lock_guard lock(mu);
  EXPECT_EQ(order, want);
}

TEST(DispatcherTest, AJobDoesNotWaitBehindAnotherJobsTaskThatBlocks) {
  // Two workers: jobs 1 and 3 would share one under a hash of the job id.
  Dispatcher d(2);
  Gate gate;
  d.Run(1, [w = gate.wait] { w.wait(); });  // a move awaiting a warm start
  std::promise<void> ran;
  d.Run(3, [&] { ran.set_value(); });
  EXPECT_EQ(ran.get_future().wait_for(seconds(10)), std::future_status::ready);
  gate.Open();
}

TEST(DispatcherTest, AJobsNextTaskWaitsForItsBlockedOne) {
  Dispatcher d(4);
  Gate gate;
  std::atomic<bool> second{false};
  d.Run(1, [w = gate.wait] { w.wait(); });
  std::promise<void> done;
  d.Run(1, [&] {
    second = true;
    done.set_value();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(second);
  EXPECT_EQ(d.unfinished(), 2);
  gate.Open();
  EXPECT_EQ(done.get_future().wait_for(seconds(10)), std::future_status::ready);
}

TEST(DispatcherTest, NoMoreWorkersThanItsBoundAndTheRestWait) {
  Dispatcher d(3);
  Gate gate;
  std::atomic<int> started{0};
  for (int job = 0; job < 5; ++job) {
    d.Run(job, [&, w = gate.wait] {
      started.fetch_add(1);
      w.wait();
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (started.load() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(started.load(), 3);
  EXPECT_EQ(d.workers(), 3);
  EXPECT_EQ(d.unfinished(), 5);
  gate.Open();
  while (d.unfinished() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(started.load(), 5);
  EXPECT_EQ(d.workers(), 3);
}

TEST(DispatcherTest, WorkersStartOnlyAsWorkNeedsThem) {
  Dispatcher d(8);
  EXPECT_EQ(d.workers(), 0);
  for (int i = 0; i < 20; ++i) {
    std::promise<void> p;
    d.Run(i, [&p] { p.set_value(); });
    ASSERT_EQ(p.get_future().wait_for(seconds(10)), std::future_status::ready);
    // A worker counts its task finished as it goes idle (one step).
    const auto deadline = std::chrono::steady_clock::now() + seconds(10);
    while (d.unfinished() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // One task at a time, each handed over once the last was done: the one
  // idle worker took each.
  EXPECT_EQ(d.workers(), 1);
}

TEST(DispatcherTest, ATaskMayHandOverWorkForItsOwnJobWhichRunsAfterIt) {
  Dispatcher d(2);
  std::vector<int> order;
  std::promise<void> done;
  d.Run(5, [&] {
    d.Run(5, [&] {
      order.push_back(2);
      done.set_value();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    order.push_back(1);
  });
  ASSERT_EQ(done.get_future().wait_for(seconds(10)), std::future_status::ready);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(DispatcherTest, StopDropsWhatHasNotStartedAndWhatComesAfter) {
  Dispatcher d(1);
  Gate gate;
  std::promise<void> started;
  std::atomic<int> ran{0};
  d.Run(1, [&, w = gate.wait] {
    started.set_value();
    w.wait();
    ran.fetch_add(1);
  });
  d.Run(2, [&] { ran.fetch_add(10); });
  ASSERT_EQ(started.get_future().wait_for(seconds(10)),
            std::future_status::ready);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.Open();
  });
  d.Stop();  // waits for the running task
  opener.join();
  EXPECT_EQ(ran.load(), 1);
  d.Run(3, [&] { ran.fetch_add(100); });
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(d.unfinished(), 0);
  d.Stop();  // again: nothing
}

}  // namespace
}  // namespace gandiva::runtime
