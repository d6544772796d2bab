// ActionCache: the agent's idempotency of job actions. A call that
// carries an action_id runs once; a repeat of it (even concurrent: it waits
// for the first) gets the first call's status and reply; an action_id
// reused for another method or job is INVALID_ARGUMENT; action_id 0 asks
// for no idempotency. Beyond 8,192 results kept, the oldest are dropped
// (once finished).
//
// Thread-safety: thread-safe; Run may be called from many threads at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace gandiva::runtime {

// The request a cached action answered, to catch a reused action_id.
struct ActionKey {
  std::string method;
  int64_t job_id = 0;
  bool operator==(const ActionKey&) const = default;
};

// One job action's result, shared by repeats of the same action_id.
struct ActionEntry {
  ActionKey key;
  bool done = false;  // guarded by ActionCache::mu_
  grpc::Status status;
  std::string reply;  // serialised reply message
};

// action_id -> first result. A repeat waits for a first call still running.
class ActionCache {
 public:
  template <typename Reply>
  grpc::Status Run(const ActionKey& key, int64_t action_id, Reply* reply,
                   const std::function<grpc::Status(Reply*)>& fn) {
    if (action_id == 0) return fn(reply);  // 0: no idempotency asked for
    std::shared_ptr<ActionEntry> entry;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto it = entries_.find(action_id);
      if (it != entries_.end()) {
        entry = it->second;
        if (!(entry->key == key)) {
          return grpc::Status(
              grpc::StatusCode::INVALID_ARGUMENT,
              "action_id: " + std::to_string(action_id) + " was used for " +
                  entry->key.method + " of job " +
                  std::to_string(entry->key.job_id) + ", not " + key.method +
                  " of job " + std::to_string(key.job_id));
        }
        cv_.wait(lock, [&] { return entry->done; });
        reply->ParseFromString(entry->reply);
        return entry->status;
      }
      entry = std::make_shared<ActionEntry>();
      entry->key = key;
      entries_[action_id] = entry;
      order_.push_back(action_id);
      Evict();
    }
    grpc::Status status = fn(reply);
    {
      std::lock_guard<std::mutex> lock(mu_);
      entry->status = status;
      reply->SerializeToString(&entry->reply);
      entry->done = true;
    }
    cv_.notify_all();
    return status;
  }

 private:
  static constexpr size_t kMaxEntries = 8192;

  void Evict() {  // mu_ held
    while (order_.size() > kMaxEntries) {
      auto it = entries_.find(order_.front());
      if (it != entries_.end() && !it->second->done) break;
      if (it != entries_.end()) entries_.erase(it);
      order_.pop_front();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, std::shared_ptr<ActionEntry>> entries_;
  std::deque<int64_t> order_;
};

}  // namespace gandiva::runtime
