// The one idea of the design: the same event stream into the same core gives
// the same actions, whichever world drives it. A simulated run is recorded
// (every event and the actions it caused); its events, written and read back
// in the daemon's event-log format, are replayed into a fresh scheduler with
// the same policy, which must take exactly the same actions. The daemon's
// crash recovery rests on this.
#include <gtest/gtest.h>

#include "core/policies/registry.h"
#include "core/scheduler.h"
#include "runtime/scheduler/event_codec.h"
#include "sim/simulator.h"
#include "sim/workload/synthetic.h"

namespace gandiva {
namespace {

struct Step {
  core::Event event;
  std::vector<core::Action> actions;
};

bool Same(const core::Action& a, const core::Action& b) {
  return a.id == b.id && a.kind == b.kind && a.job == b.job &&
         a.gpus == b.gpus && a.peer == b.peer && a.launch == b.launch &&
         a.relocates == b.relocates && a.priority == b.priority;
}

class ReplayTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReplayTest, SameEventsGiveSameActions) {
  auto catalog = sim::Catalog::Load(GANDIVA_TEST_DATA_DIR);
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  sim::SyntheticOptions so;
  so.jobs = 300;
  so.total_gpus = 32;
  const sim::Workload w = sim::GenerateSynthetic(*catalog, so);
  std::vector<Step> steps;
  sim::SimOptions o;
  o.servers = 8;
  o.server.gpus = 4;
  o.record = [&](const core::Event& e, const std::vector<core::Action>& a) {
    steps.push_back({e, a});
  };
  auto policy = core::MakePolicy(GetParam());
  ASSERT_TRUE(policy.ok());
  auto r = sim::Simulate(w, *catalog, std::move(*policy), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->jobs_finished, 300);
  ASSERT_GT(steps.size(), 1000u);

  auto again = core::MakePolicy(GetParam());
  ASSERT_TRUE(again.ok());
  core::Scheduler replay(std::move(*again));
  size_t actions = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    // Through the daemon's event log format and back.
    const std::string json = runtime::EncodeEvent(steps[i].event.body);
    auto body = runtime::DecodeEvent(json);
    ASSERT_TRUE(body.ok()) << json << ": " << body.status().ToString();
    std::vector<core::Action> out;
    ASSERT_TRUE(replay.Handle({steps[i].event.time, *body}, out).ok());
    ASSERT_EQ(out.size(), steps[i].actions.size()) << "event " << i << json;
    for (size_t k = 0; k < out.size(); ++k) {
      ASSERT_TRUE(Same(out[k], steps[i].actions[k]))
          << "event " << i << " (" << json << "), action " << k;
    }
    actions += out.size();
  }
  EXPECT_GE(actions, 300u);  // every job starts at least once
}

INSTANTIATE_TEST_SUITE_P(Policies, ReplayTest,
                         ::testing::Values("fifo", "gandiva-timeslice",
                                           "gandiva", "tiresias-las"));

}  // namespace
}  // namespace gandiva
