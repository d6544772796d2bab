// Users' requests (submit, kill, suspend, resume, priority, mechanisms,
// drain), and the gRPC service adapters, which check a request, run it on
// the loop (Call) or read the published snapshot, and map the outcome to
// a gRPC status.

#include "config/job_spec_check.h"
#include "config/queues_file.h"
#include "runtime/scheduler/access.h"
#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {

core::StatusOr<std::vector<int64_t>> SchedulerServer::Impl::Submit(
    std::span<const rpc::JobSpec* const> jobs) {
  std::vector<std::string> jsons;
  jsons.reserve(jobs.size());
  for (const rpc::JobSpec* spec : jobs) jsons.push_back(SpecToJson(*spec));
  const int64_t now = Now();
  const Store::Inserted in = store->InsertJobs(jsons, now);
  if (in.count == 0) {
    return in.status.ok() ? core::InvalidArgument("no jobs to submit")
                          : in.status;
  }
  const int64_t last = in.first_id + static_cast<int64_t>(in.count) - 1;
  if (last >= (int64_t{1} << 31)) {
    return core::Status(core::StatusCode::kInternal, "job ids exhausted");
  }
  std::vector<int64_t> ids;
  std::vector<core::EventBody> arrived;
  ids.reserve(in.count);
  arrived.reserve(in.count);
  for (size_t i = 0; i < in.count; ++i) {
    const auto id = static_cast<int32_t>(in.first_id + i);
    ids.push_back(id);
    AddExtra(id, *jobs[i], jsons[i]);
    arrived.push_back(core::JobArrived{JobId(id), ToCoreSpec(*jobs[i])});
  }
  (void)FeedTogether(std::move(arrived));
  if (!in.status.ok()) {
    return core::Status(
        in.status.code(),
        "stored " + std::to_string(in.count) + " of the " +
            std::to_string(jobs.size()) + " jobs (ids " +
            std::to_string(in.first_id) + "-" + std::to_string(last) +
            ", submitted), not the others: " + in.status.message());
  }
  return ids;
}

core::Status SchedulerServer::Impl::CheckLiveJob(int64_t id) const {
  if (id > 0 && id < (int64_t{1} << 31) &&
      st().forgotten(JobId(static_cast<int32_t>(id)))) {
    return core::FailedPrecondition("job " + std::to_string(id) +
                                    " already ended (archived)");
  }
  if (!LiveJob(id)) return core::NotFound("no job " + std::to_string(id));
  const core::Job& j = st().job(JobId(static_cast<int32_t>(id)));
  if (core::IsTerminal(j.state)) {
    return core::FailedPrecondition(
        "job " + std::to_string(id) + " already ended (" +
        std::string(core::JobStateName(j.state)) + ")");
  }
  return core::Status::Ok();
}

std::vector<core::Status> SchedulerServer::Impl::ActOnJobs(
    std::span<const int64_t> ids, bool kill, bool hold,
    const std::string& reason, const Caller& by,
    std::vector<std::string>* notes) {
  const std::string who = by.open() ? "operator" : by.user;
  std::vector<core::Status> out(ids.size());
  std::vector<core::EventBody> events;
  std::vector<size_t> fed;          // the index in `ids` of each event's job
  std::map<int64_t, size_t> first;  // by job id: its first index
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (!first.emplace(id, i).second) continue;
    core::Status& result = out[i];
    result = CheckLiveJob(id);
    if (!result.ok()) continue;
    const JobId job(static_cast<int32_t>(id));
    result = MayActOnJob(by,
                         kill   ? "kill"
                         : hold ? "suspend"
                                : "resume",
                         id, st().job(job).spec.owner);
    if (!result.ok()) continue;
    if (kill) {
      const std::string killer = by.open() ? "user" : by.user;
      events.push_back(core::KillRequest{
          job, reason.empty()
                   ? "killed by " + killer
                   : reason + (by.open() ? "" : " (" + by.user + ")")});
    } else {
      const core::Job& j = st().job(job);
      if (!hold && !j.held) {
        result = core::FailedPrecondition("job " + std::to_string(id) +
                                          " is not suspended by an operator");
        continue;
      }
      if (hold && j.held) continue;
      History(job.value, hold ? "hold" : "release", true, 0,
              (hold ? "suspended by " : "resumed by ") + who);
      events.push_back(core::HoldRequest{job, hold});
    }
    fed.push_back(i);
  }
  const std::vector<core::Status> handled = FeedTogether(std::move(events));
  for (size_t k = 0; k < fed.size(); ++k) out[fed[k]] = handled[k];
  for (size_t i = 0; i < ids.size(); ++i) out[i] = out[first.at(ids[i])];
  if (notes != nullptr) {
    // A released job that did not run at once waits for its turn.
    notes->assign(ids.size(), "");
    for (size_t i = 0; i < ids.size() && !kill && !hold; ++i) {
      if (!out[i].ok() || !LiveJob(ids[i])) continue;
      const core::Job& j = st().job(JobId(static_cast<int32_t>(ids[i])));
      if (j.held || j.state == core::JobState::kRunning ||
          j.state == core::JobState::kMigrating || core::IsTerminal(j.state)) {
        continue;
      }
      (*notes)[i] =
          std::string(j.state == core::JobState::kQueued
                          ? "released from its hold; it is queued"
                          : "released from its hold; it waits, suspended, "
                            "for its turn on its GPUs") +
          " (gandiva show " + std::to_string(ids[i]) + " says why)";
    }
  }
  return out;
}

core::Status SchedulerServer::Impl::Mechanism(const core::MechanismRequest& m,
                                              const std::string& label) {
  GANDIVA_RETURN_IF_ERROR(CheckLiveJob(m.job.value));
  // The core says whether it can be done (how the job's work is carried
  // included: JobSpec::carrier), before anything is logged.
  GANDIVA_RETURN_IF_ERROR(sched->Check(m));
  GANDIVA_RETURN_IF_ERROR(Feed(m));
  History(m.job.value, "request", true, 0, "operator: " + label);
  return core::Status::Ok();
}

core::StatusOr<rpc::DrainReply> SchedulerServer::Impl::Drain(
    const rpc::DrainRequest& r, const Caller& by) {
  auto it = agent_by_name.find(r.server());
  if (it == agent_by_name.end() || it->second >= st().cluster().num_servers()) {
    return core::NotFound("field 'server': no server named " +
                          config::Shown(r.server()));
  }
  const ServerId sid(it->second);
  rpc::DrainReply reply;
  if (r.undo()) {
    GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{sid, false}));
  } else {
    // The core cordons the server and decides what leaves it and where.
    GANDIVA_RETURN_IF_ERROR(Feed(core::DrainRequest{sid, r.cordon_only()}));
  }
  // The operator's from now on: it stays as they left it when an away
  // agent comes back.
  if (AgentConn& a = agents[static_cast<size_t>(sid.value)]; a.away_cordon) {
    a.away_cordon = false;
    a.row_dirty = true;
  }
  Log("server " + r.server() + (r.undo() ? " opened" : " cordoned"));
  if (r.undo()) return reply;
  for (const core::DrainOutcome& o : sched->last_drain()) {
    rpc::DrainedJob* d = reply.add_jobs();
    d->set_job_id(o.job.value);
    d->set_reason(o.reason);
    using Kind = core::DrainOutcome::Kind;
    if (o.kind == Kind::kMoving) {
      d->set_moved_to(agents[static_cast<size_t>(o.to.value)].name);
    }
    d->set_unpacking(o.kind == Kind::kUnpacking);
    if (o.kind != Kind::kStays) {
      History(o.job.value, "request", true, 0,
              "operator: drain " + r.server() +
                  (by.open() ? "" : " (" + by.user + ")"));
    }
  }
  return reply;
}

namespace {

std::string Names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "anyone" : out;
}

// What changes from `was` to `now`, a line each: queues added, removed,
// and each field changed, by name.
std::vector<std::string> QueueChanges(
    const std::vector<core::QueueConfig>& was,
    const std::vector<core::QueueConfig>& now) {
  std::map<std::string, const core::QueueConfig*> before, after;
  for (const core::QueueConfig& q : was) before[q.name] = &q;
  for (const core::QueueConfig& q : now) after[q.name] = &q;
  auto weight = [](const core::QueueConfig& q) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", q.weight);
    return q.weight < 0 ? std::string("its quota") : std::string(buf);
  };
  auto limit = [](const core::QueueConfig& q) {
    return q.limit < 0 ? std::string("none") : std::to_string(q.limit);
  };
  auto top = [](const std::string& parent) {
    return parent.empty() ? std::string("(top)") : "'" + parent + "'";
  };
  auto bound = [](const std::optional<int>& p) {
    return p ? std::to_string(*p) : std::string("none");
  };
  std::vector<std::string> lines;
  for (const auto& [name, q] : before) {
    if (!after.contains(name)) lines.push_back("queue '" + name + "' removed");
  }
  for (const auto& [name, q] : after) {
    auto it = before.find(name);
    if (it == before.end()) {
      lines.push_back("queue '" + name + "' added (quota " +
                      std::to_string(q->quota) + ")");
      continue;
    }
    const core::QueueConfig& b = *it->second;
    const std::string who = "queue '" + name + "': ";
    if (b.parent != q->parent) {
      lines.push_back(who + "parent " + top(b.parent) + " -> " +
                      top(q->parent));
    }
    if (b.quota != q->quota) {
      lines.push_back(who + "quota " + std::to_string(b.quota) + " -> " +
                      std::to_string(q->quota));
    }
    if (b.weight != q->weight) {
      lines.push_back(who + "weight " + weight(b) + " -> " + weight(*q));
    }
    if (b.limit != q->limit) {
      lines.push_back(who + "limit " + limit(b) + " -> " + limit(*q));
    }
    if (b.members != q->members) {
      lines.push_back(who + "members " + Names(b.members) + " -> " +
                      Names(q->members));
    }
    if (b.max_priority != q->max_priority) {
      lines.push_back(who + "max_priority " + bound(b.max_priority) + " -> " +
                      bound(q->max_priority));
    }
  }
  return lines;
}

}  // namespace

core::StatusOr<rpc::ApplyQueuesReply> SchedulerServer::Impl::ApplyQueues(
    const rpc::ApplyQueuesRequest& r, const Caller& by) {
  const std::string source =
      r.source().empty() ? std::string("queues") : config::Shown(r.source());
  auto parsed = config::ParseQueues(r.yaml(), source);
  if (!parsed.ok()) return core::InvalidArgument(parsed.status().message());
  return ChangeQueues(std::move(*parsed), r.dry_run(),
                      "by " + by.Describe() + " from " + source);
}

core::StatusOr<rpc::ApplyQueuesReply> SchedulerServer::Impl::ChangeQueues(
    std::vector<core::QueueConfig> next, bool dry_run, std::string_view by) {
  GANDIVA_RETURN_IF_ERROR(core::CheckQueues(next));
  const std::shared_ptr<const std::vector<core::QueueConfig>> was = Queues();
  // A live job's queue stays a leaf: its jobs would go to the shared
  // queue, or to none a user may name.
  const core::QueueQuotas tree(next);
  std::map<std::string, std::vector<int32_t>> stranded;
  st().ForEachJob([&](const core::Job& j) {
    if (core::IsTerminal(j.state) || j.spec.vc.empty()) return;
    const std::optional<size_t> q = tree.Find(j.spec.vc);
    if (!q || !tree.leaf(*q)) stranded[j.spec.vc].push_back(j.id.value);
  });
  if (!stranded.empty()) {
    std::string why;
    for (const auto& [name, jobs] : stranded) {
      std::string ids;
      for (size_t i = 0; i < jobs.size() && i < 5; ++i) {
        ids += (i == 0 ? "" : ", ") + std::to_string(jobs[i]);
      }
      if (jobs.size() > 5) {
        ids += " and " + std::to_string(jobs.size() - 5) + " more";
      }
      why += std::string(why.empty() ? "" : "; ") + "queue '" + name +
             "' holds live jobs (" + ids + ") and would " +
             (tree.Find(name) ? "have queues under it" : "be removed");
    }
    return core::FailedPrecondition(
        why +
        ": keep it a queue without children until its jobs end, or "
        "kill them");
  }
  rpc::ApplyQueuesReply reply;
  for (std::string& line : QueueChanges(*was, next)) {
    reply.add_changes(std::move(line));
  }
  if (dry_run || reply.changes().empty()) return reply;
  GANDIVA_RETURN_IF_ERROR(Feed(core::QueuesChanged{next, *was}));
  // After the event: a crash in between leaves the log's change, which
  // recovery stores. In effect now, whether stored or not: stored again
  // before the log is compacted past the change (CompactLog).
  if (const core::Status s = StoreQueues(next); !s.ok()) {
    queues_unstored = true;
    Warn(
        "the queues changed, but storing them failed (tried again before "
        "the log is compacted): " +
        s.ToString());
  }
  std::string what;
  for (const std::string& line : reply.changes()) {
    what += (what.empty() ? "" : "; ") + line;
  }
  Log("queues changed " + std::string(by) + ": " + what);
  reply.set_applied(true);
  return reply;
}

core::StatusOr<int32_t> SchedulerServer::Impl::SetPriority(int64_t id,
                                                           int32_t priority,
                                                           const Caller& by) {
  GANDIVA_RETURN_IF_ERROR(CheckLiveJob(id));
  const auto job = static_cast<int32_t>(id);
  GANDIVA_RETURN_IF_ERROR(
      MayActOnJob(by, "reprioritise", id, st().job(JobId(job)).spec.owner));
  GANDIVA_RETURN_IF_ERROR(
      MayUsePriority(by, "reprioritise job " + std::to_string(id),
                     st().job(JobId(job)).spec.vc, priority, *Queues()));
  const int32_t was = st().job(JobId(job)).spec.priority;
  if (was == priority) return was;
  GANDIVA_RETURN_IF_ERROR(Feed(core::PriorityRequest{JobId(job), priority}));
  History(job, "priority", true, 0,
          "priority " + std::to_string(was) + " -> " +
              std::to_string(priority) + ", set by " +
              (by.open() ? "an operator" : by.user));
  return was;
}

grpc::Status SchedulerServer::Impl::ListJobs(const rpc::ListJobsRequest* req,
                                             rpc::ListJobsReply* rep) {
  for (int k = 0; k < req->states_size(); ++k) {
    if (!rpc::JobState_IsValid(req->states(k))) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "field 'states': " + std::to_string(req->states(k)) +
                  " is not a job state"};
    }
  }
  if (req->max_jobs() < 0 || req->max_jobs() > kMaxJobsPerPage) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'max_jobs': " + std::to_string(req->max_jobs()) +
                " is not between 0 and " + std::to_string(kMaxJobsPerPage)};
  }
  if (req->after_id() == 0) {
    const std::shared_ptr<const Snapshot> sn = Snap();
    if (sn->lost_ids) rep->set_lost_jobs(FormatIdRanges(*sn->lost_ids));
  }
  const std::set<int> states(req->states().begin(), req->states().end());
  const bool ended_too =
      req->all() || std::any_of(states.begin(), states.end(), EndState);
  const int max_jobs =
      req->max_jobs() == 0 ? kDefaultJobsPerPage : req->max_jobs();
  auto matches = [&](const rpc::JobInfo& info, const rpc::JobSpec& sp) {
    if (EndState(info.state()) && !ended_too) return false;
    if (!states.empty() && !states.contains(info.state())) return false;
    if (!req->owner().empty() && sp.owner() != req->owner()) return false;
    return req->name().empty() ||
           ::fnmatch(req->name().c_str(), sp.name().c_str(), 0) == 0;
  };
  // The archived jobs that match, read first (and outside the lock): a
  // job archived meanwhile is in memory too until the loop drops it, and
  // the memory's wins. The page holds none past `bound`, the last id
  // read from the archive (the largest id: all of it).
  std::vector<rpc::JobInfo> archived;
  int64_t bound = std::numeric_limits<int64_t>::max();
  if (req->archived() && ended_too) {
    // A name without wildcards is looked up (SQLite: by an index).
    const std::optional<std::string> exact = LiteralPattern(req->name());
    int64_t cursor = req->after_id();
    int64_t read = 0;
    for (bool more = true; more;) {
      auto rows = store->LoadArchivedJobs(cursor, kArchivedReadChunk, exact);
      if (!rows.ok()) return ToGrpc(rows.status());
      for (const JobRow& row : *rows) {
        cursor = row.id;
        ++read;
        rpc::JobInfo info = InfoOfArchived(row);
        if (matches(info, info.spec())) archived.push_back(std::move(info));
        if (static_cast<int>(archived.size()) >= max_jobs ||
            read >= kMaxArchivedReadPerPage) {
          bound = cursor;
          more = false;
          break;
        }
      }
      if (static_cast<int>(rows->size()) < kArchivedReadChunk) more = false;
    }
  }
  auto s = Snap();
  published.Read([&](const Published::View& v) {
    size_t bytes = 0;
    // Adds a job that matches; false once the page is full (it is left
    // for the next page).
    auto put = [&](rpc::JobInfo out) {
      const size_t size = out.ByteSizeLong();
      if (rep->jobs_size() >= max_jobs ||
          (rep->jobs_size() > 0 && bytes + size > kMaxPageBytes)) {
        rep->set_next_after_id(rep->jobs(rep->jobs_size() - 1).id());
        return false;
      }
      bytes += size;
      *rep->add_jobs() = std::move(out);
      return true;
    };
    // The snapshot's jobs, the settled ones and the archived ones, each in
    // id order from after_id; a job in several is the snapshot's, else the
    // settled one.
    constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
    auto a = std::upper_bound(
        s->jobs.begin(), s->jobs.end(), req->after_id(),
        [](int64_t key, const auto& entry) { return key < entry.first; });
    auto b =
        ended_too ? v.settled.upper_bound(req->after_id()) : v.settled.end();
    auto c = archived.begin();
    for (;;) {
      const int64_t ia = a != s->jobs.end() ? a->first : kEnd;
      const int64_t ib = b != v.settled.end() ? b->first : kEnd;
      const int64_t ic = c != archived.end() ? c->id() : kEnd;
      const int64_t id = std::min({ia, ib, ic});
      if (id == kEnd || id > bound) {
        // All read; or more of the archive is to be read from `bound` on.
        if (bound != kEnd) rep->set_next_after_id(bound);
        break;
      }
      bool more = true;
      if (id == ia || id == ib) {
        const rpc::JobInfo& info = id == ia ? *a->second : b->second;
        const rpc::JobSpec* spec = v.Spec(id);
        const rpc::JobSpec& sp =
            spec != nullptr ? *spec : rpc::JobSpec::default_instance();
        if (matches(info, sp)) more = put(WithSpec(v, info, s->queue.get()));
      } else {
        more = put(*c);
      }
      if (!more) break;
      if (ia == id) ++a;
      if (ib == id) ++b;
      if (ic == id) ++c;
    }
  });
  return grpc::Status::OK;
}

grpc::Status SchedulerServer::Impl::GetJob(const rpc::JobIdRequest* req,
                                           rpc::JobInfo* rep) {
  auto s = Snap();
  published.Read([&](const Published::View& v) {
    if (const rpc::JobInfo* info = s->Find(req->job_id())) {
      *rep = WithSpec(v, *info, s->queue.get());
    } else {
      auto st = v.settled.find(req->job_id());
      if (st != v.settled.end()) *rep = WithSpec(v, st->second);
    }
  });
  if (rep->id() == 0) {
    // Forgotten (--keep-ended-jobs), or never submitted.
    auto row = store->LoadJob(req->job_id());
    if (!row.ok()) return ToGrpc(row.status());
    if (!row->has_value()) {
      const int64_t id = req->job_id();
      if (auto lost =
              s->lost_ids ? FindIdRange(*s->lost_ids, id) : std::nullopt) {
        return {grpc::StatusCode::NOT_FOUND,
                "job " + std::to_string(id) +
                    " is not in this store: it was submitted after the "
                    "backup the store was restored from (" +
                    (lost->first == lost->second
                         ? std::string("its id is")
                         : "ids " + std::to_string(lost->first) + "-" +
                               std::to_string(lost->second) + " are") +
                    " not given again)"};
      }
      // Ids are dense (but for those a restore lost, above): one handed
      // out and no longer stored was deleted.
      const bool deleted = id > 0 && id < s->job_id_limit;
      return {grpc::StatusCode::NOT_FOUND,
              deleted ? "job " + std::to_string(id) +
                            " ended and its record was deleted "
                            "(--keep-archived-for)"
                      : "no job " + std::to_string(id)};
    }
    *rep = InfoOfArchived(**row);
  }
  auto h = store->History(req->job_id());
  if (!h.ok()) return ToGrpc(h.status());
  for (const HistoryRow& row : *h) {
    rpc::HistoryEntry* e = rep->add_history();
    e->set_time_us(row.time_us);
    e->set_action(row.action);
    e->set_ok(row.ok);
    e->set_took_us(row.took_us);
    e->set_detail(row.detail);
  }
  // The same failure still repeating: how often so far.
  if (auto e = streaks.SoFar(req->job_id())) *rep->add_history() = *e;
  return grpc::Status::OK;
}

}  // namespace gandiva::runtime
