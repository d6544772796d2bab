#include "core/usage.h"

#include <algorithm>
#include <utility>

namespace gandiva::core {

int64_t UsageLedger::HourOf(Time t) {
  const int64_t h = kHour.micros();
  const int64_t us = t.micros();
  return us >= 0 ? us / h : -((-us + h - 1) / h);  // floor
}

Time UsageLedger::HourStart(Time t) {
  return Time::FromMicros(HourOf(t) * kHour.micros());
}

void UsageLedger::Charge(const UsageKey& key, Time from, Time to, int gpus) {
  if (gpus <= 0 || to <= from) return;
  const int64_t last = HourOf(to - Duration::Micros(1));
  for (int64_t h = HourOf(from); h <= last; ++h) {
    const Time start = std::max(from, Time::FromMicros(h * kHour.micros()));
    const Time end = std::min(to, Time::FromMicros((h + 1) * kHour.micros()));
    hours_[h][key] += (end - start).seconds() * gpus;
  }
  // Keep the last `keep` (whole hours) up to the latest charged.
  const int64_t oldest = last + 1 - keep_.micros() / kHour.micros();
  hours_.erase(hours_.begin(), hours_.lower_bound(oldest));
}

void UsageLedger::Note(const Job& job, Time now) {
  const bool runs = job.state == JobState::kRunning;
  const int gpus = static_cast<int>(job.gpus.size());
  if (auto it = open_.find(job.id); it != open_.end()) {
    const Open& o = it->second;
    if (runs && o.gpus == gpus && o.key.queue == job.spec.vc &&
        o.key.user == job.spec.owner) {
      return;  // as it was: charged when asked for or when it changes
    }
    Charge(o.key, o.since, now, o.gpus);
    open_.erase(it);
  }
  if (runs) {
    open_[job.id] = Open{now, gpus, UsageKey{job.spec.vc, job.spec.owner}};
  }
}

std::map<UsageKey, double> UsageLedger::Used(Time from, Time now) const {
  std::map<UsageKey, double> out;
  const int64_t first = HourOf(from);
  for (auto it = hours_.lower_bound(first); it != hours_.end(); ++it) {
    for (const auto& [key, seconds] : it->second) out[key] += seconds;
  }
  const Time start = HourStart(from);
  for (const auto& [job, o] : open_) {
    const Time since = std::max(o.since, start);
    if (now > since) out[o.key] += (now - since).seconds() * o.gpus;
  }
  return out;
}

Time UsageLedger::first_hour() const {
  if (hours_.empty()) return Time::Never();
  return Time::FromMicros(hours_.begin()->first * kHour.micros());
}

void UsageLedger::Save(SnapshotWriter& w) const {
  w.I64(static_cast<int64_t>(hours_.size()));
  for (const auto& [hour, used] : hours_) {
    w.I64(hour);
    w.I64(static_cast<int64_t>(used.size()));
    for (const auto& [key, seconds] : used) {
      w.Str(key.queue);
      w.Str(key.user);
      w.F64(seconds);
    }
  }
  w.I64(static_cast<int64_t>(open_.size()));
  for (const auto& [job, o] : open_) {
    w.Id(job);
    w.At(o.since);
    w.I32(o.gpus);
    w.Str(o.key.queue);
    w.Str(o.key.user);
  }
}

void UsageLedger::Load(SnapshotReader& r) {
  hours_.clear();
  open_.clear();
  const int64_t hours = r.Count(16);
  for (int64_t i = 0; i < hours && r.ok(); ++i) {
    const int64_t hour = r.I64();
    auto& used = hours_[hour];
    const int64_t n = r.Count(24);
    for (int64_t k = 0; k < n && r.ok(); ++k) {
      UsageKey key;
      key.queue = r.Str();
      key.user = r.Str();
      used[std::move(key)] = r.F64();
    }
  }
  const int64_t open = r.Count(36);
  for (int64_t i = 0; i < open && r.ok(); ++i) {
    const JobId job = r.Id<JobId>();
    Open o;
    o.since = r.At();
    o.gpus = r.I32();
    o.key.queue = r.Str();
    o.key.user = r.Str();
    if (o.gpus < 0)
      r.Fail("usage: a job runs on " + std::to_string(o.gpus) + " GPUs");
    open_[job] = std::move(o);
  }
}

}  // namespace gandiva::core
