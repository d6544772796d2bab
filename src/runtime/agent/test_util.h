// Helpers shared by the agent's tests: temporary directories, file reading,
// bounded polling. Thread-compatible; tests only.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace gandiva::runtime::testing {

// A fresh directory under $TMPDIR (or /tmp), removed at destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") +
                       "/gandiva-agent-test-XXXXXX";
    char* made = mkdtemp(tmpl.data());
    path_ = made ? made : "/tmp";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls pred() until it holds or `limit` passes (a failure guard only, never
// a timing assertion). Returns pred()'s last value.
inline bool WaitUntil(
    const std::function<bool()>& pred,
    std::chrono::milliseconds limit = std::chrono::milliseconds(20000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A name unique to this process and call (page files are per name).
inline std::string UniqueName(const std::string& prefix) {
  static int n = 0;
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

}  // namespace gandiva::runtime::testing
