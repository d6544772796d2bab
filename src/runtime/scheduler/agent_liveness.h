// Whether the daemon can reach an agent: awaiting its first registration,
// up, away (it said it stops), out of reach (not heard of), or down. Pure:
// the time is an argument (the daemon's clock, Unix us, never behind the
// wall clock), so that tests drive it with a fake one.
//
// The rules (README "Agents out of reach", "Agents that stop"):
//   - an agent heard of within --agent-timeout-s is fine;
//   - an up agent not heard of for longer is out of reach: its server is
//     cordoned, calls to it fail at once, its jobs are kept where they
//     run; --agent-grace-s later it is down;
//   - an away agent is down --agent-away-s after its stop, and not before
//     --agent-timeout-s since it was last heard of (it is never out of
//     reach: its jobs saved their checkpoints as it stopped);
//   - an agent awaited since this daemon started is down after
//     --agent-timeout-s and --agent-grace-s (it is cordoned already);
//   - registering again makes any agent up.
// Thread-safety: none; the daemon's loop owns every Liveness.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace gandiva::runtime {

// --agent-timeout-s, --agent-grace-s and --agent-away-s, in microseconds.
struct LivenessLimits {
  int64_t timeout_us = 0;
  int64_t grace_us = 0;
  int64_t away_us = 0;
  static LivenessLimits FromSeconds(double timeout_s, double grace_s,
                                    double away_s);
};

struct Liveness {
  enum class Link { kAwaiting, kUp, kDown };
  Link link = Link::kAwaiting;
  int64_t last_seen_us = 0;
  // It said it was stopping (Leave) and has not registered since (0: not
  // away).
  int64_t away_since_us = 0;
  // Found out of reach then (0: heard of), and when it is declared down.
  int64_t silent_since_us = 0;
  int64_t silent_until_us = 0;

  bool away() const { return away_since_us > 0; }
  bool out_of_reach() const { return silent_since_us > 0; }
  // Calls to it fail at once (away or out of reach).
  bool unreachable() const { return away() || out_of_reach(); }
};

// What a check at a time finds has changed.
enum class LivenessChange {
  kNone,
  kOutOfReach,  // it just became so: cordon its server, keep its jobs
  kDown,        // declared down: its server goes down
};

// The check at `now` (it changes nothing: see the transitions below).
LivenessChange CheckLiveness(const Liveness& l, const LivenessLimits& lim,
                             int64_t now);

// How long it may go unheard of before it is declared down: an away one
// --agent-timeout-s (and --agent-away-s from its stop), any other
// --agent-grace-s longer.
int64_t SilenceAllowedUs(const Liveness& l, const LivenessLimits& lim);
// When an away agent is declared down, unless it registers by then.
int64_t AwayUntilUs(const Liveness& l, const LivenessLimits& lim);
// When an agent not heard of (out of reach, or awaited) is declared down.
int64_t SilentUntilUs(const Liveness& l, const LivenessLimits& lim);
// When an awaited agent is declared down (for an away one: the later of
// the two).
int64_t AwaitingUntilUs(const Liveness& l, const LivenessLimits& lim);

// Why calls to the agent named `name` fail at `now`; "" when they may not.
std::string UnreachableReason(const std::string& name, const Liveness& l,
                              int64_t now);

// Whether an agent process of `incarnation` may register under `name`,
// known as `l` of `known_incarnation` at `address`: not while that is
// another process and live (up, neither away nor out of reach, heard of in
// the last min(timeout, 5 s)). FailedPrecondition saying so; Ok when
// either incarnation is empty (agents from before them).
core::Status CheckSameName(const std::string& name, const Liveness& l,
                           const std::string& known_incarnation,
                           const std::string& address,
                           const std::string& incarnation,
                           const LivenessLimits& lim, int64_t now);

// Transitions.
// A report (or another call) from it.
void Heard(Liveness& l, int64_t now);
// It registered: up, no longer away nor out of reach. Returns what it was.
struct WasUnreachable {
  bool away = false;
  int64_t silent_since_us = 0;  // 0: it was not out of reach
};
WasUnreachable Registered(Liveness& l, int64_t now);
// It said it stops (Leave).
void Leaving(Liveness& l, int64_t now);
// CheckLiveness said kOutOfReach.
void MarkOutOfReach(Liveness& l, const LivenessLimits& lim, int64_t now);
// CheckLiveness said kDown.
void MarkDown(Liveness& l);
// Awaited by a daemon that starts: as if last heard of at `now`, away
// since `away_since_us` (from its row; 0: not away).
void Await(Liveness& l, int64_t now, int64_t away_since_us);

}  // namespace gandiva::runtime
