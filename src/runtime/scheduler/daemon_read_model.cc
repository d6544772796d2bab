// The read model: each job's and server's published info, rows written to
// the store, the snapshot readers share, the metrics sample; and the event
// log's compaction and the retention of ended jobs.

#include <functional>

#include "core/policies/queues.h"
#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {

ServerRow SchedulerServer::Impl::ServerRowOf(const AgentConn& a) const {
  ServerRow r;
  r.id = a.id.value;
  r.name = a.name;
  r.address = a.address;
  json g = json::array();
  for (const rpc::Gpu& gpu : a.gpus) {
    std::string s;
    (void)google::protobuf::util::MessageToJsonString(gpu, &s);
    g.push_back(json::parse(s));
  }
  r.gpus_json = g.dump();
  r.sockets = a.sockets;
  r.switches_per_socket = a.switches_per_socket;
  r.away_since_us = a.away_since_us;
  r.away_cordon = a.away_cordon;
  return r;
}

uint64_t SchedulerServer::Impl::PublishInputs(int32_t id,
                                              const JobExtra& x) const {
  InputsHash hash;
  auto mix = [&hash](uint64_t v) { hash.Mix(v); };
  auto mixd = [&mix](double d) { mix(std::bit_cast<uint64_t>(d)); };
  mix(x.exit_code.has_value() ? 1 : 0);
  mix(static_cast<uint64_t>(x.exit_code.value_or(0)));
  const rpc::Progress& p = x.progress;
  mix(static_cast<uint64_t>(p.minibatches()));
  mixd(p.minibatch_rate());
  mixd(p.gpu_utilization());
  mix(static_cast<uint64_t>(p.gpu_memory_bytes()));
  mix(p.uses_library() ? 1 : 0);
  mix(std::hash<std::string_view>{}(p.sharing()));
  mix(static_cast<uint64_t>(p.world_size()));
  mixd(p.metric());
  mix(static_cast<uint64_t>(p.metric_minibatches()));
  mix(static_cast<uint64_t>(p.metric_reports()));
  const bool in_core = st().has_job(JobId(id));
  mix(in_core ? 1 : 0);
  if (!in_core) return hash.value();
  const core::Job& j = st().job(JobId(id));
  // Waiting for its agent, its restart not sent yet (counts down).
  const bool restart_waits = !j.busy() || j.in_flight == ActionKind::kRestart;
  if (j.state == core::JobState::kRunning && restart_waits && !x.proc.exists &&
      x.proc.checkpoint) {
    return 0;
  }
  if (OutOfReachAgentOf(x.proc) != nullptr) return 0;  // counts down
  mix(static_cast<uint64_t>(j.state));
  mix((j.launched ? 1 : 0) | (j.busy() ? 2 : 0) | (j.held ? 4 : 0));
  mix(static_cast<uint64_t>(static_cast<int64_t>(j.spec.priority)));
  mix(static_cast<uint64_t>(j.submitted.micros()));
  mix(static_cast<uint64_t>(j.first_started.micros()));
  mix(static_cast<uint64_t>(j.ended.micros()));
  mix(static_cast<uint64_t>(j.suspends));
  mix(static_cast<uint64_t>(j.resumes));
  mix(static_cast<uint64_t>(j.start_failures));
  const bool retry = j.awaits_start_retry(st().now());
  mix(retry ? static_cast<uint64_t>(j.start_retry_at.micros()) : 0);
  mix(static_cast<uint64_t>(j.profile.minibatches));
  mix(j.gpus.size());
  for (core::GpuId g : j.gpus) mix(static_cast<uint64_t>(g.value));
  if (j.state == core::JobState::kQueued) {
    mix(j.start_failed_on.size());
    for (core::ServerId s : j.start_failed_on) {
      mix(static_cast<uint64_t>(s.value));
    }
  }
  return hash.value();
}

rpc::JobInfo SchedulerServer::Impl::InfoOf(int32_t id,
                                           const JobExtra& x) const {
  rpc::JobInfo info;
  info.set_id(id);
  *info.mutable_progress() = x.progress;
  info.set_uses_library(x.progress.uses_library());
  if (x.exit_code) info.set_exit_code(*x.exit_code);
  if (!st().has_job(JobId(id))) {
    info.set_state(rpc::QUEUED);
    info.set_priority(x.spec.priority());
    return info;
  }
  const core::Job& j = st().job(JobId(id));
  info.set_state(ToRpcState(j));
  info.set_priority(j.spec.priority);
  info.set_submitted_us(j.submitted.micros());
  if (j.first_started != core::Time::Never()) {
    info.set_started_us(j.first_started.micros());
  }
  if (j.ended != core::Time::Never()) info.set_ended_us(j.ended.micros());
  info.set_suspends(j.suspends);
  info.set_resumes(j.resumes);
  info.set_start_failures(j.start_failures);
  info.set_run_failures(j.run_failures);
  if (j.awaits_start_retry(st().now())) {
    info.set_start_retry_us(j.start_retry_at.micros());
  }
  if (j.state == core::JobState::kQueued) {
    info.set_waiting_reason(core::OwnWaitReason(j, st().cluster(), st().now()));
  } else if (j.state == core::JobState::kSuspended && !j.busy()) {
    std::string own = core::OwnWaitReason(j, st().cluster(), st().now());
    info.set_waiting_reason(
        j.held         ? core::kHeldReason
        : !own.empty() ? std::move(own)
        : j.launched   ? "time-sliced: it waits for its next turn on its GPUs"
                     : "time-sliced: it waits for its first turn on its GPUs");
  } else if (j.state == core::JobState::kRunning &&
             (!j.busy() || j.in_flight == ActionKind::kRestart) &&
             !x.proc.exists && x.proc.checkpoint &&
             static_cast<size_t>(x.proc.server.value) < agents.size()) {
    const AgentConn& a = agents[static_cast<size_t>(x.proc.server.value)];
    std::string within;
    if (a.away_since_us > 0) {
      const double left =
          static_cast<double>(AwayUntilUs(a, lim()) - Env().WallMicros()) / 1e6;
      char b[64];
      std::snprintf(b, sizeof b, "if it is not back within %.0f s,",
                    std::max(0.0, left));
      within = b;
    } else {
      within = "after " +
               Seconds(static_cast<double>(SilenceAllowedUs(a, lim())) / 1e6) +
               " without it";
    }
    info.set_waiting_reason(
        "agent '" + a.name +
        "' stopped: the job goes on from the checkpoint kept there when "
        "the agent is back (" +
        within +
        " the server is declared down and the job placed again, from the "
        "beginning)");
  }
  if (const AgentConn* a = OutOfReachAgentOf(x.proc);
      a != nullptr && !core::IsTerminal(j.state)) {
    char b[160];
    std::snprintf(
        b, sizeof b,
        " is out of reach (not heard of for %.0f s): the job is kept there "
        "as it was until the agent is back (if it is not within %.0f s, ",
        static_cast<double>(NowConst() - a->last_seen_us) / 1e6,
        std::max(0.0,
                 static_cast<double>(a->silent_until_us - Env().WallMicros()) /
                     1e6));
    info.set_waiting_reason(
        "agent '" + a->name + "'" + b +
        "the server is declared down and the job placed again)");
  }
  // Where it is placed, or last ran once it ended. A queued job: where
  // its process (or checkpoint) was left, requeued by the policy; none
  // after a failed start or a lost server (its GPUs are the last it was
  // placed on, which it no longer holds).
  if (!j.gpus.empty() && (j.state != core::JobState::kQueued || j.launched)) {
    const core::Cluster& c = st().cluster();
    const std::vector<Part> parts = Parts(j.gpus);
    info.set_server(c.server(parts[0].server).spec.name);
    for (int32_t g : parts[0].local) info.add_gpus(g);
    if (parts.size() > 1) {
      for (const Part& p : parts) {
        rpc::JobPart* jp = info.add_parts();
        jp->set_server(c.server(p.server).spec.name);
        for (int32_t g : p.local) jp->add_gpus(g);
      }
    }
  }
  if (info.progress().minibatches() == 0 && j.profile.minibatches > 0) {
    info.mutable_progress()->set_minibatches(j.profile.minibatches);
  }
  return info;
}

rpc::ServerInfo SchedulerServer::Impl::ServerInfoOf(const AgentConn& a) {
  rpc::ServerInfo info;
  const core::Cluster& c = st().cluster();
  info.set_id(a.id.value);
  info.set_name(a.name);
  info.set_address(a.address);
  for (const rpc::Gpu& g : a.gpus) *info.add_gpus() = g;
  if (a.id.value >= c.num_servers()) return info;
  const core::Server& s = c.server(a.id);
  // Away, or not registered with this daemon yet: no agent serves it
  // (as far as the daemon knows), though its jobs stay placed there.
  info.set_up(s.up && a.link == AgentConn::Link::kUp && a.away_since_us == 0 &&
              a.silent_since_us == 0);
  info.set_cordoned(s.cordoned);
  if (a.away_since_us > 0) {
    info.set_away_since_us(a.away_since_us);
    info.set_away_until_us(AwayUntilUs(a, lim()));
  }
  if (a.silent_since_us > 0) {
    info.set_silent_since_us(a.silent_since_us);
    info.set_silent_until_us(a.silent_until_us);
  }
  if (a.link == AgentConn::Link::kAwaiting) {
    info.set_awaiting_until_us(AwaitingUntilUs(a, lim()));
  }
  info.set_height(s.height());
  info.set_affinity(s.affinity);
  info.set_free_gpus(s.free_gpus);
  *info.mutable_capabilities() = a.caps;
  for (core::GpuId g : c.GpusOf(a.id)) {
    rpc::GpuJobs* gj = info.add_gpu_jobs();
    for (JobId j : c.gpu(g).jobs) {
      if (st().job(j).state == JobState::kRunning) gj->add_running(j.value);
    }
    for (JobId j : c.gpu(g).jobs) {
      if (st().job(j).state != JobState::kRunning) gj->add_waiting(j.value);
    }
  }
  return info;
}

uint64_t SchedulerServer::Impl::ServerInputs(const AgentConn& a) const {
  if (a.link == AgentConn::Link::kAwaiting) return 0;
  InputsHash hash;
  auto mix = [&hash](uint64_t v) { hash.Mix(v); };
  mix(a.registrations);
  mix(std::hash<std::string_view>{}(a.name));
  mix(std::hash<std::string_view>{}(a.address));
  mix(a.gpus.size());
  mix(static_cast<uint64_t>(a.link));
  mix(static_cast<uint64_t>(a.away_since_us));
  mix(static_cast<uint64_t>(a.silent_since_us));
  mix(static_cast<uint64_t>(a.silent_until_us));
  const core::Cluster& c = st().cluster();
  mix(a.id.value < c.num_servers() ? 1 : 0);
  if (a.id.value < c.num_servers()) {
    const core::Server& s = c.server(a.id);
    mix((s.up ? 1 : 0) | (s.cordoned ? 2 : 0));
    mix(static_cast<uint64_t>(s.height()));
    mix(static_cast<uint64_t>(s.affinity));
    mix(static_cast<uint64_t>(s.free_gpus));
    for (core::GpuId g : c.GpusOf(a.id)) {
      const auto& jobs = c.gpu(g).jobs;
      mix(jobs.size());
      for (JobId j : jobs) {
        mix(static_cast<uint64_t>(j.value) << 1 |
            (st().job(j).state == JobState::kRunning ? 1 : 0));
      }
    }
  }
  return hash.value();
}

void SchedulerServer::Impl::PersistAndPublish(bool all_progress) {
  // What is published has been logged: the events deferred are first.
  (void)FlushDeferred();
  auto next = std::make_shared<Snapshot>();
  const int64_t now = Now();
  const bool progress_due = all_progress || now >= progress_write_due_us;
  next->queue = sched->ExplainQueue();
  if (!unsettling.empty()) {
    std::sort(unsettling.begin(), unsettling.end());
    const auto was = static_cast<std::ptrdiff_t>(unsettled.size());
    unsettled.insert(unsettled.end(), unsettling.begin(), unsettling.end());
    std::inplace_merge(unsettled.begin(), unsettled.begin() + was,
                       unsettled.end());
    unsettling.clear();
  }
  next->jobs.reserve(unsettled.size());
  size_t kept = 0;
  for (size_t i = 0; i < unsettled.size(); ++i) {
    const int32_t id = unsettled[i].first;
    JobExtra& x = *unsettled[i].second;
    if (!x.dirty && !x.volatile_info && x.published != nullptr &&
        opts.reuse_unchanged_job_info) {
      // Nothing it is built from changed since it was published.
      if (opts.verify_reused_job_info) {
        if (PublishInputs(id, x) != x.published_inputs) {
          Warn("job " + std::to_string(id) +
               ": its info's inputs changed, but it was not marked dirty");
          std::abort();
        }
        VerifyReused(id, x);
      }
      next->jobs.emplace_back(id, x.published);
      unsettled[kept++] = unsettled[i];
      continue;
    }
    x.dirty = false;
    const uint64_t inputs =
        opts.reuse_unchanged_job_info ? PublishInputs(id, x) : 0;
    x.volatile_info =
        inputs == 0 || (st().has_job(JobId(id)) &&
                        st().job(JobId(id)).awaits_start_retry(st().now()));
    if (inputs != 0 && x.published != nullptr && inputs == x.published_inputs) {
      // Unchanged, and so is its row.
      if (opts.verify_reused_job_info) VerifyReused(id, x);
    } else {
      auto info = std::make_shared<const rpc::JobInfo>(InfoOf(id, x));
      if (st().has_job(JobId(id)) &&
          (!x.has_written || !SameAsWritten(*info, x))) {
        if (!progress_due && x.has_written &&
            SameAsWritten(*info, x, /*but_progress=*/true)) {
          // Only its progress changed: written with the others' at the
          // next --progress-write-interval-s.
          progress_behind.insert(id);
        } else {
          WriteRow(*info, x);
          progress_behind.erase(id);
        }
      }
      x.published = std::move(info);
      x.published_inputs = inputs;
    }
    if (IsEnded(id) && !x.proc.exists && !x.proc.checkpoint && x.has_written) {
      x.settled = true;
      EndStreak(id);
      published.Settle(id, *x.published);
      x.published.reset();
      continue;
    }
    next->jobs.emplace_back(id, x.published);
    unsettled[kept++] = unsettled[i];
  }
  unsettled.resize(kept);
  if (progress_due) {
    for (int32_t id : progress_behind) {
      JobExtra* x = Extra(id);
      if (x == nullptr || x->published == nullptr || !st().has_job(JobId(id)))
        continue;
      WriteRow(*x->published, *x);
    }
    progress_behind.clear();
    progress_write_due_us =
        now + static_cast<int64_t>(opts.progress_write_interval_s * 1e6);
  }
  for (AgentConn& a : agents) {
    if (!a.row_dirty && !all_server_rows_dirty) continue;
    batch.servers.push_back(ServerRowOf(a));
    a.row_dirty = false;
  }
  all_server_rows_dirty = false;
  if (core::Status s = store->Write(batch); !s.ok()) {
    Warn("cannot write state: " + s.ToString());
  }
  batch = WriteBatch{};
  next->servers.reserve(agents.size());
  for (AgentConn& a : agents) {
    const uint64_t inputs = opts.reuse_unchanged_job_info ? ServerInputs(a) : 0;
    if (inputs != 0 && a.published != nullptr && inputs == a.published_inputs) {
      if (opts.verify_reused_job_info) VerifyReused(a);
    } else {
      a.published = std::make_shared<const rpc::ServerInfo>(ServerInfoOf(a));
      a.published_inputs = inputs;
    }
    next->servers.push_back(a.published);
  }
  next->counters = st().counters();
  next->log_events = events_since_compaction;
  next->last_event_seq = store->LastEventSeq();
  next->log_appends = journal.appends();
  next->compactions = compactions;
  next->jobs_archived = st().forgotten_jobs();
  next->archive_deleted = archive_pruned;
  next->job_id_limit = st().job_id_limit();
  next->lost_ids = lost_ids;
  next->last_compaction_s = last_compaction_s;
  if (now >= queue_usage_due_us && sched->usage() != nullptr) {
    auto by_queue = std::make_shared<std::map<std::string, double>>();
    const core::Time t = core::Time::FromMicros(now);
    for (const auto& [key, seconds] :
         sched->usage()->Used(t - core::Duration::Seconds(86400), t)) {
      (*by_queue)[key.queue] += seconds;
    }
    queue_usage_day = std::move(by_queue);
    queue_usage_due_us = now + kQueueUsageEvery.micros();
  }
  next->queue_usage_day = queue_usage_day;
  published.Publish(std::move(next));
}

void SchedulerServer::Impl::ListQueues(rpc::ListQueuesReply* rep) {
  const std::shared_ptr<const Snapshot> sn = Snap();
  const std::shared_ptr<const std::vector<core::QueueConfig>> queues = Queues();
  const core::QueueQuotas tree(*queues);
  std::map<std::string, const core::QueueConfig*> config;
  for (const core::QueueConfig& q : *queues) config[q.name] = &q;
  std::vector<rpc::QueueInfo> out(tree.size());
  // Calls `f` on the row of the queue jobs naming `name` go to, and on each
  // row above it: a parent's figures are its children's, summed.
  auto up_from = [&](const std::string& name, auto f) {
    for (int q = static_cast<int>(tree.Of(name)); q >= 0;
         q = tree.parent(static_cast<size_t>(q))) {
      f(out[static_cast<size_t>(q)]);
    }
  };
  published.Read([&](const Published::View& v) {
    for (const auto& [id, info_ptr] : sn->jobs) {
      const rpc::JobInfo& info = *info_ptr;
      const rpc::JobSpec* spec = v.Spec(id);
      const rpc::JobState state = info.state();
      if (spec == nullptr || state == rpc::FINISHED || state == rpc::FAILED ||
          state == rpc::KILLED) {
        continue;
      }
      int gpus = info.gpus_size();
      if (info.parts_size() > 0) {
        gpus = 0;
        for (const rpc::JobPart& part : info.parts()) gpus += part.gpus_size();
      }
      up_from(spec->queue(), [&](rpc::QueueInfo& row) {
        if (state == rpc::RUNNING) {
          row.set_jobs_running(row.jobs_running() + 1);
          row.set_gpus_running(row.gpus_running() + gpus);
        } else {
          row.set_jobs_waiting(row.jobs_waiting() + 1);
        }
        row.set_gpus_asked(row.gpus_asked() +
                           (gpus > 0 ? gpus : std::max(1, spec->gpus())));
      });
    }
  });
  int up = 0;
  for (const auto& server : sn->servers) {
    if (server->up()) up += server->gpus_size();
  }
  if (sn->queue_usage_day != nullptr) {
    for (const auto& [name, seconds] : *sn->queue_usage_day) {
      up_from(name, [&](rpc::QueueInfo& row) {
        row.set_gpu_seconds_day(row.gpu_seconds_day() + seconds);
      });
    }
  }
  std::vector<double> asked(out.size());
  for (size_t q = 0; q < out.size(); ++q) {
    asked[q] = tree.leaf(q) ? out[q].gpus_asked() : 0;
  }
  const std::vector<double> share = tree.Shares(asked, up);
  for (size_t q = 0; q < out.size(); ++q) {
    rpc::QueueInfo& row = out[q];
    row.set_name(tree.name(q));
    row.set_quota(tree.quota(q));
    row.set_fair_share(share[q]);
    row.set_weight(tree.weight(q));
    if (tree.parent(q) >= 0) {
      row.set_parent(tree.name(static_cast<size_t>(tree.parent(q))));
    }
    if (tree.limit(q) >= 0) row.set_limit(tree.limit(q));
    if (auto it = config.find(tree.name(q)); it != config.end()) {
      for (const std::string& m : it->second->members) row.add_members(m);
      if (it->second->max_priority) {
        row.set_max_priority(*it->second->max_priority);
      }
    }
  }
  // Parents before their children, siblings by name (the order of q), the
  // shared queue last.
  std::vector<size_t> order;
  std::function<void(int)> walk = [&](int parent) {
    for (size_t q = 0; q < out.size(); ++q) {
      if (tree.parent(q) != parent || tree.name(q).empty()) continue;
      order.push_back(q);
      walk(static_cast<int>(q));
    }
  };
  walk(-1);
  order.push_back(tree.Of(""));
  for (size_t q : order) *rep->add_queues() = std::move(out[q]);
}

rpc::UsageReply SchedulerServer::Impl::Usage(double last_s) {
  rpc::UsageReply rep;
  const int64_t now = Now();
  const core::Time t = core::Time::FromMicros(now);
  const core::Time from =
      t - core::Duration::FromSeconds(last_s > 0 ? last_s : 86400);
  rep.set_from_us(core::UsageLedger::HourStart(from).micros());
  rep.set_to_us(now);
  const core::UsageLedger* ledger = sched->usage();
  if (ledger == nullptr) return rep;
  if (ledger->first_hour() != core::Time::Never()) {
    rep.set_kept_from_us(ledger->first_hour().micros());
  }
  for (const auto& [key, seconds] : ledger->Used(from, t)) {
    rpc::UsageRow* row = rep.add_rows();
    row->set_queue(key.queue);
    row->set_user(key.user);
    row->set_gpu_seconds(seconds);
  }
  return rep;
}

MetricsSample SchedulerServer::Impl::SampleMetrics() {
  const std::shared_ptr<const Snapshot> sn = Snap();
  MetricsSample s;
  auto name = [](rpc::JobState state) {
    std::string n = rpc::JobState_Name(state);
    for (char& ch : n) ch = static_cast<char>(std::tolower(ch));
    return n;
  };
  for (rpc::JobState state :
       {rpc::QUEUED, rpc::RUNNING, rpc::SUSPENDED, rpc::MIGRATING,
        rpc::FINISHED, rpc::FAILED, rpc::KILLED}) {
    s.jobs_by_state[name(state)] = 0;
  }
  published.Read([&](const Published::View& v) {
    for (const auto& [id, info] : v.settled) {
      if (sn->Find(id) == nullptr) ++s.jobs_by_state[name(info.state())];
    }
    for (const auto& [id, info_ptr] : sn->jobs) {
      const rpc::JobInfo& info = *info_ptr;
      ++s.jobs_by_state[name(info.state())];
      if (info.state() == rpc::RUNNING) {
        const rpc::JobSpec* spec = v.Spec(id);
        s.running.push_back({id, spec != nullptr ? spec->name() : "",
                             info.progress().minibatch_rate(),
                             info.progress().minibatches(),
                             info.progress().gpu_utilization(),
                             info.progress().gpu_memory_bytes()});
      }
    }
  });
  for (const auto& server : sn->servers) {
    const rpc::ServerInfo& si = *server;
    const int64_t n = si.gpus_size();
    s.gpus += n;
    if (si.up()) {
      ++s.servers_up;
      if (si.cordoned()) ++s.servers_cordoned;
      s.gpus_up += n;
      if (!si.cordoned()) s.gpus_free += si.free_gpus();
    } else {
      ++s.servers_down;
      if (si.silent_since_us() > 0) ++s.servers_out_of_reach;
    }
    for (const rpc::GpuJobs& g : si.gpu_jobs()) {
      if (g.running_size() > 0) ++s.gpus_training;
    }
  }
  s.actions = sn->counters;
  s.log_events = sn->log_events;
  s.last_event_seq = sn->last_event_seq;
  s.log_appends = sn->log_appends;
  s.compactions = sn->compactions;
  s.jobs_archived = sn->jobs_archived;
  s.archive_deleted = sn->archive_deleted;
  s.last_compaction_seconds = sn->last_compaction_s;
  rpc::ListQueuesReply listed;
  ListQueues(&listed);
  for (const rpc::QueueInfo& q : listed.queues()) {
    auto named = [](const std::string& n) {
      return n.empty() ? std::string("(shared)") : n;
    };
    s.queues.push_back(
        {named(q.name()), q.parent(), static_cast<double>(q.quota()),
         q.fair_share(), static_cast<double>(q.gpus_asked()),
         static_cast<double>(q.gpus_running()),
         static_cast<double>(q.jobs_running()),
         static_cast<double>(q.jobs_waiting()), q.gpu_seconds_day()});
  }
  return s;
}

json SchedulerServer::Impl::DaemonState() const {
  json jobs = json::object();
  for (const auto& [id, x] : extras) {
    const Proc& p = x.proc;
    const bool plain = !p.exists && !p.checkpoint && !p.leaving &&
                       !p.server.valid() && p.local.empty();
    if (plain && x.ignore_exits.empty()) continue;
    json j;
    j["proc"] = {{"server", p.server.value},
                 {"local", p.local},
                 {"exists", p.exists},
                 {"checkpoint", p.checkpoint},
                 {"leaving", p.leaving}};
    if (p.gang()) {
      json followers = json::array();
      for (const Part& f : p.followers) {
        followers.push_back({{"server", f.server.value}, {"local", f.local}});
      }
      j["proc"]["followers"] = std::move(followers);
    }
    json ignore = json::object();
    for (const auto& [server, n] : x.ignore_exits) {
      ignore[std::to_string(server)] = n;
    }
    j["ignore_exits"] = std::move(ignore);
    jobs[std::to_string(id)] = std::move(j);
  }
  json pend = json::array();
  for (const auto& [id, p] : pending) {
    const core::Action& a = p.action;
    json gpus = json::array();
    for (core::GpuId g : a.gpus) gpus.push_back(g.value);
    pend.push_back({{"id", a.id.value},
                    {"kind", static_cast<int>(a.kind)},
                    {"job", a.job.value},
                    {"gpus", std::move(gpus)},
                    {"peer", a.peer.value},
                    {"launch", a.launch},
                    {"relocates", a.relocates},
                    {"priority", a.priority},
                    {"reason", a.reason},
                    {"dispatched_us", p.dispatched_us},
                    {"relocate", p.relocate},
                    {"rate_before", p.rate_before}});
  }
  return {{"version", 1},
          {"clock_us", clock_us},
          {"jobs", std::move(jobs)},
          {"pending", std::move(pend)}};
}

core::Status SchedulerServer::Impl::RestoreDaemonState(
    const std::string& text) {
  try {
    const json d = json::parse(text);
    if (d.at("version").get<int>() != 1) {
      return core::InvalidArgument("daemon state: version " +
                                   d.at("version").dump());
    }
    clock_us = std::max(clock_us, d.at("clock_us").get<int64_t>());
    for (const auto& [key, j] : d.at("jobs").items()) {
      JobExtra* x = Extra(std::stoi(key));
      if (x == nullptr) {
        return core::InvalidArgument("daemon state: job " + key +
                                     " is not in the jobs table");
      }
      const json& p = j.at("proc");
      x->proc.server = ServerId(p.at("server").get<int32_t>());
      x->proc.local = p.at("local").get<std::vector<int32_t>>();
      x->proc.exists = p.at("exists").get<bool>();
      x->proc.checkpoint = p.at("checkpoint").get<bool>();
      x->proc.leaving = p.at("leaving").get<bool>();
      if (p.contains("followers")) {
        for (const json& f : p.at("followers")) {
          x->proc.followers.push_back(
              Part{ServerId(f.at("server").get<int32_t>()),
                   f.at("local").get<std::vector<int32_t>>()});
        }
      }
      for (const auto& [server, n] : j.at("ignore_exits").items()) {
        x->ignore_exits[std::stoi(server)] = n.get<int>();
      }
    }
    for (const json& p : d.at("pending")) {
      PendingAction pa;
      core::Action& a = pa.action;
      a.id = core::ActionId(p.at("id").get<int64_t>());
      const int kind = p.at("kind").get<int>();
      if (kind < 0 || kind > static_cast<int>(ActionKind::kRestart)) {
        return core::InvalidArgument("daemon state: action kind " +
                                     std::to_string(kind));
      }
      a.kind = static_cast<ActionKind>(kind);
      a.job = JobId(p.at("job").get<int32_t>());
      for (const json& g : p.at("gpus")) {
        a.gpus.push_back(core::GpuId(g.get<int32_t>()));
      }
      a.peer = JobId(p.at("peer").get<int32_t>());
      a.launch = p.at("launch").get<bool>();
      a.relocates = p.value("relocates", false);  // absent before restarts
      a.priority = p.at("priority").get<int>();
      a.reason = p.at("reason").get<std::string>();
      pa.dispatched_us = p.at("dispatched_us").get<int64_t>();
      pa.relocate = p.at("relocate").get<bool>();
      pa.rate_before = p.at("rate_before").get<double>();
      pa.sent = false;  // as after a replay: its reply will not come
      pending[a.id.value] = std::move(pa);
    }
  } catch (const std::exception& e) {
    return core::InvalidArgument(std::string("daemon state: ") + e.what());
  }
  return core::Status::Ok();
}

void SchedulerServer::Impl::CompactLog() {
  events_since_compaction = 0;
  const int64_t seq = store->LastEventSeq();
  if (seq <= compacted_seq) return;
  // The snapshot holds the policy under the queues in force: the stored
  // ones must be those first (a recovery builds the policy from them).
  if (queues_unstored) {
    if (const core::Status q = StoreQueues(*Queues()); !q.ok()) {
      Warn("cannot compact the event log: storing the queues: " + q.ToString());
      return;
    }
    queues_unstored = false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> forgotten = ForgetEndedJobs();
  SnapshotRow row{seq, clock_us, sched->Snapshot(), DaemonState().dump()};
  const core::Status s = store->WriteSnapshot(row);
  // Not archived if the snapshot was not written: after a restart the
  // older snapshot and the log bring them back, to be forgotten again.
  if (!forgotten.empty()) DropForgotten(forgotten, /*archive=*/s.ok());
  if (!s.ok()) {
    Warn("cannot compact the event log: " + s.ToString());
    return;
  }
  const int64_t before = compacted_seq;
  compacted_seq = seq;
  compacted_events_left = true;
  ++compactions;
  last_compaction_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  Log("event log compacted: snapshot after event " + std::to_string(seq) +
      " (" + std::to_string(row.core.size() + row.daemon.size()) + " bytes), " +
      std::to_string(seq - before) + " events to delete, " +
      std::to_string(forgotten.size()) + " ended jobs archived, " +
      std::to_string(static_cast<int64_t>(last_compaction_s * 1000)) + " ms");
}

std::vector<Retention::Ended> SchedulerServer::Impl::Forgettable() const {
  std::set<int32_t> busy(leave_saving.begin(), leave_saving.end());
  for (const auto& [aid, p] : pending) busy.insert(p.action.job.value);
  std::vector<Retention::Ended> ended;
  for (const auto& [id, x] : extras) {
    if (!x.settled || !x.has_written || !x.ignore_exits.empty() ||
        busy.contains(id) || !st().has_job(JobId(id))) {
      continue;
    }
    ended.emplace_back(x.written.ended_us, id);
  }
  return ended;
}

std::vector<int32_t> SchedulerServer::Impl::ForgetEndedJobs() {
  std::vector<int32_t> out = retention().ToForget(Forgettable(), Now());
  if (out.empty()) return {};
  const std::vector<core::JobId> ids(out.begin(), out.end());
  if (core::Status s = sched->Forget(ids); !s.ok()) {
    Warn("cannot forget ended jobs: " + s.ToString());
    return {};
  }
  return out;
}

void SchedulerServer::Impl::DropForgotten(std::span<const int32_t> ids,
                                          bool archive) {
  if (archive) {
    std::vector<JobRow> rows;
    rows.reserve(ids.size());
    for (int32_t id : ids) rows.push_back(extras.at(id).written);
    if (core::Status s = store->ArchiveJobs(rows); !s.ok()) {
      Warn("cannot archive " + std::to_string(ids.size()) +
           " forgotten jobs: " + s.ToString());
    }
  }
  {
    published.Forget(ids);
    for (int32_t id : ids) streaks.Forget(id);
  }
  for (int32_t id : ids) {
    extras.erase(id);
    progress_behind.erase(id);
  }
  // Many small blocks freed: give the pages back to the system (the
  // allocator keeps them otherwise, and the daemon's size would not
  // shrink).
  if (ids.size() >= 1000) ::malloc_trim(0);
}

}  // namespace gandiva::runtime
