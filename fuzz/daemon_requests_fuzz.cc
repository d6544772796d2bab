// Fuzzes the daemon's checks of what a client sends, without a server: the
// input is parsed (ParseFromArray) as each request below, and the pure
// functions the daemon's handlers (daemon_service.cc, daemon_requests.cc)
// call on it are run on it.
//   SubmitJobsRequest (and Submit, its one-spec case): config::CheckJobSpec
//     on every spec; for a spec it accepts, what the daemon then does with
//     it must hold: its own looser check of a job's spec passes (CheckSpec,
//     as for a job an agent lists after a restore), the JSON it stores
//     reads back to the same spec, the queue it is admitted to (access.h:
//     QueueOfSubmission, MayUsePriority, for an open daemon, users and an
//     admin) is a leaf or the shared queue, and its JobArrived event
//     encodes and decodes to the same text.
//   ListJobsRequest: a name pattern without wildcards (LiteralPattern, which
//     looks archived jobs up by name) matches the name it stands for.
//   RegisterAgentRequest, AgentReport, LeaveRequest (an agent's):
//     config::CheckAgent*; for a request they accept, what the daemon then
//     relies on must hold: every job id it names is a job id (it is
//     narrowed to 32 bits), every GPU a job lists is one of the server's,
//     and the server it describes is one the core takes
//     (core::ValidateServerSpec, with PlanServer's defaults).
//   ApplyQueuesRequest: config::ParseQueues on its text; for queues it
//     accepts, what the daemon then relies on must hold: they make a tree
//     (core::CheckQueues, which the core applies), they are stored as they
//     are (QueuesToJson reads back to the same), and a QueuesChanged of
//     them encodes and decodes to the same text.
// A violation (and any crash, exception or sanitizer report) stops the run.
#include <fnmatch.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/agent_check.h"
#include "config/job_spec_check.h"
#include "config/queues_file.h"
#include "core/cluster.h"
#include "proto/gandiva.pb.h"
#include "runtime/scheduler/access.h"
#include "runtime/scheduler/daemon_types.h"
#include "runtime/scheduler/event_codec.h"
#include "runtime/scheduler/limits.h"

namespace gandiva::runtime {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_daemon_requests: %s\n", what.c_str());
  std::abort();
}

// research (alice's; priorities up to 10) > vision, nlp (bob's, up to 5);
// prod (carol's); scratch (anyone's).
const std::vector<core::QueueConfig>& Queues() {
  static const std::vector<core::QueueConfig> queues = [] {
    std::vector<core::QueueConfig> q(5);
    q[0].name = "research";
    q[0].quota = 8;
    q[0].members = {"alice"};
    q[0].max_priority = 10;
    q[1].name = "vision";
    q[1].parent = "research";
    q[1].quota = 4;
    q[2].name = "nlp";
    q[2].parent = "research";
    q[2].quota = 4;
    q[2].members = {"bob"};
    q[2].max_priority = 5;
    q[3].name = "prod";
    q[3].quota = 8;
    q[3].members = {"carol"};
    q[4].name = "scratch";
    return q;
  }();
  return queues;
}

bool IsLeaf(const std::string& name) {
  const auto& qs = Queues();
  const bool exists = std::any_of(
      qs.begin(), qs.end(), [&](const auto& q) { return q.name == name; });
  const bool parent = std::any_of(
      qs.begin(), qs.end(), [&](const auto& q) { return q.parent == name; });
  return exists && !parent;
}

// What the daemon does with a spec config::CheckJobSpec accepted.
void Accepted(const rpc::JobSpec& spec) {
  if (std::string err = CheckSpec(spec); !err.empty()) {
    Fail("accepted, but refused as an agent's job: " + err);
  }
  const std::string stored = SpecToJson(spec);
  rpc::JobSpec read;
  if (!google::protobuf::util::JsonStringToMessage(stored, &read).ok()) {
    Fail("its stored JSON does not read back: " + stored);
  }
  // The JSON has the fields the daemon knows; those of a newer client it
  // drops.
  rpc::JobSpec known = spec;
  known.DiscardUnknownFields();
  if (!google::protobuf::util::MessageDifferencer::Equals(known, read)) {
    Fail("its stored JSON reads back otherwise: " + stored);
  }
  const Caller callers[] = {Caller{}, Caller{"alice", Role::kUser},
                            Caller{"bob", Role::kUser},
                            Caller{"root", Role::kAdmin}};
  for (const Caller& c : callers) {
    rpc::JobSpec owned = spec;
    if (!c.open()) owned.set_owner(c.user);
    auto queue = QueueOfSubmission(c, owned.owner(), owned.queue(), Queues());
    if (!queue.ok()) continue;
    if (!queue->empty() && !IsLeaf(*queue)) {
      Fail("admitted to queue '" + *queue + "', not a leaf");
    }
    if (!owned.queue().empty() && *queue != owned.queue()) {
      Fail("named queue '" + owned.queue() + "', admitted to '" + *queue + "'");
    }
    owned.set_queue(*queue);
    if (!MayUsePriority(c, "submit", owned.queue(), owned.priority(), Queues())
             .ok()) {
      continue;
    }
    const std::string logged =
        EncodeEvent(core::JobArrived(core::JobId(1), ToCoreSpec(owned)));
    auto replayed = DecodeEvent(logged);
    if (!replayed.ok()) {
      Fail("its JobArrived does not decode: " + replayed.status().ToString() +
           "\n  " + logged);
    }
    if (EncodeEvent(*replayed) != logged) {
      Fail("its JobArrived is not the same after a round trip: " + logged);
    }
  }
}

void Submit(const rpc::SubmitJobsRequest& req) {
  if (req.specs_size() == 0 || req.specs_size() > kMaxJobsPerSubmit) return;
  for (const rpc::JobSpec& spec : req.specs()) {
    if (config::CheckJobSpec(spec).empty()) Accepted(spec);
  }
}

void List(const rpc::ListJobsRequest& req) {
  const std::optional<std::string> literal = LiteralPattern(req.name());
  if (literal && ::fnmatch(req.name().c_str(), literal->c_str(), 0) != 0) {
    Fail("pattern '" + req.name() + "' does not match its literal '" +
         *literal + "'");
  }
}

bool IsJobId(int64_t id) { return id >= 1 && id == static_cast<int32_t>(id); }

void Register(const rpc::RegisterAgentRequest& r) {
  if (!config::CheckAgentRegistration(r).empty()) return;
  for (const rpc::AgentJob& j : r.jobs()) {
    if (!IsJobId(j.job_id()))
      Fail("accepted job id " + std::to_string(j.job_id()));
    for (int32_t g : j.gpus()) {
      if (g < 0 || g >= r.gpus_size()) {
        Fail("accepted GPU " + std::to_string(g) + " of " +
             std::to_string(r.gpus_size()));
      }
    }
  }
  for (int64_t id : r.checkpoints()) {
    if (!IsJobId(id)) Fail("accepted checkpoint id " + std::to_string(id));
  }
  core::ServerSpec spec;
  spec.name = r.name();
  spec.gpus = r.gpus_size();
  spec.sockets = std::max(1, r.sockets());
  spec.switches_per_socket = std::max(1, r.switches_per_socket());
  (void)core::ValidateServerSpec(spec);  // may refuse; must not crash
}

void Report(const rpc::AgentReport& r) {
  if (!config::CheckAgentReport(r).empty()) return;
  for (const rpc::JobExit& e : r.exits()) {
    if (!IsJobId(e.job_id()))
      Fail("accepted exit of " + std::to_string(e.job_id()));
  }
  for (const rpc::JobProfile& p : r.profiles()) {
    if (!IsJobId(p.job_id())) {
      Fail("accepted profile of " + std::to_string(p.job_id()));
    }
  }
}

void Apply(const rpc::ApplyQueuesRequest& r) {
  if (r.yaml().size() > kMaxQueuesFileBytes) return;
  auto parsed = config::ParseQueues(r.yaml(), "queues");
  if (!parsed.ok()) return;
  if (core::Status s = core::CheckQueues(*parsed); !s.ok()) {
    Fail("ParseQueues accepted queues CheckQueues refuses: " + s.message());
  }
  const std::string stored = QueuesToJson(*parsed).dump();
  auto back = QueuesFromJson(nlohmann::json::parse(stored));
  if (!back.ok()) Fail("stored queues do not read back: " + stored);
  if (QueuesToJson(*back).dump() != stored) {
    Fail("stored queues read back otherwise: " + stored);
  }
  const std::string text = EncodeEvent(core::QueuesChanged{*parsed, {}});
  auto event = DecodeEvent(text);
  if (!event.ok()) Fail("QueuesChanged does not decode: " + text);
  if (EncodeEvent(*event) != text) Fail("QueuesChanged decodes otherwise");
}

}  // namespace
}  // namespace gandiva::runtime

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Parsing rejects strings that are not UTF-8 with a log line each.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int n = static_cast<int>(size);
  if (gandiva::rpc::SubmitJobsRequest req; req.ParseFromArray(data, n)) {
    gandiva::runtime::Submit(req);
  }
  if (gandiva::rpc::ListJobsRequest req; req.ParseFromArray(data, n)) {
    gandiva::runtime::List(req);
  }
  if (gandiva::rpc::RegisterAgentRequest req; req.ParseFromArray(data, n)) {
    gandiva::runtime::Register(req);
  }
  if (gandiva::rpc::AgentReport req; req.ParseFromArray(data, n)) {
    gandiva::runtime::Report(req);
  }
  if (gandiva::rpc::LeaveRequest req; req.ParseFromArray(data, n)) {
    (void)gandiva::config::CheckAgentLeave(req);
  }
  if (gandiva::rpc::ApplyQueuesRequest req; req.ParseFromArray(data, n)) {
    gandiva::runtime::Apply(req);
  }
  return 0;
}
