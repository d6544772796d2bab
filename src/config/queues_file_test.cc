#include "config/queues_file.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace gandiva::config {
namespace {

TEST(QueuesFileTest, ReadsEachQueuesQuota) {
  auto q = ParseQueues(
      "queues:\n  - name: vision\n    quota: 8\n  - {name: speech, quota: 0}\n",
      "q.yaml");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q,
            (std::vector<core::QueueConfig>{{.name = "vision", .quota = 8},
                                            {.name = "speech", .quota = 0}}));
  auto empty = ParseQueues("queues: []\n", "q.yaml");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
}

TEST(QueuesFileTest, ReadsATreeWithWeightsLimitsMembersAndPriorityBounds) {
  auto q = ParseQueues(R"(queues:
  - name: research
    quota: 8
    weight: 2.5
    limit: 12
    members: [alice, bob@lab]
    queues:
      - name: vision
        quota: 6
        max_priority: 10
        queues:
          - {name: detection, quota: 4}
      - {name: speech, quota: 2, members: [bob@lab]}
  - {name: ops, quota: 0, weight: 1}
)",
                       "q.yaml");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  ASSERT_EQ(q->size(), 5u);
  const std::vector<core::QueueConfig> want = {
      {.name = "research",
       .quota = 8,
       .weight = 2.5,
       .limit = 12,
       .members = {"alice", "bob@lab"}},
      {.name = "vision", .parent = "research", .quota = 6, .max_priority = 10},
      {.name = "detection", .parent = "vision", .quota = 4},
      {.name = "speech",
       .parent = "research",
       .quota = 2,
       .members = {"bob@lab"}},
      {.name = "ops", .quota = 0, .weight = 1},
  };
  EXPECT_EQ(*q, want);
}

TEST(QueuesFileTest, ErrorsNameTheQueueAndTheField) {
  const std::map<std::string, std::string> bad = {
      {"queues: [{name: a, quota: -1}]",
       "q.yaml: queue 1 ('a'): field 'quota': must be a whole number of "
       "GPUs, 0 or more, got '-1'"},
      {"queues: [{name: a, quota: two}]", "got 'two'"},
      {"queues: [{name: a}]", "queue 1 ('a'): field 'quota': is missing"},
      {"queues: [{quota: 2}]", "queue 1: field 'name': is missing"},
      {"queues: [{name: a, quota: 1}, {name: a, quota: 2}]",
       "queue 2 ('a'): field 'name': 'a' is named twice"},
      {"queues: [{name: 'a b', quota: 1}]",
       "queue 1: field 'name': must be 1 to 64 of"},
      {"queues: [{name: a, quota: 1, wieght: 2}]",
       "queue 1 ('a'): unknown field 'wieght' (known: name, quota, weight, "
       "limit, members, max_priority, queues)"},
      {"queues: {a: 1}", "field 'queues': must be a list"},
      {"teams: []", "expected a map with a list 'queues'"},
      {"queues: [1]", "queue 1: must be a map"},
      {"queues: [", "q.yaml: not YAML"},
      {"queues: [{name: a, quota: 1, weight: -1}]",
       "queue 1 ('a'): field 'weight': must be a number from 0 to 1e6, got "
       "'-1'"},
      {"queues: [{name: a, quota: 1, weight: nan}]", "field 'weight'"},
      {"queues: [{name: a, quota: 4, limit: 2}]",
       "q.yaml: queue 'a': field 'limit': 2 is under its quota 4"},
      {"queues: [{name: a, quota: 1, members: alice}]",
       "queue 1 ('a'): field 'members': must be a list of user names"},
      {"queues: [{name: a, quota: 1, members: ['al ice']}]",
       "field 'members': must be user names of 1 to 64"},
      {"queues: [{name: a, quota: 1, max_priority: high}]",
       "field 'max_priority': must be a whole number, got 'high'"},
      {"queues: [{name: a, quota: 1, queues: {b: 1}}]",
       "queue 'a': field 'queues': must be a list"},
      {"queues: [{name: a, quota: 3, queues: [{name: b, quota: 2}, "
       "{name: c, quota: 2}]}]",
       "q.yaml: queue 'a': field 'quota': 3 is under its children's quotas, "
       "4 together"},
      {"queues: [{name: a, quota: 3, queues: [{name: b, quota: 1, "
       "queues: [{name: a, quota: 1}]}]}]",
       "queue 1.1.1 ('a'): field 'name': 'a' is named twice"},
      {"queues: [{name: a, quota: 3, queues: [{name: b}]}]",
       "queue 1.1 ('b'): field 'quota': is missing"},
  };
  for (const auto& [text, want] : bad) {
    SCOPED_TRACE(text);
    auto q = ParseQueues(text, "q.yaml");
    ASSERT_FALSE(q.ok());
    EXPECT_NE(q.status().message().find(want), std::string::npos)
        << q.status().message();
  }
  auto missing = LoadQueuesFile("/nonexistent/queues.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot be read"),
            std::string::npos);
}

}  // namespace
}  // namespace gandiva::config
