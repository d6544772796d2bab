#include "runtime/scheduler/agent_liveness.h"

#include <algorithm>
#include <cstdio>

namespace gandiva::runtime {

namespace {

int64_t Us(double s) { return static_cast<int64_t>(s * 1e6); }

std::string SecondsAgo(int64_t us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(us) / 1e6);
  return b;
}

}  // namespace

LivenessLimits LivenessLimits::FromSeconds(double timeout_s, double grace_s,
                                           double away_s) {
  return LivenessLimits{Us(timeout_s), Us(grace_s), Us(away_s)};
}

int64_t SilenceAllowedUs(const Liveness& l, const LivenessLimits& lim) {
  return lim.timeout_us + (l.away() ? 0 : lim.grace_us);
}

int64_t AwayUntilUs(const Liveness& l, const LivenessLimits& lim) {
  return l.away_since_us + lim.away_us;
}

int64_t SilentUntilUs(const Liveness& l, const LivenessLimits& lim) {
  return l.last_seen_us + SilenceAllowedUs(l, lim);
}

int64_t AwaitingUntilUs(const Liveness& l, const LivenessLimits& lim) {
  const int64_t silent = SilentUntilUs(l, lim);
  return l.away() ? std::max(silent, AwayUntilUs(l, lim)) : silent;
}

LivenessChange CheckLiveness(const Liveness& l, const LivenessLimits& lim,
                             int64_t now) {
  if (l.link == Liveness::Link::kDown) return LivenessChange::kNone;
  // Away: --agent-away-s from its stop, and as for any agent at least
  // --agent-timeout-s since it was last heard of (or since this daemon
  // started, which may be long after the stop).
  if (now - l.last_seen_us <= lim.timeout_us ||
      (l.away() && now < AwayUntilUs(l, lim))) {
    return LivenessChange::kNone;
  }
  if (now - l.last_seen_us <= SilenceAllowedUs(l, lim)) {
    // Out of reach, within its grace (one awaited is cordoned already).
    return l.link == Liveness::Link::kUp && !l.out_of_reach()
               ? LivenessChange::kOutOfReach
               : LivenessChange::kNone;
  }
  return LivenessChange::kDown;
}

std::string UnreachableReason(const std::string& name, const Liveness& l,
                              int64_t now) {
  if (l.out_of_reach()) {
    return "agent '" + name + "' is out of reach: not heard of for " +
           SecondsAgo(now - l.last_seen_us);
  }
  if (!l.away()) return "";
  return "agent '" + name + "' is away: it stopped " +
         SecondsAgo(now - l.away_since_us) +
         " ago and has not registered since";
}

void Heard(Liveness& l, int64_t now) { l.last_seen_us = now; }

core::Status CheckSameName(const std::string& name, const Liveness& l,
                           const std::string& known_incarnation,
                           const std::string& address,
                           const std::string& incarnation,
                           const LivenessLimits& lim, int64_t now) {
  if (incarnation.empty() || known_incarnation.empty() ||
      incarnation == known_incarnation) {
    return core::Status::Ok();
  }
  const int64_t window = std::min<int64_t>(lim.timeout_us, 5'000'000);
  const int64_t ago = now - l.last_seen_us;
  if (l.link != Liveness::Link::kUp || l.unreachable() || ago >= window) {
    return core::Status::Ok();
  }
  char heard[32];
  std::snprintf(heard, sizeof heard, "%.1f", static_cast<double>(ago) / 1e6);
  return core::FailedPrecondition(
      "field 'name': the agent named '" + name + "' is live at " + address +
      " (heard of " + heard +
      " s ago); another agent cannot take its name: stop that one first, "
      "or give this one another --name");
}

WasUnreachable Registered(Liveness& l, int64_t now) {
  const WasUnreachable was{l.away(), l.silent_since_us};
  l.link = Liveness::Link::kUp;
  l.last_seen_us = now;
  l.away_since_us = 0;
  l.silent_since_us = 0;
  return was;
}

void Leaving(Liveness& l, int64_t now) {
  l.away_since_us = now;
  l.last_seen_us = now;
}

void MarkOutOfReach(Liveness& l, const LivenessLimits& lim, int64_t now) {
  l.silent_since_us = now;
  l.silent_until_us = SilentUntilUs(l, lim);
}

void MarkDown(Liveness& l) {
  l.link = Liveness::Link::kDown;
  l.away_since_us = 0;
  l.silent_since_us = 0;
}

void Await(Liveness& l, int64_t now, int64_t away_since_us) {
  l.link = Liveness::Link::kAwaiting;
  l.last_seen_us = now;
  l.away_since_us = away_since_us;
}

}  // namespace gandiva::runtime
