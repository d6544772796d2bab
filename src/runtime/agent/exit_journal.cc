#include "runtime/agent/exit_journal.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/agent/supervisor_files.h"

namespace gandiva::runtime {
namespace {

// A failure whose periodic checkpoint the agent keeps for its next run.
bool KeepsPeriodic(const ExitRecord& e) {
  return e.checkpoint_kept && e.checkpoint_method == "periodic";
}

// Whether the next agent reports the exit (SaveUnreported's rule): not one
// superseded, killed at a daemon's request, or ended by the agent's stop
// (whose checkpoint, if any, the next registration lists instead).
bool ForTheNextAgent(const ExitRecord& e) {
  return !e.superseded && !e.killed &&
         (!e.checkpoint_kept || KeepsPeriodic(e)) && !e.agent_stopping;
}

// One exit as a line: job exit_code minibatches metric_value
// metric_minibatches metric_reports, then "periodic" when its periodic
// checkpoint is kept.
std::string Line(const ExitRecord& e) {
  std::ostringstream text;
  text.precision(17);
  text << e.job_id << ' ' << e.exit_code << ' ' << e.minibatches << ' '
       << e.metric.value << ' ' << e.metric.minibatches << ' '
       << e.metric.reports << (KeepsPeriodic(e) ? " periodic" : "") << '\n';
  return text.str();
}

// The exit a line holds; false when it does not read.
bool ReadLine(const std::string& line, ExitRecord* e) {
  std::istringstream in(line);
  if (!(in >> e->job_id >> e->exit_code >> e->minibatches >> e->metric.value >>
        e->metric.minibatches >> e->metric.reports) ||
      e->job_id <= 0) {
    return false;
  }
  if (std::string kept; in >> kept && kept == "periodic") {
    e->checkpoint_kept = true;
    e->checkpoint_method = kept;
  }
  return true;
}

}  // namespace

ExitJournal::ExitJournal(std::string unreported_path, std::string records_dir)
    : unreported_path_(std::move(unreported_path)),
      records_dir_(std::move(records_dir)) {}

std::string ExitJournal::WriteRecord(const ExitRecord& e) {
  if (records_dir_.empty() || !ForTheNextAgent(e)) return "";
  std::error_code ec;
  std::filesystem::create_directories(records_dir_, ec);
  // Named by when it was kept (the next agent takes them up in that order),
  // unique across agents on this work dir.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const std::string path =
      records_dir_ + "/" +
      std::to_string(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()) +
      "." + std::to_string(getpid()) + "." + std::to_string(e.seq);
  return WriteWhole(path, Line(e)) ? path : "";
}

void ExitJournal::RemoveRecord(ExitRecord& e) {
  if (e.file.empty()) return;
  unlink(e.file.c_str());
  e.file.clear();
}

ExitRecord ExitJournal::Add(ExitRecord exit) {
  std::lock_guard<std::mutex> lock(mu_);
  exit.seq = next_seq_++;
  exit.file = WriteRecord(exit);
  exits_.push_back(exit);
  return exit;
}

std::vector<ExitRecord> ExitJournal::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exits_;
}

void ExitJournal::Ack(uint64_t up_to_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(exits_, [&](ExitRecord& r) {
    if (r.seq > up_to_seq) return false;
    RemoveRecord(r);
    return true;
  });
}

void ExitJournal::Supersede(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (ExitRecord& e : exits_) {
    if (e.job_id == job_id) {
      e.superseded = true;
      RemoveRecord(e);
    }
  }
}

void ExitJournal::MarkCheckpointKept(int64_t job_id,
                                     const std::string& method) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto e = exits_.rbegin(); e != exits_.rend(); ++e) {
    if (e->job_id == job_id) {
      e->checkpoint_kept = true;
      e->checkpoint_method = method;
      if (!ForTheNextAgent(*e)) RemoveRecord(*e);
      break;
    }
  }
}

size_t ExitJournal::SaveUnreported() const {
  std::string text;
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const ExitRecord& e : exits_) {
      if (!ForTheNextAgent(e)) continue;
      text += Line(e);
      ++n;
    }
  }
  if (n > 0 && !WriteWhole(unreported_path_, text)) return 0;
  // The file carries them now: their records go (else the next agent would
  // report them twice).
  std::lock_guard<std::mutex> lock(mu_);
  for (const ExitRecord& e : exits_) {
    if (!e.file.empty()) unlink(e.file.c_str());
  }
  return n;
}

size_t ExitJournal::RecoverUnreported() {
  size_t n = 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (std::ifstream f(unreported_path_); f) {
    std::string line;
    while (std::getline(f, line)) {
      ExitRecord e;
      if (!ReadLine(line, &e)) continue;
      e.seq = next_seq_++;
      exits_.push_back(e);
      ++n;
    }
    f.close();
    unlink(unreported_path_.c_str());
  }
  if (records_dir_.empty()) return n;
  std::vector<std::pair<std::string, std::string>> found;  // (name, path)
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(records_dir_, ec)) {
    const std::string name = f.path().filename().string();
    if (name.ends_with(".tmp")) {
      std::filesystem::remove(f.path(), ec);
      continue;
    }
    found.emplace_back(name, f.path().string());
  }
  std::sort(found.begin(), found.end());
  for (const auto& [name, path] : found) {
    // One this journal wrote itself: an exit of a job that ended while no
    // agent ran (TakeBackLeftovers, before this).
    if (std::any_of(exits_.begin(), exits_.end(),
                    [&](const ExitRecord& e) { return e.file == path; })) {
      continue;
    }
    std::ifstream f(path);
    std::string line;
    ExitRecord e;
    if (!std::getline(f, line) || !ReadLine(line, &e)) {
      unlink(path.c_str());
      continue;
    }
    e.seq = next_seq_++;
    e.file = path;
    exits_.push_back(e);
    ++n;
  }
  return n;
}

}  // namespace gandiva::runtime
