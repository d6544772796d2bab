// Time in the scheduler: integer microseconds with named types.
//
// `Duration` is a span, `Time` a point on some clock (simulated or real; the
// core never reads a clock itself). Both are plain values, safe to share
// between threads. Arithmetic saturates nowhere: callers keep within int64.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>
#include <string>

namespace gandiva::core {

class Duration {
 public:
  constexpr Duration() = default;
  static constexpr Duration Micros(int64_t us) { return Duration(us); }
  static constexpr Duration Millis(int64_t ms) { return Duration(ms * 1000); }
  static constexpr Duration Seconds(int64_t s) { return Duration(s * 1000000); }
  // Rounds to the nearest microsecond.
  static Duration FromSeconds(double s);
  static constexpr Duration Infinite() {
    return Duration(std::numeric_limits<int64_t>::max());
  }

  constexpr int64_t micros() const { return us_; }
  constexpr double seconds() const { return static_cast<double>(us_) / 1e6; }
  constexpr bool is_infinite() const { return *this == Infinite(); }

  constexpr auto operator<=>(const Duration&) const = default;
  constexpr Duration operator+(Duration o) const {
    return Duration(us_ + o.us_);
  }
  constexpr Duration operator-(Duration o) const {
    return Duration(us_ - o.us_);
  }
  constexpr Duration operator*(int64_t k) const { return Duration(us_ * k); }
  constexpr Duration operator/(int64_t k) const { return Duration(us_ / k); }
  constexpr Duration& operator+=(Duration o) {
    us_ += o.us_;
    return *this;
  }
  constexpr Duration& operator-=(Duration o) {
    us_ -= o.us_;
    return *this;
  }

 private:
  constexpr explicit Duration(int64_t us) : us_(us) {}
  int64_t us_ = 0;
};

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time FromMicros(int64_t us) { return Time(us); }
  static constexpr Time Zero() { return Time(0); }
  static constexpr Time Never() {
    return Time(std::numeric_limits<int64_t>::max());
  }

  constexpr int64_t micros() const { return us_; }
  constexpr double seconds() const { return static_cast<double>(us_) / 1e6; }

  constexpr auto operator<=>(const Time&) const = default;
  constexpr Time operator+(Duration d) const { return Time(us_ + d.micros()); }
  constexpr Time operator-(Duration d) const { return Time(us_ - d.micros()); }
  constexpr Duration operator-(Time o) const {
    return Duration::Micros(us_ - o.us_);
  }
  constexpr Time& operator+=(Duration d) {
    us_ += d.micros();
    return *this;
  }

 private:
  constexpr explicit Time(int64_t us) : us_(us) {}
  int64_t us_ = 0;
};

// "1h02m03s", "4.250s", "12ms": for logs and tables.
std::string FormatDuration(Duration d);

}  // namespace gandiva::core
