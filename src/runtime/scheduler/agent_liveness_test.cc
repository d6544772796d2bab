#include "runtime/scheduler/agent_liveness.h"

#include <gtest/gtest.h>

namespace gandiva::runtime {
namespace {

constexpr int64_t kS = 1'000'000;
// --agent-timeout-s 30, --agent-grace-s 90, --agent-away-s 600.
const LivenessLimits kLim = LivenessLimits::FromSeconds(30, 90, 600);

// An agent up since t0, with a fake clock that the test moves on.
struct Clocked {
  int64_t now = 1'000 * kS;
  Liveness l;
  Clocked() { (void)Registered(l, now); }
  LivenessChange CheckAfter(int64_t seconds) {
    now += seconds * kS;
    return CheckLiveness(l, kLim, now);
  }
};

TEST(AgentLivenessTest, AnAgentHeardOfWithinItsTimeoutIsFine) {
  Clocked c;
  EXPECT_EQ(c.CheckAfter(30), LivenessChange::kNone);
  Heard(c.l, c.now);
  EXPECT_EQ(c.CheckAfter(30), LivenessChange::kNone);
  EXPECT_EQ(UnreachableReason("a", c.l, c.now), "");
}

TEST(AgentLivenessTest, ASilentAgentIsOutOfReachOnceThenDownPastItsGrace) {
  Clocked c;
  const int64_t seen = c.now;
  ASSERT_EQ(c.CheckAfter(31), LivenessChange::kOutOfReach);
  MarkOutOfReach(c.l, kLim, c.now);
  EXPECT_TRUE(c.l.out_of_reach());
  EXPECT_TRUE(c.l.unreachable());
  EXPECT_EQ(c.l.silent_since_us, c.now);
  EXPECT_EQ(c.l.silent_until_us, seen + 120 * kS);
  EXPECT_EQ(UnreachableReason("a", c.l, c.now),
            "agent 'a' is out of reach: not heard of for 31.0 s");
  // Once: the next checks within the grace change nothing.
  EXPECT_EQ(c.CheckAfter(60), LivenessChange::kNone);
  EXPECT_EQ(c.CheckAfter(29), LivenessChange::kNone);  // 120 s: the last
  ASSERT_EQ(c.CheckAfter(1), LivenessChange::kDown);
  MarkDown(c.l);
  EXPECT_EQ(c.l.link, Liveness::Link::kDown);
  EXPECT_FALSE(c.l.unreachable());
  EXPECT_EQ(c.CheckAfter(1000), LivenessChange::kNone);  // down stays down
}

TEST(AgentLivenessTest, WithNoGraceAnAgentSilentPastItsTimeoutIsDown) {
  const LivenessLimits lim = LivenessLimits::FromSeconds(30, 0, 600);
  Liveness l;
  (void)Registered(l, 0);
  EXPECT_EQ(CheckLiveness(l, lim, 30 * kS), LivenessChange::kNone);
  EXPECT_EQ(CheckLiveness(l, lim, 30 * kS + 1), LivenessChange::kDown);
}

TEST(AgentLivenessTest, AnAwayAgentIsDownAfterItsAwayTimeNeverOutOfReach) {
  Clocked c;
  Leaving(c.l, c.now);
  const int64_t stopped = c.now;
  EXPECT_TRUE(c.l.away());
  EXPECT_EQ(AwayUntilUs(c.l, kLim), stopped + 600 * kS);
  EXPECT_EQ(c.CheckAfter(2), LivenessChange::kNone);
  EXPECT_EQ(UnreachableReason("a", c.l, c.now),
            "agent 'a' is away: it stopped 2.0 s ago and has not registered "
            "since");
  // Past its timeout and the grace an agent out of reach would have:
  // still away, not out of reach.
  EXPECT_EQ(c.CheckAfter(200), LivenessChange::kNone);
  EXPECT_EQ(c.CheckAfter(397), LivenessChange::kNone);  // 599 s
  EXPECT_EQ(c.CheckAfter(2), LivenessChange::kDown);
}

TEST(AgentLivenessTest, AnAwayAgentIsGivenItsTimeoutSinceLastHeardOf) {
  // --agent-away-s shorter than the timeout: an awaited agent away since
  // long before the daemon started is still given the timeout from then.
  const LivenessLimits lim = LivenessLimits::FromSeconds(30, 90, 5);
  Liveness l;
  Await(l, 1000 * kS, /*away_since_us=*/10 * kS);
  EXPECT_EQ(SilenceAllowedUs(l, lim), 30 * kS);  // no grace when away
  EXPECT_EQ(AwaitingUntilUs(l, lim), 1030 * kS);
  EXPECT_EQ(CheckLiveness(l, lim, 1030 * kS), LivenessChange::kNone);
  EXPECT_EQ(CheckLiveness(l, lim, 1030 * kS + 1), LivenessChange::kDown);
}

TEST(AgentLivenessTest, AnAwaitedAgentIsDownAfterTimeoutAndGraceNotOutOfReach) {
  Liveness l;
  Await(l, 0, 0);
  EXPECT_EQ(AwaitingUntilUs(l, kLim), 120 * kS);
  // Cordoned already by the daemon that awaits it: never "out of reach".
  EXPECT_EQ(CheckLiveness(l, kLim, 60 * kS), LivenessChange::kNone);
  EXPECT_EQ(CheckLiveness(l, kLim, 120 * kS), LivenessChange::kNone);
  EXPECT_EQ(CheckLiveness(l, kLim, 120 * kS + 1), LivenessChange::kDown);
}

TEST(AgentLivenessTest, AnAwaitedAwayAgentWaitsForTheLaterOfItsTwoDeadlines) {
  Liveness l;
  Await(l, 100 * kS, /*away_since_us=*/90 * kS);
  // Timeout from the start: 130 s; away: 690 s.
  EXPECT_EQ(AwaitingUntilUs(l, kLim), 690 * kS);
  EXPECT_EQ(CheckLiveness(l, kLim, 689 * kS), LivenessChange::kNone);
  EXPECT_EQ(CheckLiveness(l, kLim, 690 * kS + 1), LivenessChange::kDown);
}

TEST(AgentLivenessTest, RegisteringAgainSaysWhatItWasAndMakesItUp) {
  Clocked c;
  ASSERT_EQ(c.CheckAfter(40), LivenessChange::kOutOfReach);
  MarkOutOfReach(c.l, kLim, c.now);
  const int64_t since = c.now;
  c.now += 5 * kS;
  WasUnreachable was = Registered(c.l, c.now);
  EXPECT_FALSE(was.away);
  EXPECT_EQ(was.silent_since_us, since);
  EXPECT_EQ(c.l.link, Liveness::Link::kUp);
  EXPECT_FALSE(c.l.unreachable());
  EXPECT_EQ(c.CheckAfter(30), LivenessChange::kNone);

  Leaving(c.l, c.now);
  was = Registered(c.l, c.now + kS);
  EXPECT_TRUE(was.away);
  EXPECT_EQ(was.silent_since_us, 0);
  EXPECT_FALSE(c.l.away());

  MarkDown(c.l);
  was = Registered(c.l, c.now + 2 * kS);
  EXPECT_EQ(c.l.link, Liveness::Link::kUp);
  EXPECT_FALSE(was.away);
}

TEST(AgentLivenessTest, AnotherProcessCannotTakeALiveAgentsName) {
  Liveness l;
  (void)Registered(l, 100 * kS);
  auto check = [&](const std::string& incarnation, int64_t now) {
    return CheckSameName("node-1", l, "aaaa", "10.0.0.1:5000", incarnation,
                         kLim, now);
  };
  // The same process registers again at any time.
  EXPECT_TRUE(check("aaaa", 100 * kS + 1).ok());
  // Another, while the first is heard of within the last 5 s: refused.
  const core::Status s = check("bbbb", 102 * kS);
  EXPECT_EQ(s.code(), core::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "field 'name': the agent named 'node-1' is live at 10.0.0.1:5000 "
            "(heard of 2.0 s ago); another agent cannot take its name: stop "
            "that one first, or give this one another --name");
  // Unheard of for 5 s (it crashed), away (it stopped) or out of reach:
  // the new process takes the name.
  EXPECT_TRUE(check("bbbb", 105 * kS).ok());
  Heard(l, 104 * kS);
  EXPECT_FALSE(check("bbbb", 105 * kS).ok());
  Leaving(l, 104 * kS);
  EXPECT_TRUE(check("bbbb", 104 * kS + 1).ok());
  (void)Registered(l, 106 * kS);
  MarkOutOfReach(l, kLim, 106 * kS);
  EXPECT_TRUE(check("bbbb", 106 * kS + 1).ok());
  // Agents from before incarnations are never refused.
  (void)Registered(l, 107 * kS);
  EXPECT_TRUE(check("", 107 * kS).ok());
  EXPECT_TRUE(CheckSameName("node-1", l, "", "x", "bbbb", kLim, 107 * kS).ok());
}

}  // namespace
}  // namespace gandiva::runtime
