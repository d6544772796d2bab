#include "runtime/scheduler/retention.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gandiva::runtime {
namespace {

constexpr int64_t kS = 1'000'000;  // a second, in us

TEST(RetentionTest, WithNoLimitNothingIsForgotten) {
  const Retention none;
  EXPECT_FALSE(none.Forgets());
  EXPECT_TRUE(none.ToForget({{0, 1}, {kS, 2}}, 100 * kS).empty());
}

TEST(RetentionTest, TheJobsBeyondThoseKeptThatEndedFirstAreForgotten) {
  const Retention r{2, 0};
  std::vector<Retention::Ended> ended = {
      {40 * kS, 4}, {10 * kS, 1}, {30 * kS, 3}, {20 * kS, 2}, {50 * kS, 5}};
  EXPECT_EQ(r.BeyondKept(5), 3u);
  EXPECT_EQ(r.BeyondKept(2), 0u);
  std::vector<int32_t> out = r.ToForget(ended, 60 * kS);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(r.ToForget({{10 * kS, 1}}, 60 * kS).empty());
}

TEST(RetentionTest, JobsPastTheirAgeAreForgottenHoweverFew) {
  const Retention r{10, 30};  // 10 kept, and 30 s at most
  const std::vector<Retention::Ended> ended = {
      {10 * kS, 1}, {45 * kS, 2}, {20 * kS, 3}};
  EXPECT_EQ(r.PastAge(ended, 60 * kS), 2u);  // ended before 30 s
  std::vector<int32_t> out = r.ToForget(ended, 60 * kS);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(r.PastAge(ended, 40 * kS), 0u);
}

TEST(RetentionTest, ACheckCompactsEarlyForATenthBeyondTheKeptOrAnyPastAge) {
  const Retention r{100, 0};
  std::vector<Retention::Ended> ended;
  for (int32_t i = 0; i < 109; ++i) ended.emplace_back(i * kS, i);
  EXPECT_FALSE(r.CompactsNow(ended, 200 * kS));  // 9 beyond: wait
  ended.emplace_back(200 * kS, 200);
  EXPECT_TRUE(r.CompactsNow(ended, 200 * kS));  // 10 beyond
  const Retention few{5, 0};
  const std::vector<Retention::Ended> six = {{0, 1}, {0, 2}, {0, 3},
                                             {0, 4}, {0, 5}, {0, 6}};
  EXPECT_TRUE(few.CompactsNow(six, 0));  // 1 beyond, a tenth of 5 is 0
  const Retention aged{0, 60};
  const std::vector<Retention::Ended> recent = {{50 * kS, 1}};
  const std::vector<Retention::Ended> old = {{30 * kS, 1}};
  EXPECT_FALSE(aged.CompactsNow(recent, 100 * kS));
  EXPECT_TRUE(aged.CompactsNow(old, 100 * kS));
}

}  // namespace
}  // namespace gandiva::runtime
