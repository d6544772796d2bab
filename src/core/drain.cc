// DrainRequest: the core's decision, job by job, of what leaves a drained
// server and where it goes (the contract is in core/event.h).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/scheduler.h"

namespace gandiva::core {

namespace {

std::string JobRef(JobId id) { return "job " + std::to_string(id.value); }

}  // namespace

const char* DrainOutcomeKindName(DrainOutcome::Kind kind) {
  switch (kind) {
    case DrainOutcome::Kind::kMoving:
      return "moving";
    case DrainOutcome::Kind::kUnpacking:
      return "unpacking";
    case DrainOutcome::Kind::kStays:
      return "stays";
  }
  return "unknown";
}

Status Scheduler::CheckDrain(const DrainRequest& d) const {
  const int n = state_.cluster_.num_servers();
  if (!d.server.valid()) {
    return InvalidArgument("field 'server': no server id given (got " +
                           std::to_string(d.server.value) + ")");
  }
  if (d.server.value >= n) {
    return NotFound("field 'server': no server " +
                    std::to_string(d.server.value) + " (the cluster has " +
                    std::to_string(n) + ")");
  }
  return Status::Ok();
}

void Scheduler::Drain(const DrainRequest& d, Actions& actions) {
  if (d.cordon_only) return;
  const Cluster& cluster = state_.cluster_;
  std::vector<JobId> placed;
  for (GpuId g : cluster.GpusOf(d.server)) {
    for (JobId j : cluster.gpu(g).jobs) placed.push_back(j);
  }
  std::sort(placed.begin(), placed.end());
  placed.erase(std::unique(placed.begin(), placed.end()), placed.end());
  std::vector<JobId> unpacking;  // by this drain
  for (JobId id : placed) {
    last_drain_.push_back(state_.job(id).packed_with.valid()
                              ? DrainPacked(id, unpacking, actions)
                              : DrainMove(id, d.server, actions));
  }
}

// A packed job cannot move: it is unpacked (suspended; its partner runs on
// alone), unless its partner is the one this drain unpacks.
DrainOutcome Scheduler::DrainPacked(JobId id, std::vector<JobId>& unpacking,
                                    Actions& actions) {
  const JobId peer = state_.job(id).packed_with;
  const std::string with = "packed with " + JobRef(peer);
  DrainOutcome out;
  out.job = id;
  if (std::find(unpacking.begin(), unpacking.end(), peer) != unpacking.end()) {
    out.reason = with + ", which this drain unpacks: drain again to move it";
    return out;
  }
  MechanismRequest m;
  m.kind = MechanismRequest::Kind::kUnpack;
  m.job = id;
  std::vector<GpuId> gpus;
  if (Status s = PlanMechanism(m, &gpus); !s.ok()) {
    out.reason = with + ": " + s.message();
    return out;
  }
  CarryOut(m, actions);
  unpacking.push_back(id);
  out.kind = DrainOutcome::Kind::kUnpacking;
  out.reason = with + ": unpacking it; drain again to move them";
  return out;
}

// Any other job migrates to the first target that takes it; if none does,
// the first refusal says why it stays.
DrainOutcome Scheduler::DrainMove(JobId id, ServerId from, Actions& actions) {
  DrainOutcome out;
  out.job = id;
  const std::vector<ServerId> targets = DrainTargets(from);
  if (targets.empty()) {
    out.reason = "no other server is up and open";
    return out;
  }
  for (ServerId to : targets) {
    MechanismRequest m;
    m.kind = MechanismRequest::Kind::kMigrate;
    m.job = id;
    m.server = to;
    std::vector<GpuId> gpus;
    if (Status s = PlanMechanism(m, &gpus); !s.ok()) {
      if (out.reason.empty()) out.reason = s.message();
      continue;
    }
    CarryOut(m, actions);
    out.kind = DrainOutcome::Kind::kMoving;
    out.to = to;
    out.reason.clear();
    return out;
  }
  return out;
}

std::vector<ServerId> Scheduler::DrainTargets(ServerId from) const {
  const Cluster& cluster = state_.cluster_;
  std::vector<std::pair<int, ServerId>> targets;  // (-idle GPUs, server)
  for (const Server& s : cluster.servers()) {
    if (s.id == from || !s.up || s.cordoned) continue;
    int idle = 0;
    for (GpuId g : cluster.GpusOf(s.id)) idle += cluster.gpu(g).active == 0;
    targets.emplace_back(-idle, s.id);
  }
  std::sort(targets.begin(), targets.end());
  std::vector<ServerId> out;
  out.reserve(targets.size());
  for (const auto& t : targets) out.push_back(t.second);
  return out;
}

}  // namespace gandiva::core
