#include "core/policies/tiresias_order.h"

#include <algorithm>

#include "core/status.h"

namespace gandiva::core {

namespace {

// A well-mixed 64-bit value of the job's id (splitmix64's finalizer): the
// treap's priorities, the same for the same jobs in every run.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

void TiresiasOrder::Pull(int t) {
  Node& n = nodes_[t];
  const bool eligible = n.marks.eligible;
  int64_t gpus = eligible ? n.marks.gpus : 0;
  int fewest = eligible ? n.marks.gpus : kNoFit;
  int running = n.marks.running;
  int suspended = n.marks.suspended;
  int queued = n.marks.queued;
  if (n.left != kNone) {
    const Node& k = nodes_[n.left];
    gpus += k.gpus;
    fewest = std::min(fewest, k.fewest);
    running += k.running;
    suspended += k.suspended;
    queued += k.queued;
  }
  if (n.right != kNone) {
    const Node& k = nodes_[n.right];
    gpus += k.gpus;
    fewest = std::min(fewest, k.fewest);
    running += k.running;
    suspended += k.suspended;
    queued += k.queued;
  }
  n.gpus = gpus;
  n.fewest = fewest;
  n.running = running;
  n.suspended = suspended;
  n.queued = queued;
}

int TiresiasOrder::RotateRight(int t) {
  const int c = nodes_[t].left;
  nodes_[t].left = nodes_[c].right;
  nodes_[c].right = t;
  Pull(t);
  Pull(c);
  return c;
}

int TiresiasOrder::RotateLeft(int t) {
  const int c = nodes_[t].right;
  nodes_[t].right = nodes_[c].left;
  nodes_[c].left = t;
  Pull(t);
  Pull(c);
  return c;
}

int TiresiasOrder::InsertAt(int t, int x) {
  if (t == kNone) return x;
  if (nodes_[x].key < nodes_[t].key) {
    const int c = InsertAt(nodes_[t].left, x);
    nodes_[t].left = c;
    if (nodes_[c].priority > nodes_[t].priority) return RotateRight(t);
  } else {
    const int c = InsertAt(nodes_[t].right, x);
    nodes_[t].right = c;
    if (nodes_[c].priority > nodes_[t].priority) return RotateLeft(t);
  }
  Pull(t);
  return t;
}

int TiresiasOrder::Merge(int a, int b) {
  if (a == kNone) return b;
  if (b == kNone) return a;
  if (nodes_[a].priority > nodes_[b].priority) {
    nodes_[a].right = Merge(nodes_[a].right, b);
    Pull(a);
    return a;
  }
  nodes_[b].left = Merge(a, nodes_[b].left);
  Pull(b);
  return b;
}

int TiresiasOrder::EraseAt(int t, const Key& key) {
  GANDIVA_CHECK(t != kNone);
  Node& n = nodes_[t];
  if (key == n.key) return Merge(n.left, n.right);
  if (key < n.key) {
    const int c = EraseAt(n.left, key);
    nodes_[t].left = c;
  } else {
    const int c = EraseAt(n.right, key);
    nodes_[t].right = c;
  }
  Pull(t);
  return t;
}

void TiresiasOrder::Insert(int slot, const Key& key, const Marks& marks) {
  GANDIVA_CHECK(slot >= 0 && !contains(slot));
  if (static_cast<size_t>(slot) >= nodes_.size()) nodes_.resize(slot + 1);
  Node& n = nodes_[slot];
  n = Node{};
  n.key = key;
  n.marks = marks;
  n.priority = Mix(static_cast<uint64_t>(key.id.value));
  n.in = true;
  Pull(slot);
  root_ = InsertAt(root_, slot);
  ++size_;
}

void TiresiasOrder::Erase(int slot) {
  GANDIVA_CHECK(contains(slot));
  root_ = EraseAt(root_, nodes_[slot].key);
  nodes_[slot].in = false;
  --size_;
}

void TiresiasOrder::SetMarks(int slot, const Marks& marks) {
  GANDIVA_CHECK(contains(slot));
  nodes_[slot].marks = marks;
  const Key& key = nodes_[slot].key;
  path_.clear();
  for (int t = root_; t != slot;) {
    GANDIVA_CHECK(t != kNone);
    path_.push_back(t);
    t = key < nodes_[t].key ? nodes_[t].left : nodes_[t].right;
  }
  Pull(slot);
  for (auto it = path_.rbegin(); it != path_.rend(); ++it) Pull(*it);
}

void TiresiasOrder::Clear() {
  nodes_.clear();
  root_ = kNone;
  size_ = 0;
}

TiresiasOrder::Cut TiresiasOrder::FirstLeftOut(int gpus) const {
  int64_t left = gpus;
  for (int t = root_; t != kNone;) {
    const Node& n = nodes_[t];
    const int64_t before = n.left == kNone ? 0 : nodes_[n.left].gpus;
    if (before > left) {
      t = n.left;
      continue;
    }
    left -= before;
    if (n.marks.eligible) {
      if (n.marks.gpus > left) return {t, static_cast<int>(left)};
      left -= n.marks.gpus;
    }
    t = n.right;
  }
  return {kNone, static_cast<int>(left)};
}

int TiresiasOrder::FindFitting(int t, const Key* after, int left) const {
  if (after == nullptr) {
    // The first of the subtree: one descent.
    if (t == kNone || nodes_[t].fewest > left) return kNone;
    for (;;) {
      const Node& n = nodes_[t];
      if (n.left != kNone && nodes_[n.left].fewest <= left) {
        t = n.left;
      } else if (n.marks.eligible && n.marks.gpus <= left) {
        return t;
      } else {
        t = n.right;  // the subtree holds one, so it is there
      }
    }
  }
  if (t == kNone || nodes_[t].fewest > left) return kNone;
  const Node& n = nodes_[t];
  if (after != nullptr && !(*after < n.key)) {
    return FindFitting(n.right, after, left);
  }
  if (const int found = FindFitting(n.left, after, left); found != kNone) {
    return found;
  }
  if (n.marks.eligible && n.marks.gpus <= left) return t;
  return FindFitting(n.right, nullptr, left);
}

int TiresiasOrder::NextFitting(int after, int left) const {
  return FindFitting(root_, after == kNone ? nullptr : &nodes_[after].key,
                     left);
}

int TiresiasOrder::FindQueued(int t, const Key* after) const {
  if (after == nullptr) {
    // The first of the subtree: one descent.
    if (t == kNone || nodes_[t].queued == 0) return kNone;
    for (;;) {
      const Node& n = nodes_[t];
      if (n.left != kNone && nodes_[n.left].queued > 0) {
        t = n.left;
      } else if (n.marks.queued) {
        return t;
      } else {
        t = n.right;  // the subtree holds one, so it is there
      }
    }
  }
  if (t == kNone || nodes_[t].queued == 0) return kNone;
  const Node& n = nodes_[t];
  if (after != nullptr && !(*after < n.key)) return FindQueued(n.right, after);
  if (const int found = FindQueued(n.left, after); found != kNone) {
    return found;
  }
  if (n.marks.queued) return t;
  return FindQueued(n.right, nullptr);
}

int TiresiasOrder::NextQueued(int after, int before) const {
  const int found =
      FindQueued(root_, after == kNone ? nullptr : &nodes_[after].key);
  if (found == kNone) return kNone;
  if (before != kNone && !(nodes_[found].key < nodes_[before].key)) {
    return kNone;
  }
  return found;
}

void TiresiasOrder::Collect(int t, const Key* from, int range,
                            std::vector<int>& out) const {
  if (t == kNone) return;
  const Node& n = nodes_[t];
  if (n.suspended == 0 && (range == 0 || n.running == 0)) return;
  int here = range;
  if (range == 1) here = *from < n.key || *from == n.key ? 2 : 0;
  // Left of a node at or after `from`, some keys may be; left of one
  // before it, none is. Right of it, likewise all or some.
  Collect(n.left, from, here == 2 ? (range == 2 ? 2 : 1) : 0, out);
  if (n.marks.suspended || (here == 2 && n.marks.running)) out.push_back(t);
  Collect(n.right, from, here == 2 ? 2 : range, out);
}

void TiresiasOrder::CollectToSettle(int from, std::vector<int>& out) const {
  if (from == kNone) {
    Collect(root_, nullptr, 0, out);
  } else {
    Collect(root_, &nodes_[from].key, 1, out);
  }
}

}  // namespace gandiva::core
