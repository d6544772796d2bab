#include "runtime/agent/exit_journal.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "runtime/agent/supervisor_files.h"

namespace gandiva::runtime {

ExitJournal::ExitJournal(std::string unreported_path)
    : unreported_path_(std::move(unreported_path)) {}

ExitRecord ExitJournal::Add(ExitRecord exit) {
  std::lock_guard<std::mutex> lock(mu_);
  exit.seq = next_seq_++;
  exits_.push_back(exit);
  return exit;
}

std::vector<ExitRecord> ExitJournal::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exits_;
}

void ExitJournal::Ack(uint64_t up_to_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(exits_,
                [&](const ExitRecord& r) { return r.seq <= up_to_seq; });
}

void ExitJournal::Supersede(int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (ExitRecord& e : exits_) {
    if (e.job_id == job_id) e.superseded = true;
  }
}

void ExitJournal::MarkCheckpointKept(int64_t job_id,
                                     const std::string& method) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto e = exits_.rbegin(); e != exits_.rend(); ++e) {
    if (e->job_id == job_id) {
      e->checkpoint_kept = true;
      e->checkpoint_method = method;
      break;
    }
  }
}

size_t ExitJournal::SaveUnreported() const {
  std::ostringstream text;
  text.precision(17);
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const ExitRecord& e : exits_) {
      const bool periodic =
          e.checkpoint_kept && e.checkpoint_method == "periodic";
      if (e.superseded || e.killed || (e.checkpoint_kept && !periodic) ||
          e.agent_stopping) {
        continue;
      }
      text << e.job_id << ' ' << e.exit_code << ' ' << e.minibatches << ' '
           << e.metric.value << ' ' << e.metric.minibatches << ' '
           << e.metric.reports << (periodic ? " periodic" : "") << '\n';
      ++n;
    }
  }
  if (n > 0 && !WriteWhole(unreported_path_, text.str())) return 0;
  return n;
}

size_t ExitJournal::RecoverUnreported() {
  std::ifstream f(unreported_path_);
  if (!f) return 0;
  size_t n = 0;
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (std::getline(f, line)) {
      std::istringstream in(line);
      ExitRecord e;
      if (!(in >> e.job_id >> e.exit_code >> e.minibatches >> e.metric.value >>
            e.metric.minibatches >> e.metric.reports) ||
          e.job_id <= 0) {
        continue;
      }
      if (std::string kept; in >> kept && kept == "periodic") {
        e.checkpoint_kept = true;
        e.checkpoint_method = kept;
      }
      e.seq = next_seq_++;
      exits_.push_back(e);
      ++n;
    }
  }
  f.close();
  unlink(unreported_path_.c_str());
  return n;
}

}  // namespace gandiva::runtime
