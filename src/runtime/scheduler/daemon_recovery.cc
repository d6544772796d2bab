// Startup and recovery: opening and locking the store, the cluster id and
// the ids restores lost, the policy, replaying the log, and awaiting the
// agents.

#include <algorithm>

#include "runtime/auth/credentials.h"
#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {

core::Status SchedulerServer::Impl::Open() {
  if (opts.leadership) {
    // etcd: the election decided who writes (leadership.h).
    if (!opts.leadership->leading()) {
      return core::FailedPrecondition(
          "this daemon does not lead (Leadership::Campaign first)");
    }
    auto s = EtcdStore::Open(opts.leadership);
    if (!s.ok()) return s.status();
    store = std::move(*s);
  } else {
    GANDIVA_RETURN_IF_ERROR(LockDatabase());
    auto s = Store::Open(opts.db_path, opts.durable_sync);
    if (!s.ok()) return s.status();
    store = std::move(*s);
  }
  if (opts.store_wrapper) store = opts.store_wrapper(std::move(store));
  GANDIVA_RETURN_IF_ERROR(ResolvePolicy());
  GANDIVA_RETURN_IF_ERROR(ResolveClusterId());
  GANDIVA_RETURN_IF_ERROR(
      OpenUsers(users, *store, opts.credentials_dir, opts.admin_user, Now()));
  Log(users.empty() ? "open: no users, every caller acts as an admin "
                      "(--credentials-dir gives the daemon users)"
                    : std::to_string(users.List().size()) +
                          " users: every call must prove whose it is");
  GANDIVA_RETURN_IF_ERROR(ResolveRestoreLost());
  GANDIVA_RETURN_IF_ERROR(Recover());
  if (start_queues) {
    std::vector<core::QueueConfig> given = std::move(*start_queues);
    start_queues.reset();
    auto changed =
        ChangeQueues(std::move(given), /*dry_run=*/false,
                     "by --queues, which differs from the stored queues");
    if (!changed.ok()) {
      return core::Status(changed.status().code(),
                          "--queues: " + changed.status().message());
    }
  }
  return core::Status::Ok();
}

core::Status SchedulerServer::Impl::ResolveClusterId() {
  // The stored value of meta `key`, else one made by `make` and stored.
  auto stored_or_made = [this](const char* key, auto make,
                               std::string* out) -> core::Status {
    auto stored = store->GetMeta(key);
    if (!stored.ok()) return stored.status();
    if (stored->has_value() && !(*stored)->empty()) {
      *out = **stored;
      return core::Status::Ok();
    }
    *out = make();
    return store->SetMeta(key, *out);
  };
  GANDIVA_RETURN_IF_ERROR(
      stored_or_made("agent_control_token", NewToken, &control_token));
  return stored_or_made(
      "cluster_id",
      [] {
        std::random_device rd;
        char buf[33];
        std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(),
                      rd());
        return std::string(buf);
      },
      &cluster_id);
}

core::Status SchedulerServer::Impl::ResolveRestoreLost() {
  auto lost = store->GetMeta(kRestoreLostJobsMeta);
  if (!lost.ok()) return lost.status();
  if (!lost->has_value()) return core::Status::Ok();
  auto ranges = ParseIdRanges(**lost);
  if (!ranges.ok()) {
    return core::InvalidArgument(StoreName() + ": meta '" +
                                 kRestoreLostJobsMeta +
                                 "': " + ranges.status().message());
  }
  lost_ids = std::make_shared<const IdRanges>(std::move(*ranges));
  if (lost_ids->empty()) return core::Status::Ok();  // all adopted
  Log("this store was restored from a backup: jobs " +
      FormatIdRanges(*lost_ids) +
      " were submitted after it and are lost; their ids are not given "
      "again");
  return core::Status::Ok();
}

void SchedulerServer::Impl::MarkLostIds(const AgentConn& a,
                                        const rpc::RegisterAgentRequest& r) {
  const int64_t top = Model().HighestUnknownId(r);
  if (top == 0) return;
  auto added = store->MarkJobIdsLost(top);
  if (!added.ok()) {
    Log("agent '" + a.name + "' holds job " + std::to_string(top) +
        ", which this store may never have given, and the store cannot "
        "record its id as lost: " +
        added.status().ToString());
    return;
  }
  if (added->second == 0) return;  // given, and forgotten since
  auto ranges = std::make_shared<IdRanges>(*lost_ids);
  AddIdRange(ranges.get(), added->first, added->second);
  lost_ids = std::move(ranges);
  Log("agent '" + a.name + "' holds job " + std::to_string(top) +
      ", which this store never gave: it was restored from an older "
      "backup, and jobs " +
      std::to_string(added->first) + "-" + std::to_string(added->second) +
      " are lost; their ids are not given again");
}

void SchedulerServer::Impl::AdoptQueuedJobsFound(
    const AgentConn& a, const rpc::RegisterAgentRequest& r) {
  for (const rpc::AgentJob& j : r.jobs()) {
    std::optional<AgentModel::FoundQueued> found =
        Model().PlanQueuedJobFound(a.id, a.name, r, j);
    if (!found) continue;
    const int32_t id = found->event.job.value;
    Extra(id)->proc = std::move(found->proc);
    if (core::Status fed = Feed(std::move(found->event)); !fed.ok()) {
      Log("job " + std::to_string(id) + ": its process on " + a.name +
          " could not be kept: " + fed.ToString());
      Extra(id)->proc = Proc{};
      continue;
    }
    Extra(id)->progress = j.progress();
    History(id, found->line.what, found->line.ok, 0, found->line.detail);
  }
}

std::set<int32_t> SchedulerServer::Impl::AdoptLostJobs(
    const AgentConn& a, const rpc::RegisterAgentRequest& r) {
  std::set<int32_t> killed;
  if (lost_ids->empty()) return killed;
  // One by one: each adoption places its job before the next is judged.
  for (const rpc::AgentJob& j : r.jobs()) {
    Adopt(a, Model().PlanLostProcess(a.id, a.name, r, j, *lost_ids, Now()),
          &killed);
  }
  for (int i = 0; i < r.checkpoints_size(); ++i) {
    Adopt(a, Model().PlanLostCheckpoint(a.id, a.name, r, i, *lost_ids, Now()),
          &killed);
  }
  return killed;
}

void SchedulerServer::Impl::Adopt(const AgentConn& a,
                                  AgentModel::LostJobPlan plan,
                                  std::set<int32_t>* killed) {
  if (const std::string* refused = std::get_if<std::string>(&plan)) {
    Log(*refused);
    return;
  }
  AgentModel::Adoption* adopt = std::get_if<AgentModel::Adoption>(&plan);
  if (adopt == nullptr) return;
  const int32_t id = adopt->arrival.id.value;
  const std::string spec_json = SpecToJson(adopt->spec);
  if (core::Status s =
          store->AdoptJob(id, spec_json, adopt->arrival.submitted.micros());
      !s.ok()) {
    Log("agent '" + a.name + "' holds job " + std::to_string(id) +
        ", which this store lost, but the store cannot take it: " +
        s.ToString() + "; not adopted");
    return;
  }
  auto ranges = std::make_shared<IdRanges>(*lost_ids);
  RemoveIdFromRanges(ranges.get(), id);
  lost_ids = std::move(ranges);
  AddExtra(id, adopt->spec, spec_json);
  JobExtra& x = extras[id];
  x.proc = std::move(adopt->proc);
  if (adopt->stop_listed) {
    // Before any start of it goes out.
    ++x.ignore_exits[a.id.value];
    KillAt(id, Proc{a.id, {}, true}, InternalActionId());
    killed->insert(id);
  }
  if (core::Status fed = Feed(std::move(adopt->arrival)); !fed.ok()) {
    // Stored: a restart hands it to the core (ArriveUnarrived).
    Log("job " + std::to_string(id) +
        ": its arrival failed: " + fed.ToString());
    return;
  }
  if (adopt->progress) Extra(id)->progress = std::move(*adopt->progress);
  History(id, adopt->line.what, adopt->line.ok, 0, adopt->line.detail);
  Log(adopt->log);
}

core::Status SchedulerServer::Impl::ResolvePolicy() {
  auto stored = store->GetMeta("policy");
  if (!stored.ok()) return stored.status();
  json want = {{"policy", "gandiva"},
               {"quantum_us", int64_t{60'000'000}},
               {"max_height", 4}};
  if (stored->has_value()) {
    try {
      want = json::parse(**stored);
    } catch (const json::exception& e) {
      return core::IoError(std::string("stored policy options: ") + e.what());
    }
  }
  const json stored_options = want;
  std::string diff;
  auto check = [&](const char* flag, const char* key, const json& given) {
    if (stored->has_value() && want.at(key) != given) {
      diff += std::string(diff.empty() ? "" : "; ") + flag + " " +
              given.dump() + " (the database has " + want.at(key).dump() + ")";
    }
    want[key] = given;
  };
  if (opts.policy) check("--policy", "policy", *opts.policy);
  if (opts.quantum_s) {
    if (*opts.quantum_s <= 0) {
      return core::InvalidArgument("--quantum-s: must be positive");
    }
    check("--quantum-s", "quantum_us",
          core::Duration::FromSeconds(*opts.quantum_s).micros());
  }
  if (opts.share_half_life_s) {
    if (!(*opts.share_half_life_s > 0) || *opts.share_half_life_s > 1e9) {
      return core::InvalidArgument(
          "--share-half-life-s: must be a positive number of seconds, at "
          "most 1e9");
    }
    if (stored->has_value() && !want.contains("share_half_life_us")) {
      want["share_half_life_us"] = core::Duration::Seconds(3600).micros();
    }
    check("--share-half-life-s", "share_half_life_us",
          core::Duration::FromSeconds(*opts.share_half_life_s).micros());
  }
  if (opts.max_height) {
    if (*opts.max_height < 0) {
      return core::InvalidArgument("--max-height: must not be negative");
    }
    check("--max-height", "max_height", *opts.max_height);
  }
  if (opts.pack_keep_above) {
    if (*opts.pack_keep_above <= 0) {
      return core::InvalidArgument("--pack-keep-above: must be positive");
    }
    if (stored->has_value() && !want.contains("pack_keep_above")) {
      want["pack_keep_above"] = 1.0;
    }
    check("--pack-keep-above", "pack_keep_above", *opts.pack_keep_above);
  }
  if (opts.pack_settle_s) {
    if (*opts.pack_settle_s <= 0) {
      return core::InvalidArgument("--pack-settle-s: must be positive");
    }
    if (stored->has_value() && !want.contains("pack_settle_us")) {
      want["pack_settle_us"] = core::Duration::Seconds(30).micros();
    }
    check("--pack-settle-s", "pack_settle_us",
          core::Duration::FromSeconds(*opts.pack_settle_s).micros());
  }
  // Options added after a database was made: the defaults, unless given.
  const json defaults = {
      {"start_attempts", core::SchedulerOptions().start_attempts},
      {"start_retry_us", core::SchedulerOptions().start_retry_delay.micros()}};
  for (const auto& [key, value] : defaults.items()) {
    if (!want.contains(key)) want[key] = value;
  }
  if (!want.contains("queues")) want["queues"] = json::object();
  {
    auto stored_queues = QueuesFromJson(want.at("queues"));
    if (!stored_queues.ok()) {
      return core::IoError("stored " + stored_queues.status().message());
    }
    want["queues"] = QueuesToJson(*stored_queues);
  }
  if (opts.queues) {
    if (core::Status s = core::CheckQueues(*opts.queues); !s.ok()) {
      return core::InvalidArgument("--queues: " + s.message());
    }
    if (stored->has_value()) {
      // Applied as a change once the state is recovered (the log may
      // hold changes since the stored options were written).
      start_queues = *opts.queues;
    } else {
      want["queues"] = QueuesToJson(*opts.queues);
    }
  }
  if (opts.default_retries < 0 || opts.default_retries > core::kMaxRetries) {
    return core::InvalidArgument("--default-retries: must be 0 to " +
                                 std::to_string(core::kMaxRetries) + ", got " +
                                 std::to_string(opts.default_retries));
  }
  if (opts.start_attempts) {
    if (*opts.start_attempts < 0) {
      return core::InvalidArgument("--start-attempts: must not be negative");
    }
    check("--start-attempts", "start_attempts", *opts.start_attempts);
  }
  if (opts.start_retry_s) {
    if (!(*opts.start_retry_s > 0)) {
      return core::InvalidArgument("--start-retry-s: must be positive");
    }
    check("--start-retry-s", "start_retry_us",
          core::Duration::FromSeconds(*opts.start_retry_s).micros());
  }
  if (!diff.empty()) {
    return core::FailedPrecondition(
        StoreName() + " was created with other policy options: " + diff +
        ". Omit these flags to use the stored ones, or use a new " +
        (opts.leadership ? "--etcd-prefix" : "--db"));
  }
  core::PolicyOptions po;
  po.gandiva.quantum =
      core::Duration::Micros(want.at("quantum_us").get<int64_t>());
  po.gandiva.max_height = want.at("max_height").get<int>();
  if (want.contains("pack_keep_above")) {
    po.gandiva.pack_keep_above = want.at("pack_keep_above").get<double>();
  }
  if (want.contains("pack_settle_us")) {
    po.gandiva.pack_settle =
        core::Duration::Micros(want.at("pack_settle_us").get<int64_t>());
  }
  if (want.contains("share_half_life_us")) {
    po.share_half_life =
        core::Duration::Micros(want.at("share_half_life_us").get<int64_t>());
  }
  // Rates come every --profile-interval-s (2 s): judge them past a job's
  // warm-up.
  po.gandiva.pack_min_alone_reports = 5;
  // A job that fits on one server waits for one rather than have its ranks
  // talk over the network (a larger one takes whole servers).
  po.gandiva.allow_split = false;
  po.fifo.relax_locality = false;
  auto queues_now = QueuesFromJson(want.at("queues"));
  if (!queues_now.ok()) {
    return core::IoError("stored " + queues_now.status().message());
  }
  po.queues = *queues_now;
  SetQueues(std::move(*queues_now));
  policy_name = want.at("policy").get<std::string>();
  for (const core::PolicyInfo& known : core::KnownPolicies()) {
    if (known.name == policy_name && known.simulator_only) {
      return core::InvalidArgument(
          "policy '" + policy_name +
          "' is a baseline for the simulator only: its reclaim kills jobs, "
          "which the daemon does not do");
    }
  }
  policy_options = po;
  scheduler_options.keep_usage = kKeepUsage;
  scheduler_options.start_attempts = want.at("start_attempts").get<int>();
  scheduler_options.start_retry_delay =
      core::Duration::Micros(want.at("start_retry_us").get<int64_t>());
  GANDIVA_RETURN_IF_ERROR(BuildScheduler(po.queues));
  if (!stored->has_value() || stored_options != want) {
    GANDIVA_RETURN_IF_ERROR(store->SetMeta("policy", want.dump()));
  }
  return core::Status::Ok();
}

core::Status SchedulerServer::Impl::BuildScheduler(
    const std::vector<core::QueueConfig>& queues) {
  core::PolicyOptions po = policy_options;
  po.queues = queues;
  auto policy = core::MakePolicy(policy_name, po);
  if (!policy.ok()) return policy.status();
  sched =
      std::make_unique<core::Scheduler>(std::move(*policy), scheduler_options);
  return core::Status::Ok();
}

core::StatusOr<std::optional<std::vector<core::QueueConfig>>>
SchedulerServer::Impl::QueuesAtLogStart(int64_t after) {
  auto row = store->FirstEventOfKind("QueuesChanged", after);
  if (!row.ok()) return row.status();
  if (!row->has_value()) return std::optional<std::vector<core::QueueConfig>>();
  const EventRow& e = **row;
  auto body = DecodeEvent(e.json);
  if (!body.ok()) {
    return core::IoError("event log entry " + std::to_string(e.seq) + ": " +
                         body.status().message());
  }
  const auto* changed = std::get_if<core::QueuesChanged>(&*body);
  if (changed == nullptr) {
    return core::IoError("event log entry " + std::to_string(e.seq) +
                         ": not a QueuesChanged");
  }
  return std::optional<std::vector<core::QueueConfig>>(changed->previous);
}

core::Status SchedulerServer::Impl::StoreQueues(
    const std::vector<core::QueueConfig>& queues) {
  auto stored = store->GetMeta("policy");
  if (!stored.ok()) return stored.status();
  json options = json::object();
  if (stored->has_value()) {
    try {
      options = json::parse(**stored);
    } catch (const json::exception& e) {
      return core::IoError(std::string("stored policy options: ") + e.what());
    }
  }
  options["queues"] = QueuesToJson(queues);
  return store->SetMeta("policy", options.dump());
}

core::Status SchedulerServer::Impl::Recover() {
  auto jobs = store->LoadJobs();
  if (!jobs.ok()) return jobs.status();
  for (const JobRow& row : *jobs) {
    rpc::JobSpec spec;
    if (!google::protobuf::util::JsonStringToMessage(row.spec_json, &spec)
             .ok()) {
      return core::IoError("job " + std::to_string(row.id) +
                           ": stored spec is not valid JSON");
    }
    AddExtra(static_cast<int32_t>(row.id), spec, row.spec_json);
    JobExtra& x = extras[static_cast<int32_t>(row.id)];
    x.exit_code = row.exit_code;
    x.progress.set_minibatches(row.minibatches);
    x.progress.set_minibatch_rate(row.minibatch_rate);
    x.progress.set_metric(row.metric);
    x.progress.set_metric_minibatches(row.metric_minibatches);
    x.progress.set_metric_reports(row.metric_reports);
    x.progress.set_uses_library(row.uses_library);
    x.written = row;
    x.has_written = true;
    clock_us = std::max(clock_us, row.submitted_us);
  }
  auto servers = store->LoadServers();
  if (!servers.ok()) return servers.status();
  const int64_t now = Env().WallMicros();
  for (const ServerRow& row : *servers) {
    if (row.id != static_cast<int32_t>(agents.size())) {
      return core::IoError("servers table: ids are not dense");
    }
    AgentConn a;
    a.id = ServerId(row.id);
    a.name = row.name;
    a.address = row.address;
    a.sockets = row.sockets;
    a.switches_per_socket = row.switches_per_socket;
    try {
      for (const json& g : json::parse(row.gpus_json)) {
        rpc::Gpu gpu;
        (void)google::protobuf::util::JsonStringToMessage(g.dump(), &gpu);
        a.gpus.push_back(gpu);
      }
    } catch (const json::exception& e) {
      return core::IoError("server '" + row.name + "': " + e.what());
    }
    a.stub = Env().AgentStub(a.address, tls,
                             AgentControlToken(control_token, a.name));
    Await(a, now, row.away_since_us);
    a.away_cordon = row.away_cordon;
    agent_by_name[a.name] = row.id;
    agents.push_back(std::move(a));
  }
  // The snapshot, if the log was compacted: the state after event
  // `compacted_seq`, whose events are gone.
  auto snapshot = store->LoadSnapshot();
  if (!snapshot.ok()) return snapshot.status();
  // The stored queues are the latest; a change of them still in the log
  // was made under the queues before it, which the replay starts from.
  auto log_start =
      QueuesAtLogStart(snapshot->has_value() ? (*snapshot)->seq : 0);
  if (!log_start.ok()) return log_start.status();
  if (log_start->has_value()) {
    GANDIVA_RETURN_IF_ERROR(BuildScheduler(**log_start));
    SetQueues(**log_start);
  }
  if (snapshot->has_value()) {
    const SnapshotRow& row = **snapshot;
    core::Status s = sched->Restore(row.core);
    if (s.ok()) s = RestoreDaemonState(row.daemon);
    if (!s.ok()) {
      return core::IoError(
          StoreName() + ": its snapshot (of events 1-" +
          std::to_string(row.seq) +
          ", which are no longer logged) cannot be restored: " + s.message() +
          ". A gandiva-scheduler that reads it is needed");
    }
    core::Status missing;
    st().ForEachJob([&](const core::Job& j) {
      if (missing.ok() && Extra(j.id.value) == nullptr) {
        missing = core::IoError(StoreName() + ": its snapshot holds job " +
                                std::to_string(j.id.value) +
                                ", which is not in the jobs table");
      }
    });
    GANDIVA_RETURN_IF_ERROR(missing);
    compacted_seq = row.seq;
    compacted_events_left = true;  // a crash may have left some
    clock_us = std::max(clock_us, row.time_us);
  }
  // Replay: the same events give the same state; the actions were carried
  // out (or were under way) before the restart.
  int64_t replayed = 0;
  GANDIVA_RETURN_IF_ERROR(store->ForEachEvent(
      [&](const EventRow& e) {
        auto body = DecodeEvent(e.json);
        if (!body.ok()) {
          return core::IoError("event log entry " + std::to_string(e.seq) +
                               ": " + body.status().message());
        }
        if (const auto* arrived = std::get_if<core::JobArrived>(&*body)) {
          if (Extra(arrived->id.value) == nullptr) {
            return core::IoError("event log entry " + std::to_string(e.seq) +
                                 ": job " + std::to_string(arrived->id.value) +
                                 " is not in the jobs table");
          }
        }
        clock_us = std::max(clock_us, e.time_us);
        std::vector<core::Action> actions;
        (void)sched->Handle(
            core::Event{core::Time::FromMicros(e.time_us), *body}, actions);
        AfterHandle(*body, actions, /*live=*/false);
        ++replayed;
        return core::Status::Ok();
      },
      compacted_seq));
  events_since_compaction = replayed;
  // The stored queues lag the log's last change after a crash between the
  // two.
  if (log_start->has_value()) GANDIVA_RETURN_IF_ERROR(StoreQueues(*Queues()));
  // Jobs the core forgot whose rows are not archived yet (the daemon
  // stopped between writing the snapshot and archiving them).
  std::vector<int32_t> forgotten;
  for (const auto& [id, x] : extras) {
    if (st().forgotten(JobId(id))) forgotten.push_back(id);
  }
  if (!forgotten.empty()) {
    std::erase_if(unsettling, [&](const auto& e) {
      return st().forgotten(JobId(e.first));
    });
    DropForgotten(forgotten, /*archive=*/true);
  }
  std::vector<int32_t> ids;
  ids.reserve(extras.size());
  for (const auto& [id, x] : extras) ids.push_back(id);
  NoteSubmitted(ids);  // those the snapshot held
  // Every job is dirty (new records): from here on the core says which
  // it changes.
  sched->TrackChangedJobs();
  if (replayed > 0 || compacted_seq > 0) {
    Warn("recovered from " + StoreName() + ": " +
         (compacted_seq > 0 ? "a snapshot of events 1-" +
                                  std::to_string(compacted_seq) + ", then "
                            : std::string()) +
         "replayed " + std::to_string(replayed) + " events, " +
         std::to_string(extras.size()) + " jobs, " +
         std::to_string(agents.size()) +
         " servers; waiting for agents to register again");
  }
  return core::Status::Ok();
}

void SchedulerServer::Impl::ArriveUnarrived() {
  std::vector<core::EventBody> arrived;
  const int64_t now = Now();
  for (auto& [id, x] : extras) {
    if (!st().has_job(JobId(id))) {
      core::JobArrived e{JobId(id), ToCoreSpec(x.spec)};
      if (x.has_written && x.written.submitted_us > 0 &&
          x.written.submitted_us <= now) {
        e.submitted = core::Time::FromMicros(x.written.submitted_us);
      }
      arrived.push_back(std::move(e));
    }
  }
  (void)FeedTogether(std::move(arrived));
}

void SchedulerServer::Impl::CordonAwaiting() {
  const core::Cluster& c = st().cluster();
  std::vector<AgentConn*> awaited;
  std::vector<core::EventBody> cordons;
  for (AgentConn& a : agents) {
    if (a.link != AgentConn::Link::kAwaiting || a.id.value >= c.num_servers()) {
      continue;
    }
    const core::Server& s = c.server(a.id);
    if (!s.up || s.cordoned) continue;
    cordons.push_back(core::CordonRequest{a.id, true});
    awaited.push_back(&a);
  }
  (void)FeedTogether(std::move(cordons));
  std::string names;
  for (AgentConn* a : awaited) {
    // Not cordoned: its event could not be logged (and was not handled).
    if (!c.server(a->id).cordoned) continue;
    a->away_cordon = true;
    a->row_dirty = true;
    names += (names.empty() ? "'" : ", '") + a->name + "'";
  }
  if (!names.empty()) {
    Log("cordoned the servers of " + names +
        " until their agents register with this daemon (declared down if "
        "not within " +
        Seconds(opts.agent_timeout_s + opts.agent_grace_s) + ")");
  }
}

}  // namespace gandiva::runtime
