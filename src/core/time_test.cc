#include "core/time.h"

#include <gtest/gtest.h>

namespace gandiva::core {
namespace {

TEST(TimeTest, ArithmeticIsInMicroseconds) {
  const Time t = Time::Zero() + Duration::Seconds(2) + Duration::Millis(5);
  EXPECT_EQ(t.micros(), 2'005'000);
  EXPECT_EQ((t - Time::Zero()).micros(), 2'005'000);
  EXPECT_EQ(Duration::FromSeconds(1.5).micros(), 1'500'000);
  EXPECT_DOUBLE_EQ(Duration::Millis(250).seconds(), 0.25);
  EXPECT_LT(Duration::Seconds(1), Duration::Infinite());
  EXPECT_TRUE(Duration::Infinite().is_infinite());
}

TEST(TimeTest, FormatsForPeople) {
  EXPECT_EQ(FormatDuration(Duration::Micros(12)), "12us");
  EXPECT_EQ(FormatDuration(Duration::Micros(12'500)), "12.5ms");
  EXPECT_EQ(FormatDuration(Duration::Millis(4250)), "4.250s");
  EXPECT_EQ(FormatDuration(Duration::Seconds(3723)), "1h02m03s");
  EXPECT_EQ(FormatDuration(Duration::Seconds(-2)), "-2.000s");
  EXPECT_EQ(FormatDuration(Duration::Infinite()), "inf");
}

}  // namespace
}  // namespace gandiva::core
