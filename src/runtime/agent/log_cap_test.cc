// CapLog and NextData on real files (the test's temporary directory).
#include "runtime/agent/log_cap.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "runtime/agent/test_util.h"

namespace gandiva::runtime {
namespace {

using testing::TempDir;

void Append(const std::string& path, const std::string& data) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, data.data(), data.size()),
            static_cast<ssize_t>(data.size()));
  close(fd);
}

int64_t SizeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(LogCapTest, DropsTheOldestOutputKeepingOffsetsAndTheNewest) {
  TempDir dir;
  const std::string path = dir.path() + "/log";
  auto none = CapLog(path, 1 << 20);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0) << "no file yet";

  Append(path, std::string(100'000, 'a'));
  auto under = CapLog(path, 200'000);
  ASSERT_TRUE(under.ok());
  EXPECT_EQ(*under, 0);
  EXPECT_EQ(CapLog(path, 0).value(), 0) << "0: no bound";

  Append(path, std::string(150'000, 'b'));  // 250,000 bytes in all
  auto over = CapLog(path, 200'000);
  if (!over.ok()) GTEST_SKIP() << over.status().ToString();
  // The hole ends at the 4 KiB boundary at or below 250,000 - 100,000.
  EXPECT_EQ(*over, 147'456);
  EXPECT_EQ(SizeOf(path), 250'000) << "offsets kept";
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(NextData(fd, 0, 250'000), 147'456);
  EXPECT_EQ(NextData(fd, 200'000, 250'000), 200'000);
  EXPECT_EQ(NextData(fd, 250'000, 250'000), 250'000) << "at the end";
  char c = 0;
  ASSERT_EQ(pread(fd, &c, 1, 147'456), 1);
  EXPECT_EQ(c, 'b');
  close(fd);
  EXPECT_EQ(CapLog(path, 200'000).value(), 0) << "within the bound now";

  // More output: the bound counts from the first byte kept.
  Append(path, std::string(100'000, 'c'));
  auto again = CapLog(path, 200'000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 249'856 - 147'456);
  EXPECT_EQ(SizeOf(path), 350'000);
}

}  // namespace
}  // namespace gandiva::runtime
