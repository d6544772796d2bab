// TiresiasOrder: the live jobs of TiresiasPolicy in the order they get GPUs
// (priority, queue, arrival, id), kept as jobs come, go and change, with
// what the policy's pass asks of that order answered without walking it:
//
//  1. the first job left out: walking the order, each eligible job takes
//     its GPUs from what those before it left of the GPUs up; the first one
//     that does not fit is left out, and every eligible job before it is
//     chosen (FirstLeftOut);
//  2. behind it, the next eligible job that fits in what is left
//     (NextFitting), repeatedly: the rest of the chosen jobs, at most as
//     many as the GPUs left at the first one left out;
//  3. the jobs the pass must settle, in order: the suspended ones with
//     nothing under way anywhere, and the running ones with nothing under
//     way and not held from the first left out on (CollectToSettle);
//  4. the eligible queued jobs between two points of the order, one at a
//     time (NextQueued).
//
// A treap (a binary search tree balanced by a pseudo-random priority drawn
// from the job's id) whose nodes carry, for their subtree, the GPUs the
// eligible jobs ask for (sum and least) and how many jobs are of each kind
// of (3) and (4): every operation above, an insertion, a removal and a
// change of a job's marks costs the tree's depth, O(log n) expected.
//
// Jobs are named by a slot the caller chooses (a small integer it reuses
// once the job is erased); each slot holds at most one job. Not
// thread-safe.
#pragma once

#include <compare>
#include <cstdint>
#include <vector>

#include "core/ids.h"
#include "core/time.h"

namespace gandiva::core {

class TiresiasOrder {
 public:
  // Where a job stands: smaller goes first.
  struct Key {
    int neg_priority = 0;  // -JobSpec::priority
    int level = 0;         // its queue, 0 the highest
    Time submitted;
    JobId id;
    auto operator<=>(const Key&) const = default;
  };
  // What the pass needs to know of a job besides its key.
  struct Marks {
    int gpus = 0;
    // It may be chosen: neither held nor waiting out a failed start.
    bool eligible = false;
    // Running with nothing under way and not held: preempted when not
    // chosen.
    bool running = false;
    // Suspended with nothing under way: resumed if chosen, else requeued.
    bool suspended = false;
    // Queued and eligible: started when chosen.
    bool queued = false;
    bool operator==(const Marks&) const = default;
  };
  static constexpr int kNone = -1;

  // Slots must be >= 0; a slot inserted must not hold a job, one erased or
  // changed must.
  void Insert(int slot, const Key& key, const Marks& marks);
  void Erase(int slot);
  // Changes a job's marks (not its key: Erase and Insert for that).
  void SetMarks(int slot, const Marks& marks);
  void Clear();

  bool contains(int slot) const {
    return slot >= 0 && static_cast<size_t>(slot) < nodes_.size() &&
           nodes_[slot].in;
  }
  const Key& key(int slot) const { return nodes_[slot].key; }
  const Marks& marks(int slot) const { return nodes_[slot].marks; }
  int size() const { return size_; }

  // (1) The first eligible job, in order, whose GPUs exceed what the
  // eligible jobs before it left of `gpus` (kNone when every eligible job
  // fits), and what they left.
  struct Cut {
    int first_out = kNone;
    int left = 0;
  };
  Cut FirstLeftOut(int gpus) const;
  // (2) The first eligible job after `after`'s key asking for at most
  // `left` GPUs, or kNone.
  int NextFitting(int after, int left) const;
  // (3) Appends to `out`, in order, the slots marked `suspended`, and the
  // slots marked `running` whose key is not before `from`'s (none when
  // `from` is kNone).
  void CollectToSettle(int from, std::vector<int>& out) const;
  // (4) The first slot marked `queued` after `after`'s key (from the first
  // job when kNone) and before `before`'s (to the last when kNone), or
  // kNone.
  int NextQueued(int after, int before) const;

 private:
  // What Pull reads of a child first, together.
  struct Node {
    int left = kNone;
    int right = kNone;
    // Of the subtree: GPUs of its eligible jobs, the fewest any of them
    // asks for (kNoFit when none), and its jobs marked running, suspended
    // and queued.
    int64_t gpus = 0;
    int fewest = 0;
    int running = 0;
    int suspended = 0;
    int queued = 0;
    Marks marks;
    uint64_t priority = 0;
    Key key;
    bool in = false;
  };
  static constexpr int kNoFit = 1 << 30;

  void Pull(int t);
  int RotateRight(int t);
  int RotateLeft(int t);
  int InsertAt(int t, int x);
  int EraseAt(int t, const Key& key);
  int Merge(int a, int b);
  int FindFitting(int t, const Key* after, int left) const;
  int FindQueued(int t, const Key* after) const;
  // `range`: 0 no key of the subtree is at or after `from`, 1 some may be,
  // 2 all are.
  void Collect(int t, const Key* from, int range, std::vector<int>& out) const;

  std::vector<Node> nodes_;  // by slot
  int root_ = kNone;
  int size_ = 0;
  std::vector<int> path_;  // SetMarks' scratch
};

}  // namespace gandiva::core
