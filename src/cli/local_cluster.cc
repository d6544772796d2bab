#include "cli/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gandiva::cli {

namespace fs = std::filesystem;

const ClusterProcess* ClusterRecord::scheduler() const {
  for (const auto& p : processes) {
    if (p.role == "scheduler") return &p;
  }
  return nullptr;
}

std::string ClusterRecordPath(const std::string& state_dir) {
  return (fs::path(state_dir) / "cluster").string();
}

std::optional<ClusterRecord> ReadClusterRecord(const std::string& state_dir) {
  std::ifstream f(ClusterRecordPath(state_dir));
  if (!f) return std::nullopt;
  ClusterRecord record;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    ClusterProcess p;
    long pid = 0;
    if (in >> p.role >> pid >> p.name && pid > 0 &&
        (p.role == "scheduler" || p.role == "agent")) {
      p.pid = static_cast<pid_t>(pid);
      record.processes.push_back(p);
    }
  }
  return record;
}

namespace {

// Writes `text` to `path` through `path`.tmp, renamed when whole.
core::Status WriteWhole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.close();
    if (!f) return core::IoError("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return core::IoError("cannot write " + path + ": " + ec.message());
  return core::Status::Ok();
}

}  // namespace

core::Status WriteClusterRecord(const std::string& state_dir,
                                const ClusterRecord& record) {
  std::ostringstream f;
  f << "# gandiva local cluster, written by `gandiva up`; `gandiva down` "
       "stops these\n";
  for (const auto& p : record.processes) {
    f << p.role << ' ' << p.pid << ' ' << p.name << '\n';
  }
  return WriteWhole(ClusterRecordPath(state_dir), f.str());
}

std::string ClusterShapePath(const std::string& state_dir) {
  return (fs::path(state_dir) / "shape").string();
}

core::StatusOr<std::optional<ClusterShape>> ReadClusterShape(
    const std::string& state_dir) {
  const std::string path = ClusterShapePath(state_dir);
  std::ifstream f(path);
  if (!f) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return std::optional<ClusterShape>();
    return core::IoError("cannot read " + path);
  }
  ClusterShape shape;
  bool agents = false, gpus = false;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string key;
    long value = -1;
    std::string rest;
    in >> key >> value;
    const bool parsed = !in.fail() && !(in >> rest);
    const std::string where = path + " line " + std::to_string(n) + ": ";
    if (key == "agents" || key == "gpus-per-agent") {
      if (!parsed || value < 1 || value > 64) {
        return core::InvalidArgument(where + "'" + key +
                                     "' must be a number from 1 to 64");
      }
      (key == "agents" ? shape.agents : shape.gpus_per_agent) =
          static_cast<int>(value);
      (key == "agents" ? agents : gpus) = true;
    } else if (key == "real-gpus") {
      if (!parsed || (value != 0 && value != 1)) {
        return core::InvalidArgument(where + "'real-gpus' must be 0 or 1");
      }
      shape.real_gpus = value == 1;
    } else {
      return core::InvalidArgument(where + "unknown setting '" + key + "'");
    }
  }
  if (!agents || !gpus) {
    return core::InvalidArgument(
        path + ": '" + (agents ? "gpus-per-agent" : "agents") + "' missing");
  }
  return std::optional<ClusterShape>(shape);
}

core::Status WriteClusterShape(const std::string& state_dir,
                               const ClusterShape& shape) {
  std::ostringstream f;
  f << "# the local cluster's servers, written by `gandiva up`: a later "
       "`up` starts the same\n"
    << "agents " << shape.agents << "\ngpus-per-agent " << shape.gpus_per_agent
    << "\nreal-gpus " << (shape.real_gpus ? 1 : 0) << "\n";
  return WriteWhole(ClusterShapePath(state_dir), f.str());
}

bool ProcessRuns(pid_t pid, const std::string& binary) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  // A zombie still answers kill(0); its state in /proc/<pid>/stat is 'Z'.
  {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() &&
        text[paren + 2] == 'Z') {
      return false;
    }
  }
  std::error_code ec;
  const fs::path exe =
      fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  if (ec) return false;
  // A rebuilt binary reads "gandiva-agent (deleted)".
  return exe.filename().string().rfind(binary, 0) == 0;
}

std::string BinaryOf(const ClusterProcess& p) {
  return p.role == "scheduler" ? "gandiva-scheduler" : "gandiva-agent";
}

}  // namespace gandiva::cli
