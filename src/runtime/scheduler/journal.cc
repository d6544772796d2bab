#include "runtime/scheduler/journal.h"

#include <span>
#include <utility>

#include "runtime/scheduler/event_codec.h"

namespace gandiva::runtime {

std::vector<core::Status> Journal::Flush(const Io& io, const Handle& handle) {
  std::vector<Queued> todo;
  todo.swap(queued_);
  std::vector<EventRow> rows;
  rows.reserve(todo.size());
  for (const Queued& q : todo) {
    rows.push_back(
        EventRow{0, q.time_us, EventKindName(q.body), EncodeEvent(q.body)});
  }
  size_t logged = 0;
  core::Status error;
  while (logged < rows.size()) {
    Store::Appended a =
        io.store.AppendEvents(std::span<const EventRow>(rows).subspan(logged));
    logged += a.count;
    if (a.status.ok()) break;
    if (a.status.code() == core::StatusCode::kUnavailable && io.leading()) {
      io.sleep_us(100'000);
      continue;
    }
    error = a.status;
    break;
  }
  if (logged > 0) ++appends_;
  if (!error.ok()) {
    io.warn("cannot log " +
            (todo.size() - logged == 1
                 ? std::string("event ") + EventKindName(todo.back().body)
                 : std::to_string(todo.size() - logged) + " events") +
            ", not handled: " + error.ToString());
    unlogged_ = true;
  }
  std::vector<core::Status> each(todo.size(), error);
  for (size_t i = 0; i < logged; ++i) {
    handling_left_ = logged - i - 1;
    each[i] = handle(core::Time::FromMicros(todo[i].time_us), todo[i].body);
  }
  handling_left_ = 0;
  return each;
}

}  // namespace gandiva::runtime
