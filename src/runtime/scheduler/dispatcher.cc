#include "runtime/scheduler/dispatcher.h"

#include <utility>

namespace gandiva::runtime {

Dispatcher::Dispatcher(int max_workers)
    : max_workers_(max_workers < 1 ? 1 : max_workers) {}

Dispatcher::~Dispatcher() { Stop(); }

void Dispatcher::Run(int64_t key, std::function<void()> task) {
  std::lock_guard lock(mu_);
  if (stop_) return;
  Lane& lane = lanes_[key];
  lane.tasks.push_back(std::move(task));
  ++unfinished_;
  if (lane.running || lane.tasks.size() > 1) return;  // its turn comes
  ready_.push_back(key);
  if (static_cast<int>(ready_.size()) > idle_ &&
      static_cast<int>(threads_.size()) < max_workers_) {
    threads_.emplace_back([this] { WorkerMain(); });
  } else {
    cv_.notify_one();
  }
}

void Dispatcher::WorkerMain() {
  std::unique_lock lock(mu_);
  while (true) {
    ++idle_;
    cv_.wait(lock, [this] { return stop_ || !ready_.empty(); });
    --idle_;
    if (stop_) return;
    const int64_t key = ready_.front();
    ready_.pop_front();
    Lane& lane = lanes_[key];
    std::function<void()> task = std::move(lane.tasks.front());
    lane.tasks.pop_front();
    lane.running = true;
    ++running_;
    lock.unlock();
    task();
    task = nullptr;  // what it holds goes before the next task of its key
    lock.lock();
    --unfinished_;
    --running_;
    ++finished_;
    Lane& after = lanes_[key];  // the map may have rehashed meanwhile
    after.running = false;
    if (after.tasks.empty()) {
      lanes_.erase(key);
    } else if (!stop_) {
      ready_.push_back(key);  // behind the keys that waited meanwhile
    }
  }
}

void Dispatcher::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    for (auto& [key, lane] : lanes_) {
      unfinished_ -= static_cast<int64_t>(lane.tasks.size());
      lane.tasks.clear();
    }
    ready_.clear();
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
}

int Dispatcher::workers() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(threads_.size());
}

int64_t Dispatcher::unfinished() const {
  std::lock_guard lock(mu_);
  return unfinished_;
}

Dispatcher::Load Dispatcher::load() const {
  std::lock_guard lock(mu_);
  return Load{running_, static_cast<int>(ready_.size()), finished_};
}

}  // namespace gandiva::runtime
