#include "runtime/scheduler/queues_file.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace gandiva::runtime {
namespace {

TEST(QueuesFileTest, ReadsEachQueuesQuota) {
  auto q = ParseQueues(
      "queues:\n  - name: vision\n    quota: 8\n  - {name: speech, quota: 0}\n",
      "q.yaml");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q, (std::map<std::string, int>{{"speech", 0}, {"vision", 8}}));
  auto empty = ParseQueues("queues: []\n", "q.yaml");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
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
      {"queues: [{name: a, quota: 1, weight: 2}]",
       "queue 1 ('a'): unknown field 'weight' (known: name, quota)"},
      {"queues: {a: 1}", "field 'queues': must be a list"},
      {"teams: []", "expected a map with a list 'queues'"},
      {"queues: [1]", "queue 1: must be a map"},
      {"queues: [", "q.yaml: not YAML"},
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
}  // namespace gandiva::runtime
