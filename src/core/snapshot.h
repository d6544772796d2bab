// Snapshot encoding: the scheduler's state as bytes (Scheduler::Snapshot),
// so that a world that logs its events (the daemon) can restart from a
// snapshot and the events after it instead of every event ever logged.
//
// SnapshotWriter appends fixed-width little-endian values and
// length-prefixed strings; SnapshotReader reads them back in the same order.
// A reader fails (and then returns zeros) at the first value the bytes do
// not hold, or a count larger than the bytes left could hold: a truncated or
// corrupt snapshot gives an error, never a crash or a huge allocation.
// Plain values: thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "core/time.h"

namespace gandiva::core {

class SnapshotWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void I32(int32_t v) { Raw(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { Raw(static_cast<uint64_t>(v)); }
  void F64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    Raw(bits);
  }
  void Str(std::string_view s) {
    I64(static_cast<int64_t>(s.size()));
    out_.append(s);
  }
  void At(Time t) { I64(t.micros()); }
  template <typename Tag, typename Rep>
  void Id(gandiva::core::Id<Tag, Rep> id) {
    I64(id.value);
  }
  template <typename Tag, typename Rep>
  void Ids(const std::vector<gandiva::core::Id<Tag, Rep>>& ids) {
    I64(static_cast<int64_t>(ids.size()));
    for (auto id : ids) Id(id);
  }
  template <typename Tag, typename Rep>
  void IdSet(const std::set<gandiva::core::Id<Tag, Rep>>& ids) {
    I64(static_cast<int64_t>(ids.size()));
    for (auto id : ids) Id(id);
  }

  const std::string& bytes() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  template <typename U>
  void Raw(U v) {
    for (size_t i = 0; i < sizeof(U); ++i) {
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
  }
  std::string out_;
};

class SnapshotReader {
 public:
  explicit SnapshotReader(std::string_view bytes) : in_(bytes) {}

  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  bool Bool() {
    const uint8_t v = U8();
    if (v > 1) Fail("a boolean is " + std::to_string(v));
    return v == 1;
  }
  int32_t I32() { return static_cast<int32_t>(Raw<uint32_t>()); }
  int64_t I64() { return static_cast<int64_t>(Raw<uint64_t>()); }
  double F64() {
    const uint64_t bits = Raw<uint64_t>();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  std::string Str() {
    const int64_t n = Count(1);
    if (!ok_) return {};
    std::string s(in_.substr(pos_, static_cast<size_t>(n)));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  Time At() { return Time::FromMicros(I64()); }
  template <typename IdT>
  IdT Id() {
    const int64_t v = I64();
    using Rep = decltype(IdT().value);
    if (v < -1 || v > static_cast<int64_t>(std::numeric_limits<Rep>::max())) {
      Fail("an id is out of range: " + std::to_string(v));
      return IdT();
    }
    return IdT(static_cast<Rep>(v));
  }
  template <typename IdT>
  std::vector<IdT> Ids() {
    const int64_t n = Count(8);
    std::vector<IdT> out;
    out.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n && ok_; ++i) out.push_back(Id<IdT>());
    return out;
  }
  template <typename IdT>
  std::set<IdT> IdSet() {
    const int64_t n = Count(8);
    std::set<IdT> out;
    for (int64_t i = 0; i < n && ok_; ++i) out.insert(Id<IdT>());
    return out;
  }
  // A count of items of at least `min_bytes` each: fails when the bytes
  // left cannot hold that many (0 on failure).
  int64_t Count(size_t min_bytes) {
    const int64_t n = I64();
    if (!ok_) return 0;
    if (n < 0 || static_cast<uint64_t>(n) >
                     (in_.size() - pos_) / std::max<size_t>(min_bytes, 1)) {
      Fail("a count of " + std::to_string(n) + " exceeds the bytes left");
      return 0;
    }
    return n;
  }

  // Marks the snapshot invalid with `why` (the first failure is kept).
  void Fail(const std::string& why) {
    if (!ok_) return;
    ok_ = false;
    error_ = why + " (at byte " + std::to_string(pos_) + ")";
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == in_.size(); }
  // Ok when every read succeeded and all bytes were read; else an error
  // naming `what` and the first problem.
  Status Finish(const std::string& what) const {
    if (!ok_) return InvalidArgument(what + ": " + error_);
    if (!at_end()) {
      return InvalidArgument(what + ": " + std::to_string(in_.size() - pos_) +
                             " bytes left over");
    }
    return Status::Ok();
  }

 private:
  bool Need(size_t n) {
    if (!ok_) return false;
    if (in_.size() - pos_ < n) {
      Fail("truncated");
      return false;
    }
    return true;
  }
  template <typename U>
  U Raw() {
    if (!Need(sizeof(U))) return 0;
    U v = 0;
    for (size_t i = 0; i < sizeof(U); ++i) {
      v |= static_cast<U>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += sizeof(U);
    return v;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
};

}  // namespace gandiva::core
