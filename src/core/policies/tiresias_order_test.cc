#include "core/policies/tiresias_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "core/rng.h"

namespace gandiva::core {
namespace {

using Key = TiresiasOrder::Key;
using Marks = TiresiasOrder::Marks;
constexpr int kNone = TiresiasOrder::kNone;

// The same questions answered by walking a sorted copy of every job.
struct Walk {
  std::vector<std::pair<Key, int>> jobs;  // (key, slot), sorted

  explicit Walk(const std::map<int, std::pair<Key, Marks>>& live) {
    for (const auto& [slot, km] : live) jobs.emplace_back(km.first, slot);
    std::sort(jobs.begin(), jobs.end());
  }
  size_t Pos(int slot) const {
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].second == slot) return i;
    }
    return jobs.size();
  }
};

// Random insertions, removals, changes of key and of marks; after each, the
// order answers (1) to (4) as a walk of the sorted jobs does.
TEST(TiresiasOrderTest, AnswersAsAWalkOfTheSortedJobsAfterRandomChanges) {
  Rng rng(7);
  TiresiasOrder order;
  std::map<int, std::pair<Key, Marks>> live;  // by slot
  int32_t next_id = 0;
  auto random_key = [&](JobId id) {
    return Key{-static_cast<int>(rng.Below(2)), static_cast<int>(rng.Below(3)),
               Time::FromMicros(static_cast<int64_t>(rng.Below(50))), id};
  };
  auto random_marks = [&] {
    Marks m;
    m.gpus = 1 << rng.Below(4);
    m.eligible = rng.Bernoulli(0.85);
    const int kind = static_cast<int>(rng.Below(4));
    m.running = kind == 1;
    m.suspended = kind == 2;
    m.queued = kind == 3 && m.eligible;
    return m;
  };
  for (int step = 0; step < 3000; ++step) {
    const int what = static_cast<int>(rng.Below(10));
    if ((what < 4 || live.size() < 3) && live.size() < 300) {
      int slot = static_cast<int>(rng.Below(400));
      while (live.count(slot) != 0) slot = (slot + 1) % 400;
      const Key key = random_key(JobId(next_id++));
      const Marks m = random_marks();
      order.Insert(slot, key, m);
      live[slot] = {key, m};
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng.Below(live.size())));
      const int slot = it->first;
      if (what < 6) {
        order.Erase(slot);
        live.erase(it);
      } else if (what < 7) {
        const Key key = random_key(it->second.first.id);
        order.Erase(slot);
        order.Insert(slot, key, it->second.second);
        it->second.first = key;
      } else {
        const Marks m = random_marks();
        order.SetMarks(slot, m);
        it->second.second = m;
      }
    }
    ASSERT_EQ(order.size(), static_cast<int>(live.size()));
    const Walk walk(live);
    auto marks = [&](size_t i) { return live.at(walk.jobs[i].second).second; };

    // (1) and (2), for a few GPU counts.
    for (int gpus : {0, 1, 7, 16, 40, 100}) {
      int64_t left = gpus;
      size_t first_out = walk.jobs.size();
      for (size_t i = 0; i < walk.jobs.size(); ++i) {
        const Marks& m = marks(i);
        if (!m.eligible) continue;
        if (m.gpus > left) {
          first_out = i;
          break;
        }
        left -= m.gpus;
      }
      const TiresiasOrder::Cut cut = order.FirstLeftOut(gpus);
      ASSERT_EQ(cut.left, left) << "step " << step << ", " << gpus << " GPUs";
      ASSERT_EQ(cut.first_out, first_out == walk.jobs.size()
                                   ? kNone
                                   : walk.jobs[first_out].second);
      if (cut.first_out == kNone) continue;
      int after = cut.first_out;
      for (size_t i = first_out + 1; i < walk.jobs.size() && left > 0; ++i) {
        const Marks& m = marks(i);
        if (!m.eligible || m.gpus > left) continue;
        ASSERT_EQ(order.NextFitting(after, static_cast<int>(left)),
                  walk.jobs[i].second);
        left -= m.gpus;
        after = walk.jobs[i].second;
      }
      if (left > 0) {
        ASSERT_EQ(order.NextFitting(after, static_cast<int>(left)), kNone);
      }
    }

    // (3), from the start, from a random job, and with no job running.
    std::vector<int> from_slots = {kNone};
    for (int k = 0; k < 3 && !walk.jobs.empty(); ++k) {
      from_slots.push_back(walk.jobs[rng.Below(walk.jobs.size())].second);
    }
    for (int from : from_slots) {
      const size_t start = from == kNone ? walk.jobs.size() : walk.Pos(from);
      std::vector<int> want;
      for (size_t i = 0; i < walk.jobs.size(); ++i) {
        const Marks& m = marks(i);
        if (m.suspended || (m.running && i >= start)) {
          want.push_back(walk.jobs[i].second);
        }
      }
      std::vector<int> got;
      order.CollectToSettle(from, got);
      ASSERT_EQ(got, want) << "step " << step;
    }

    // (4): the queued jobs between two random points.
    if (!walk.jobs.empty()) {
      const size_t a = rng.Below(walk.jobs.size() + 1);
      const size_t b = rng.Below(walk.jobs.size() + 1);
      const int after = a == walk.jobs.size() ? kNone : walk.jobs[a].second;
      const int before = b == walk.jobs.size() ? kNone : walk.jobs[b].second;
      const size_t lo = after == kNone ? 0 : a + 1;
      const size_t hi = before == kNone ? walk.jobs.size() : b;
      std::vector<int> want, got;
      for (size_t i = lo; i < hi; ++i) {
        if (marks(i).queued) want.push_back(walk.jobs[i].second);
      }
      for (int s = order.NextQueued(after, before); s != kNone;
           s = order.NextQueued(s, before)) {
        got.push_back(s);
      }
      ASSERT_EQ(got, want) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace gandiva::core
