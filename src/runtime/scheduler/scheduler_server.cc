// SchedulerServer: starting, stopping and waiting for the daemon; its loop
// (LoopMain) and the helpers every part uses. The parts are daemon_*.cc.
#include "runtime/scheduler/scheduler_server.h"

#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {

rpc::JobInfo SchedulerServer::Impl::WithSpec(
    const Published::View& v, const rpc::JobInfo& info,
    const core::QueueReasons* reasons) const {
  rpc::JobInfo out = info;
  if (const rpc::JobSpec* spec = v.Spec(info.id())) *out.mutable_spec() = *spec;
  if (reasons != nullptr && info.state() == rpc::QUEUED &&
      info.submitted_us() != 0 && info.waiting_reason().empty()) {
    out.set_waiting_reason(reasons->Why(JobId(static_cast<int32_t>(info.id())),
                                        out.spec().gpus()));
  }
  return out;
}

JobExtra* SchedulerServer::Impl::Extra(int32_t job) {
  auto it = extras.find(job);
  if (it == extras.end()) return nullptr;
  if (it->second.settled) {
    it->second.settled = false;
    unsettling.emplace_back(job, &it->second);
  }
  it->second.dirty = true;
  return &it->second;
}

std::vector<std::pair<int32_t, JobExtra*>>
SchedulerServer::Impl::UnsettledJobs() const {
  std::vector<std::pair<int32_t, JobExtra*>> out;
  out.reserve(unsettled.size() + unsettling.size());
  out.insert(out.end(), unsettled.begin(), unsettled.end());
  out.insert(out.end(), unsettling.begin(), unsettling.end());
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(unsettled.size()),
            out.end());
  std::inplace_merge(
      out.begin(), out.begin() + static_cast<std::ptrdiff_t>(unsettled.size()),
      out.end());
  return out;
}

std::optional<std::vector<PartConn>> SchedulerServer::Impl::Conns(
    const std::vector<Part>& parts, std::string* missing) const {
  std::vector<PartConn> conns;
  for (const Part& p : parts) {
    if (std::string away = Away(p.server); !away.empty()) {
      *missing = away;
      return std::nullopt;
    }
    auto stub = StubOf(p.server);
    if (stub == nullptr) {
      *missing =
          "no agent connected for server " + std::to_string(p.server.value);
      return std::nullopt;
    }
    const AgentConn& a = agents[static_cast<size_t>(p.server.value)];
    conns.push_back(PartConn{p, stub, a.name, a.address});
  }
  return conns;
}

void SchedulerServer::Impl::History(int32_t job, const std::string& action,
                                    bool ok, int64_t took_us,
                                    const std::string& detail) {
  FailureStreaks::Lines lines =
      streaks.Add(HistoryRow{job, Now(), action, ok, took_us, detail});
  if (lines.ended) {
    Log("job " + std::to_string(job) + ": " + lines.ended->action + " " +
        lines.ended->detail);
    batch.history.push_back(std::move(*lines.ended));
  }
  if (!lines.line) return;  // a repeat, counted
  batch.history.push_back(std::move(*lines.line));
  Log("job " + std::to_string(job) + ": " + action + (ok ? " ok" : " FAILED") +
      (detail.empty() ? "" : " (" + detail + ")"));
}

void SchedulerServer::Impl::EndStreak(int32_t job) {
  std::optional<HistoryRow> ended = streaks.End(job);
  if (!ended) return;
  Log("job " + std::to_string(job) + ": " + ended->action + " " +
      ended->detail);
  batch.history.push_back(std::move(*ended));
}

void SchedulerServer::Impl::LoopMain() {
  const int64_t tick = int64_t{std::max(1, opts.tick_ms)} * 1000;
  int64_t next_tick = Env().SteadyMicros() + tick;
  const auto retention = static_cast<int64_t>(opts.retention_check_s * 1e6);
  next_retention_check = Env().SteadyMicros() + retention;
  while (true) {
    std::deque<std::function<void()>> work;
    {
      std::unique_lock lock(mu);
      // Events or archived jobs left to delete: on without waiting.
      const bool more = compacted_events_left || archive_prune_left;
      loop_waiting = !more;
      loop_wake_us = next_tick;
      ++loop_generation;
      Env().WaitUntil(lock, cv, more ? Env().SteadyMicros() : next_tick,
                      [&] { return stopping || !queue.empty(); });
      loop_waiting = false;
      if (stopping) break;
      work.swap(queue);
    }
    for (auto& f : work) f();
    if (Env().SteadyMicros() >= next_tick) {
      (void)Feed(core::Tick{});
      CheckAgents();
      next_tick = Env().SteadyMicros() + tick;
    }
    PersistAndPublish();
    for (auto& answer : answers) answer();
    answers.clear();
    if (opts.snapshot_every_events > 0 &&
        events_since_compaction >= opts.snapshot_every_events) {
      CompactLog();
    }
    if (compacted_events_left) DeleteCompactedEvents(kCompactionChunk);
    if (Env().SteadyMicros() >= next_retention_check) {
      CheckRetention();
      next_retention_check = Env().SteadyMicros() + retention;
    }
    if (archive_prune_left) PruneArchive(store->PruneChunk());
  }
  // A clean stop leaves nothing to replay, nor a row behind.
  PersistAndPublish(/*all_progress=*/true);
  if (opts.snapshot_every_events > 0) CompactLog();
  while (compacted_events_left) DeleteCompactedEvents(kCompactionChunk);
}

void SchedulerServer::Impl::CheckRetention() {
  if (opts.snapshot_every_events > 0 && retention().Forgets() &&
      retention().CompactsNow(Forgettable(), Now())) {
    CompactLog();
  }
  if (opts.keep_archived_for_s > 0) archive_prune_left = true;
}

void SchedulerServer::Impl::PruneArchive(int64_t limit) {
  const int64_t cutoff =
      Now() - static_cast<int64_t>(opts.keep_archived_for_s * 1e6);
  auto n = store->PruneArchive(cutoff, limit);
  if (!n.ok()) {
    Warn("cannot delete archived jobs: " + n.status().ToString());
    archive_prune_left = false;  // tried again at the next check
    archive_pruned_round = 0;
    return;
  }
  archive_pruned += *n;
  archive_pruned_round += *n;
  archive_prune_left = *n == limit;
  if (!archive_prune_left && archive_pruned_round > 0) {
    Log("deleted " + std::to_string(archive_pruned_round) +
        " archived jobs that ended more than " +
        DurationText(opts.keep_archived_for_s) + " ago");
    archive_pruned_round = 0;
  }
}

void SchedulerServer::Impl::DeleteCompactedEvents(int64_t limit) {
  auto n = store->DeleteCompactedEvents(limit);
  if (!n.ok()) {
    Warn("cannot delete compacted events: " + n.status().ToString());
    compacted_events_left = false;  // tried again at the next compaction
    return;
  }
  compacted_events_left = *n == limit;
}

// -------------------------------------------------------- SchedulerServer

SchedulerServer::SchedulerServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SchedulerServer::~SchedulerServer() { Shutdown(); }

core::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    SchedulerOptions options) {
  if (options.tick_ms <= 0) {
    return core::InvalidArgument("--tick-ms: must be positive");
  }
  if (!(options.agent_timeout_s > 0) ||
      !std::isfinite(options.agent_timeout_s)) {
    return core::InvalidArgument("--agent-timeout-s: must be positive");
  }
  if (!(options.agent_grace_s >= 0) || !std::isfinite(options.agent_grace_s)) {
    return core::InvalidArgument(
        "--agent-grace-s: must be a number of seconds, 0 or more");
  }
  if (options.keep_ended_jobs < 0) {
    return core::InvalidArgument("--keep-ended-jobs: must not be negative");
  }
  if (!(options.keep_ended_for_s >= 0)) {
    return core::InvalidArgument("--keep-ended-for: must not be negative");
  }
  if (options.keep_ended_for_s > 0 && options.snapshot_every_events == 0) {
    return core::InvalidArgument(
        "--keep-ended-for: ended jobs are forgotten at compactions, which "
        "--snapshot-every 0 turns off");
  }
  if (!(options.keep_archived_for_s >= 0)) {
    return core::InvalidArgument("--keep-archived-for: must not be negative");
  }
  if (!(options.retention_check_s > 0)) {
    return core::InvalidArgument("--retention-check: must be positive");
  }
  if (!(options.agent_away_s >= 0)) {
    return core::InvalidArgument("--agent-away-s: must not be negative");
  }
  if (options.agent_rpc_timeout_s <= 0) {
    return core::InvalidArgument("--agent-rpc-timeout-s: must be positive");
  }
  if (!(options.profile_interval_s >= 0)) {
    return core::InvalidArgument("--profile-interval-s: must not be negative");
  }
  if (!(options.progress_write_interval_s >= 0)) {
    return core::InvalidArgument(
        "--progress-write-interval-s: must not be negative");
  }
  if (!options.metrics_listen.empty() &&
      options.metrics_listen.rfind(':') == std::string::npos) {
    return core::InvalidArgument("--metrics-listen: expected HOST:PORT, got '" +
                                 options.metrics_listen + "'");
  }
  if (options.snapshot_every_events < 0) {
    return core::InvalidArgument(
        "--snapshot-every: must not be negative, got " +
        std::to_string(options.snapshot_every_events));
  }
  if (options.executor_threads < 1) {
    return core::InvalidArgument("--executor-threads: must be at least 1");
  }
  if (!options.listen.empty() &&
      options.listen.rfind(':') == std::string::npos) {
    return core::InvalidArgument("--listen: expected HOST:PORT, got '" +
                                 options.listen + "'");
  }
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  if (impl->opts.env == nullptr) impl->opts.env = RealDaemonEnv();
  auto tls = LoadTls(impl->opts.tls, "--tls-");
  if (!tls.ok()) return tls.status();
  impl->tls = std::move(*tls);
  GANDIVA_RETURN_IF_ERROR(impl->Open());
  impl->service = std::make_unique<SchedulerService>(*impl);
  impl->executor = std::make_unique<Dispatcher>(impl->opts.executor_threads);

  if (!impl->opts.listen.empty()) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(impl->opts.listen, ServerCredentials(impl->tls),
                             &port);
    builder.RegisterService(impl->service.get());
    impl->grpc_server = builder.BuildAndStart();
    if (impl->grpc_server == nullptr || port == 0) {
      return core::Status(core::StatusCode::kUnavailable,
                          "cannot listen on '" + impl->opts.listen + "'");
    }
    impl->address = HostPortForClients(impl->opts.listen, port);
  }
  {
    // Served over HTTP with --metrics-listen; read in process always
    // (SchedulerServer::MetricsText).
    Impl* p = impl.get();
    auto m = MetricsExporter::Start(impl->opts.metrics_listen,
                                    [p] { return p->SampleMetrics(); });
    if (!m.ok()) {
      if (impl->grpc_server) impl->grpc_server->Shutdown();
      return m.status();
    }
    impl->metrics = std::move(*m);
  }

  Impl* p = impl.get();
  p->Post([p] {
    p->ArriveUnarrived();
    p->CordonAwaiting();
  });
  p->PersistAndPublish();
  p->loop = std::thread([p] { p->LoopMain(); });
  if (!p->opts.address_file.empty()) {
    const std::string tmp = p->opts.address_file + ".tmp";
    {
      std::ofstream f(tmp);
      f << p->address << "\n";
      if (!f) {
        std::unique_ptr<SchedulerServer> s(
            new SchedulerServer(std::move(impl)));
        s->Shutdown();
        return core::IoError("cannot write '" + tmp + "'");
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, p->opts.address_file, ec);
    if (ec) {
      std::unique_ptr<SchedulerServer> s(new SchedulerServer(std::move(impl)));
      s->Shutdown();
      return core::IoError("cannot write '" + p->opts.address_file +
                           "': " + ec.message());
    }
  }
  return std::unique_ptr<SchedulerServer>(new SchedulerServer(std::move(impl)));
}

const std::string& SchedulerServer::address() const { return impl_->address; }
int SchedulerServer::metrics_port() const {
  return impl_->metrics ? impl_->metrics->port() : 0;
}

const std::string& SchedulerServer::policy() const {
  return impl_->policy_name;
}

rpc::Scheduler::Service& SchedulerServer::service() { return *impl_->service; }

std::string SchedulerServer::MetricsText() const {
  return impl_->metrics ? impl_->metrics->Text() : std::string();
}

SchedulerServer::Activity SchedulerServer::activity() const {
  Impl& m = *impl_;
  Activity a;
  {
    std::lock_guard lock(m.mu);
    a.loop_idle = m.loop_waiting && m.queue.empty();
    a.next_timer_us = m.loop_wake_us;
    a.generation = m.loop_generation + m.posts;
  }
  const Dispatcher::Load load = m.executor->load();
  a.tasks_running = load.running;
  a.tasks_ready = load.ready;
  a.generation += load.finished;
  return a;
}

void SchedulerServer::Sync() {
  (void)impl_->Call<bool>([] { return true; });
}

void SchedulerServer::Shutdown() {
  Impl& m = *impl_;
  {
    // One caller stops it (a signal and a lost lead may come together);
    // the others wait for it.
    std::unique_lock lock(m.mu);
    if (m.shutdown_started) {
      m.stopped_cv.wait(lock, [&] { return m.stopped; });
      return;
    }
    m.shutdown_started = true;
  }
  m.metrics.reset();  // no scrape while the rest stops
  if (m.grpc_server) {
    m.grpc_server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::seconds(2));
  }
  {
    std::lock_guard lock(m.mu);
    m.stopping = true;
    m.queue.clear();
    m.cv.notify_all();
  }
  if (m.loop.joinable()) m.loop.join();
  if (m.executor) m.executor->Stop();
  if (m.grpc_server) m.grpc_server->Wait();
  {
    std::lock_guard lock(m.mu);
    m.stopped = true;
  }
  m.stopped_cv.notify_all();
}

void SchedulerServer::Wait() {
  std::unique_lock lock(impl_->mu);
  impl_->stopped_cv.wait(lock, [&] { return impl_->stopped; });
}

}  // namespace gandiva::runtime
