#include "runtime/agent/held_checkpoints.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/agent/supervisor_files.h"

namespace gandiva::runtime {

HeldCheckpointTable::HeldCheckpointTable(std::string root)
    : root_(std::move(root)) {}

std::string HeldCheckpointTable::JobRoot(int64_t job_id) const {
  return root_ + "/jobs/" + std::to_string(job_id);
}
std::string HeldCheckpointTable::CheckpointDir(int64_t job_id) const {
  return JobRoot(job_id) + "/checkpoint";
}
std::string HeldCheckpointTable::IncomingDir(int64_t job_id) const {
  return JobRoot(job_id) + "/incoming";
}
std::string HeldCheckpointTable::RecordPath(int64_t job_id) const {
  return JobRoot(job_id) + "/held-checkpoint";
}
std::string HeldCheckpointTable::SpecPath(int64_t job_id) const {
  return JobRoot(job_id) + "/held-spec";
}

std::optional<HeldCheckpointTable::Held> HeldCheckpointTable::Get(
    int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(job_id);
  if (it == held_.end()) return std::nullopt;
  return it->second;
}

bool HeldCheckpointTable::Contains(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.contains(job_id);
}

std::vector<int64_t> HeldCheckpointTable::Ids() const {
  std::vector<int64_t> ids;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, held] : held_) ids.push_back(id);
  return ids;
}

void HeldCheckpointTable::Hold(int64_t job_id, const std::string& dir,
                               int64_t submitted_us, const std::string& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  HoldLocked(job_id, dir, submitted_us, spec);
}

void HeldCheckpointTable::HoldAgain(int64_t job_id, const std::string& dir,
                                    int64_t submitted_us,
                                    const std::string& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string kept_spec;
  if (auto it = held_.find(job_id); it != held_.end()) {
    if (submitted_us == 0) submitted_us = it->second.submitted_us;
    kept_spec = it->second.spec;
  }
  HoldLocked(job_id, dir, submitted_us, kept_spec.empty() ? spec : kept_spec);
}

void HeldCheckpointTable::HoldLocked(int64_t job_id, const std::string& dir,
                                     int64_t submitted_us,
                                     const std::string& spec) {
  held_[job_id] = Held{dir, cluster_, submitted_us, spec};
  if (spec.empty()) {
    unlink(SpecPath(job_id).c_str());
  } else {
    (void)WriteWhole(SpecPath(job_id), spec);
  }
  // On disk too, for the next agent on this checkpoint root.
  (void)WriteWhole(RecordPath(job_id), dir + "\n" + cluster_ + "\n" +
                                           std::to_string(submitted_us) + "\n");
}

void HeldCheckpointTable::MoveIncomingAside(int64_t job_id) {
  const std::string checkpoint_dir = CheckpointDir(job_id);
  const std::string incoming_dir = IncomingDir(job_id);
  std::lock_guard<std::mutex> lock(mu_);
  auto held = held_.find(job_id);
  if (held == held_.end() || held->second.dir != incoming_dir) return;
  std::error_code ec;
  std::filesystem::remove_all(checkpoint_dir, ec);
  std::filesystem::create_directories(
      std::filesystem::path(checkpoint_dir).parent_path(), ec);
  std::filesystem::rename(incoming_dir, checkpoint_dir, ec);
  held->second.dir = checkpoint_dir;
}

bool HeldCheckpointTable::Forget(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool had = held_.erase(job_id) > 0;
  RemoveRecords(job_id);
  return had;
}

void HeldCheckpointTable::RemoveFiles(int64_t job_id) const {
  std::error_code ec;
  std::filesystem::remove_all(CheckpointDir(job_id), ec);
  std::filesystem::remove_all(IncomingDir(job_id), ec);
  std::filesystem::remove(
      std::filesystem::path(CheckpointDir(job_id)).parent_path(), ec);
}

std::vector<int64_t> HeldCheckpointTable::JobsOnDisk() const {
  std::vector<int64_t> ids;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(root_ + "/jobs", ec)) {
    const std::optional<int64_t> parsed =
        JobIdOfDirName(entry.path().filename().string());
    if (parsed && *parsed > 0) ids.push_back(*parsed);
  }
  return ids;
}

std::optional<HeldCheckpointTable::Held> HeldCheckpointTable::ReadRecord(
    int64_t job_id) const {
  std::ifstream f(RecordPath(job_id));
  Held held;
  std::string submitted;
  if (!f || !std::getline(f, held.dir)) return std::nullopt;
  (void)std::getline(f, held.cluster);  // none in a record from before it
  (void)std::getline(f, submitted);     // nor this
  if (!submitted.empty()) {
    char* end = nullptr;
    held.submitted_us = std::strtoll(submitted.c_str(), &end, 10);
    if (end == nullptr || *end != '\0') held.submitted_us = 0;  // unknown
  }
  if (std::ifstream sf(SpecPath(job_id), std::ios::binary); sf) {
    std::ostringstream read;
    read << sf.rdbuf();
    held.spec = read.str();
  }
  return held;
}

void HeldCheckpointTable::RemoveRecords(int64_t job_id) const {
  unlink(RecordPath(job_id).c_str());
  unlink(SpecPath(job_id).c_str());
}

void HeldCheckpointTable::Adopt(int64_t job_id, Held held) {
  std::lock_guard<std::mutex> lock(mu_);
  held_.emplace(job_id, std::move(held));
}

std::vector<int64_t> HeldCheckpointTable::SetCluster(
    const std::string& cluster) {
  std::vector<int64_t> foreign;
  std::lock_guard<std::mutex> lock(mu_);
  cluster_ = cluster;
  for (const auto& [id, held] : held_) {
    if (!held.cluster.empty() && held.cluster != cluster) {
      foreign.push_back(id);
    }
  }
  return foreign;
}

std::string HeldCheckpointTable::cluster() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cluster_;
}

}  // namespace gandiva::runtime
