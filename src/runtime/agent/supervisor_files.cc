#include "runtime/agent/supervisor_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/progress_page.h"
#include "runtime/agent/supervisor.h"

namespace gandiva::runtime {

bool WriteWhole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      unlink(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

void DirStats(const std::string& dir, int64_t* bytes, int* files) {
  *bytes = 0;
  *files = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    if (IsNoteFile(it->path().filename().string())) continue;
    *bytes += static_cast<int64_t>(it->file_size(ec));
    ++*files;
  }
}

std::optional<int64_t> PeriodicCheckpointAt(const std::string& dir) {
  std::ifstream f(dir + "/" GANDIVA_SAVED_FILE);
  if (!f) return std::nullopt;
  int64_t minibatches = 0;
  std::string name;
  long long mtime_ns = -1;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "minibatches") {
      in >> minibatches;
    } else if (key == "path") {
      in >> name;
    } else if (key == "mtime_ns") {
      in >> mtime_ns;
    }
  }
  if (name.empty() || name.find('/') != std::string::npos || name == "." ||
      name == ".." || mtime_ns < 0 || minibatches < 0) {
    return std::nullopt;
  }
  struct stat st {};
  if (stat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return std::nullopt;
  }
  const long long at =
      static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000LL +
      st.st_mtim.tv_nsec;
  if (at != mtime_ns) return std::nullopt;
  return minibatches;
}

std::optional<int64_t> JobIdOfDirName(const std::string& name) {
  char* end = nullptr;
  const long long id = std::strtoll(name.c_str(), &end, 10);
  if (name.empty() || end == nullptr || *end != '\0') return std::nullopt;
  return id;
}

}  // namespace gandiva::runtime
