#include "cli/job_filter.h"

#include <cctype>
#include <span>
#include <sstream>

#include "cli/format.h"

namespace gandiva::cli {

namespace {

constexpr rpc::JobState kLive[] = {rpc::QUEUED, rpc::RUNNING, rpc::SUSPENDED,
                                   rpc::MIGRATING};
constexpr rpc::JobState kEnded[] = {rpc::FINISHED, rpc::FAILED, rpc::KILLED};

}  // namespace

void JobFilter::ToRequest(rpc::ListJobsRequest* req) const {
  for (rpc::JobState st : states) req->add_states(st);
  req->set_owner(owner);
  req->set_name(name);
}

core::StatusOr<std::set<rpc::JobState>> ParseStates(const std::string& list) {
  std::set<rpc::JobState> out;
  std::stringstream in(list);
  std::string word;
  while (std::getline(in, word, ',')) {
    for (char& c : word) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (word == "live") {
      out.insert(std::begin(kLive), std::end(kLive));
      continue;
    }
    if (word == "ended") {
      out.insert(std::begin(kEnded), std::end(kEnded));
      continue;
    }
    bool known = false;
    for (const auto& group : {std::span<const rpc::JobState>(kLive),
                              std::span<const rpc::JobState>(kEnded)}) {
      for (rpc::JobState s : group) {
        if (StateName(s) == word) {
          out.insert(s);
          known = true;
        }
      }
    }
    if (!known) {
      return core::InvalidArgument(
          "'" + word +
          "' is not a job state (queued, running, suspended, migrating, "
          "finished, failed, killed; live, ended)");
    }
  }
  if (out.empty()) return core::InvalidArgument("no state given");
  return out;
}

}  // namespace gandiva::cli
