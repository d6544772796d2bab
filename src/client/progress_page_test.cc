// Layout and versioning of the progress page (client/progress_page.h).
#include "client/progress_page.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "client/page_io.h"
#include "client/progress_reader.h"
#include "gtest/gtest.h"

namespace gandiva::client {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gandiva_page_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

TEST(ProgressPageLayout, FieldOffsetsAreTheProtocol) {
  // The agent and jobs built at different times must agree on these.
  EXPECT_EQ(offsetof(gandiva_progress_page, magic), 0u);
  EXPECT_EQ(offsetof(gandiva_progress_page, version_major), 8u);
  EXPECT_EQ(offsetof(gandiva_progress_page, version_minor), 10u);
  EXPECT_EQ(offsetof(gandiva_progress_page, page_size), 12u);
  EXPECT_EQ(offsetof(gandiva_progress_page, created_ns), 16u);
  EXPECT_EQ(offsetof(gandiva_progress_page, request), 64u);
  EXPECT_EQ(offsetof(gandiva_progress_page, request_posted_ns), 72u);
  EXPECT_EQ(offsetof(gandiva_progress_page, pid), 128u);
  EXPECT_EQ(offsetof(gandiva_progress_page, state), 132u);
  EXPECT_EQ(offsetof(gandiva_progress_page, attached_ns), 136u);
  EXPECT_EQ(offsetof(gandiva_progress_page, state_changed_ns), 144u);
  EXPECT_EQ(offsetof(gandiva_progress_page, minibatches), 152u);
  EXPECT_EQ(offsetof(gandiva_progress_page, rate_since), 160u);
  EXPECT_EQ(offsetof(gandiva_progress_page, ack_seq), 168u);
  EXPECT_EQ(offsetof(gandiva_progress_page, done_seq), 172u);
  EXPECT_EQ(offsetof(gandiva_progress_page, last_kind), 176u);
  EXPECT_EQ(offsetof(gandiva_progress_page, last_result), 180u);
  EXPECT_EQ(offsetof(gandiva_progress_page, last_received_ns), 184u);
  EXPECT_EQ(offsetof(gandiva_progress_page, last_effective_ns), 192u);
  EXPECT_EQ(offsetof(gandiva_progress_page, served_count), 200u);
  EXPECT_EQ(offsetof(gandiva_progress_page, suspend_count), 208u);
  EXPECT_EQ(offsetof(gandiva_progress_page, resumed_ns), 216u);
  EXPECT_EQ(offsetof(gandiva_progress_page, exit_code), 224u);
  EXPECT_EQ(offsetof(gandiva_progress_page, target_world_size), 228u);
  EXPECT_EQ(offsetof(gandiva_progress_page, boundary_ns), 256u);
  EXPECT_EQ(offsetof(gandiva_progress_page, metric_seq), 384u);  // minor 2
  EXPECT_EQ(offsetof(gandiva_progress_page, metric_bits), 392u);
  EXPECT_EQ(offsetof(gandiva_progress_page, metric_minibatches), 400u);
  EXPECT_EQ(sizeof(gandiva_progress_page), 448u);
  EXPECT_TRUE(std::atomic<uint64_t>::is_always_lock_free);
  EXPECT_TRUE(std::atomic<uint32_t>::is_always_lock_free);
  EXPECT_TRUE(std::atomic<int32_t>::is_always_lock_free);
}

TEST(ProgressPageLayout, RequestWordRoundTrips) {
  uint64_t w = gandiva_request_pack(7, GANDIVA_REQUEST_RESIZE, 12);
  EXPECT_EQ(gandiva_request_seq(w), 7u);
  EXPECT_EQ(gandiva_request_kind_of(w), uint32_t{GANDIVA_REQUEST_RESIZE});
  EXPECT_EQ(gandiva_request_arg(w), 12u);
  w = gandiva_request_pack(0xFFFFFFFFu, GANDIVA_REQUEST_SUSPEND,
                           GANDIVA_REQUEST_ARG_MAX);
  EXPECT_EQ(gandiva_request_seq(w), 0xFFFFFFFFu);
  EXPECT_EQ(gandiva_request_kind_of(w), uint32_t{GANDIVA_REQUEST_SUSPEND});
  EXPECT_EQ(gandiva_request_arg(w), GANDIVA_REQUEST_ARG_MAX);
  // The magic is "GNDVPAGE" in memory order.
  uint64_t magic = GANDIVA_PAGE_MAGIC;
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&magic), 8), "GNDVPAGE");
}

TEST(ProgressPageVersioning, CreatedPageIsValidAndNew) {
  TempDir dir;
  std::string path = dir.file("page");
  ASSERT_TRUE(CreateProgressPage(path).ok());
  EXPECT_EQ(std::filesystem::file_size(path), uint64_t{GANDIVA_PAGE_FILE_SIZE});
  auto reader = ProgressReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ProgressSnapshot s = reader->Read();
  EXPECT_EQ(s.version_major, uint32_t{GANDIVA_PAGE_VERSION_MAJOR});
  EXPECT_EQ(s.version_minor, uint32_t{GANDIVA_PAGE_VERSION_MINOR});
  EXPECT_EQ(s.state, JobState::kNew);
  EXPECT_EQ(s.pid, 0);
  EXPECT_EQ(s.minibatches, 0u);
  EXPECT_FALSE(s.rate_per_second.has_value());
  EXPECT_FALSE(s.last_request_latency_ns().has_value());
}

TEST(ProgressPageVersioning, RecreatingResetsThePage) {
  TempDir dir;
  std::string path = dir.file("page");
  ASSERT_TRUE(CreateProgressPage(path).ok());
  {
    auto reader = ProgressReader::Open(path);
    ASSERT_TRUE(reader.ok());
    ASSERT_TRUE(reader->Request(RequestKind::kSuspend).ok());
  }
  ASSERT_TRUE(CreateProgressPage(path).ok());
  auto reader = ProgressReader::Open(path);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(reader->Read().request_seq, 0u);
}

// Rewrites a header field of a created page through a raw mapping.
template <typename F>
void Patch(const std::string& path, F f) {
  internal::PageMapping m;
  ASSERT_EQ(internal::OpenPage(path.c_str(), &m), GANDIVA_OK);
  f(m.page);
  internal::UnmapPage(&m);
}

TEST(ProgressPageVersioning, HigherMinorIsAccepted) {
  TempDir dir;
  std::string path = dir.file("page");
  ASSERT_TRUE(CreateProgressPage(path).ok());
  Patch(path, [](gandiva_progress_page* p) {
    p->version_minor = GANDIVA_PAGE_VERSION_MINOR + 3;
    p->page_size = sizeof(gandiva_progress_page) + 64;  // appended fields
  });
  auto reader = ProgressReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->Read().version_minor,
            uint32_t{GANDIVA_PAGE_VERSION_MINOR + 3});
}

TEST(ProgressPageVersioning, OtherMajorIsRejected) {
  TempDir dir;
  std::string path = dir.file("page");
  ASSERT_TRUE(CreateProgressPage(path).ok());
  Patch(path, [](gandiva_progress_page* p) {
    p->version_major = GANDIVA_PAGE_VERSION_MAJOR + 1;
  });
  auto reader = ProgressReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), core::StatusCode::kInvalidArgument);
}

TEST(ProgressPageVersioning, SmallerPageSizeIsRejected) {
  TempDir dir;
  std::string path = dir.file("page");
  ASSERT_TRUE(CreateProgressPage(path).ok());
  Patch(path, [](gandiva_progress_page* p) { p->page_size = 128; });
  EXPECT_FALSE(ProgressReader::Open(path).ok());
}

TEST(ProgressPageVersioning, WrongMagicIsRejected) {
  TempDir dir;
  std::string path = dir.file("zeros");
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, GANDIVA_PAGE_FILE_SIZE), 0);
  close(fd);
  auto reader = ProgressReader::Open(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), core::StatusCode::kInvalidArgument);
}

TEST(ProgressPageVersioning, ShortFileIsRejected) {
  TempDir dir;
  std::string path = dir.file("short");
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  EXPECT_FALSE(ProgressReader::Open(path).ok());
}

TEST(ProgressPageVersioning, MissingFileIsAnIoError) {
  TempDir dir;
  auto reader = ProgressReader::Open(dir.file("absent"));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), core::StatusCode::kIo);
  EXPECT_FALSE(CreateProgressPage(dir.file("no/such/dir/page")).ok());
}

}  // namespace
}  // namespace gandiva::client
