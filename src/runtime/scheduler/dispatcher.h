// Dispatcher: runs the daemon's agent calls off the event loop, each job's
// in the order they were handed over, and different jobs' side by side.
//
// Contract: tasks of one key (a job id) run one at a time, in the order of
// Run; tasks of different keys never wait for each other while fewer than
// `max_workers` tasks run. Workers are started as work needs them, up to
// `max_workers`, and kept until Stop. A task handed over after Stop is
// dropped; Stop drops the tasks not yet started and waits for those
// running.
//
// Thread-safety: every method may be called from any thread; Run from a
// task too (for any key, its own included: that runs after the task), but
// not Stop, which waits for the running tasks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gandiva::runtime {

class Dispatcher {
 public:
  explicit Dispatcher(int max_workers);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  void Run(int64_t key, std::function<void()> task);
  void Stop();

  // For tests and metrics: workers started so far, and tasks handed over
  // that have not finished (queued or running).
  int workers() const;
  int64_t unfinished() const;
  // For tests that move a fake clock: tasks running now, tasks whose turn
  // has come that wait for a worker, and tasks finished since the start.
  struct Load {
    int running = 0;
    int ready = 0;
    uint64_t finished = 0;
  };
  Load load() const;

 private:
  struct Lane {
    std::deque<std::function<void()>> tasks;
    bool running = false;  // a worker runs its front task
  };
  void WorkerMain();

  const int max_workers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Keys whose lane has tasks and none running, in the order they became
  // so: the next a free worker takes.
  std::deque<int64_t> ready_;                // guarded by mu_
  std::unordered_map<int64_t, Lane> lanes_;  // guarded by mu_
  int idle_ = 0;                             // workers waiting for work; mu_
  int64_t unfinished_ = 0;                   // guarded by mu_
  int running_ = 0;                          // guarded by mu_
  uint64_t finished_ = 0;                    // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
};

}  // namespace gandiva::runtime
