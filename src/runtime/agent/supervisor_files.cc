#include "runtime/agent/supervisor_files.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

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
    if (IsWarmStartFile(it->path().filename().string())) continue;
    *bytes += static_cast<int64_t>(it->file_size(ec));
    ++*files;
  }
}

std::optional<int64_t> JobIdOfDirName(const std::string& name) {
  char* end = nullptr;
  const long long id = std::strtoll(name.c_str(), &end, 10);
  if (name.empty() || end == nullptr || *end != '\0') return std::nullopt;
  return id;
}

}  // namespace gandiva::runtime
