// Journal: the write-ahead log of what the core is told. Each event is
// appended to the store before the core handles it, so that a daemon that
// restarts replays the same events (daemon_recovery.cc) and the core takes
// the same decisions. Events that come together share one append
// (Store::AppendEvents): a commit costs the same for one event as for a
// hundred. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/status.h"
#include "runtime/scheduler/store.h"

namespace gandiva::runtime {

class Journal {
 public:
  // What handles an event once it is logged (the core, then the daemon's
  // bookkeeping after it); its outcome.
  using Handle =
      std::function<core::Status(core::Time, const core::EventBody&)>;
  // What a flush writes to and waits with.
  struct Io {
    Store& store;
    // Whether this daemon still leads: while it does, an append the store
    // refuses as unavailable (etcd electing its own leader) is tried again
    // after sleep_us(100 ms); the loop waits, and events keep their order.
    std::function<bool()> leading;
    std::function<void(int64_t)> sleep_us;
    std::function<void(const std::string&)> warn;
  };

  // Queues `body`, which happened at `time_us`, for the next Flush.
  void Defer(int64_t time_us, core::EventBody body) {
    queued_.push_back(Queued{time_us, std::move(body)});
  }
  bool empty() const { return queued_.empty(); }
  size_t queued() const { return queued_.size(); }

  // Appends the queued events, then hands each one logged to `handle`, in
  // order. Those the store would not take are not handled: they are
  // warned of, and unlogged() is set. Returns each event's outcome:
  // `handle`'s, or the store's error.
  std::vector<core::Status> Flush(const Io& io, const Handle& handle);

  // While Flush hands its events to `handle`: how many are still to come
  // (an event fed meanwhile would be logged after them but handled before
  // them, and a recovery would replay another order).
  size_t handling_left() const { return handling_left_; }
  // Whether some event could not be logged since ClearUnlogged.
  bool unlogged() const { return unlogged_; }
  void ClearUnlogged() { unlogged_ = false; }
  // Appends to the store by this process (one per flush that logged any).
  int64_t appends() const { return appends_; }

 private:
  struct Queued {
    int64_t time_us = 0;
    core::EventBody body;
  };
  std::vector<Queued> queued_;
  size_t handling_left_ = 0;
  bool unlogged_ = false;
  int64_t appends_ = 0;
};

}  // namespace gandiva::runtime
