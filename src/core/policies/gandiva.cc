#include "core/policies/gandiva.h"

#include <algorithm>
#include <bit>
#include <optional>

#include "core/policies/placement.h"

namespace gandiva::core {

double GandivaPolicy::PackMemoryGb(const Cluster& cluster, GpuId gpu) const {
  const double own = cluster.server(cluster.gpu(gpu).server).spec.gpu_memory_gb;
  return own > 0 ? own : options_.gpu_memory_gb;
}

void GandivaPolicy::decide(const ClusterState& state, const Event& event,
                           Actions& out) {
  if (claim_.size() < static_cast<size_t>(state.cluster().num_gpus())) {
    claim_.resize(state.cluster().num_gpus());
  }
  std::vector<GpuId> freed;
  bool place = false;
  std::visit(
      [&](const auto& e) {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, JobArrived> ||
                      std::is_same_v<E, ServerUp> ||
                      std::is_same_v<E, ServerDown> ||
                      std::is_same_v<E, CordonRequest> ||
                      std::is_same_v<E, JobFound>) {
          place = true;
        } else if constexpr (std::is_same_v<E, JobFinished> ||
                             std::is_same_v<E, KillRequest> ||
                             std::is_same_v<E, HoldRequest>) {
          freed = state.job(e.job).gpus;
          place = true;
        } else if constexpr (std::is_same_v<E, ActionDone>) {
          const Job& j = state.job(e.job);
          if (j.state == JobState::kSuspended) freed = j.gpus;
        } else if constexpr (std::is_same_v<E, ActionFailed>) {
          freed = state.job(e.job).gpus;
          place = true;
        } else if constexpr (std::is_same_v<E, PriorityRequest>) {
          const Job& j = state.job(e.job);
          if (j.state == JobState::kSuspended && !j.busy() &&
              !j.awaits_start_retry(state.now())) {
            PreemptFor(state, j, /*tick=*/false, out);
          }
          place = true;
        } else if constexpr (std::is_same_v<E, Tick>) {
          if (options_.packing) {
            // Judge packs whose last report came before they settled.
            std::vector<JobId> packed(packed_.begin(), packed_.end());
            for (JobId id : packed) {
              const Job& j = state.job(id);
              if (!j.packed_with.valid()) {
                packed_.erase(id);
              } else {
                JudgePack(state, j, out);
              }
            }
            TryPack(state, out);
          }
          Rotate(state, out);
          place = true;
        } else if constexpr (std::is_same_v<E, ProfileReport>) {
          if (options_.packing) JudgePack(state, state.job(e.job), out);
        } else if constexpr (std::is_same_v<E, MechanismRequest>) {
          // An operator's request was carried out (the core refuses the
          // others before the policy sees them).
          const Job& j = state.job(e.job);
          using K = MechanismRequest::Kind;
          if (e.kind == K::kMigrate) {
            freed = j.migrating_from;
            place = true;
          } else if (e.kind == K::kPack) {
            packed_.insert(e.job);
          } else if (e.kind == K::kUnpack && j.packed_with.valid()) {
            // The operator judged this pair: never re-form it by itself.
            bad_pairs_.insert(PairKey(j.id, j.packed_with));
          }
        } else if constexpr (std::is_same_v<E, DrainRequest>) {
          // The server is cordoned, and the core took the drain's moves and
          // unpacks: as for the same operator's requests one by one.
          place = true;
          for (const Action& a : out.taken()) {
            const Job& j = state.job(a.job);
            if (a.kind == ActionKind::kMigrate) {
              freed.insert(freed.end(), j.migrating_from.begin(),
                           j.migrating_from.end());
            } else if (a.kind == ActionKind::kUnpack && j.packed_with.valid()) {
              bad_pairs_.insert(PairKey(j.id, j.packed_with));
            }
          }
        }
      },
      event.body);
  if (options_.grow_shrink) {
    if (const auto* a = std::get_if<JobArrived>(&event.body)) {
      if (a->spec.elastic) elastic_.insert(a->id);
    }
    // A shrink that completed frees GPUs for whoever waits.
    if (const auto* d = std::get_if<ActionDone>(&event.body)) {
      const Job& j = state.job(d->job);
      if (grown_.count(j.id) &&
          static_cast<int>(j.gpus.size()) == j.spec.gpus) {
        grown_.erase(j.id);
        place = true;
      }
    }
  }
  if (!freed.empty()) FillIdle(state, freed, out);
  if (place) PlaceQueued(state, out);
  // After placement: only demand that placement could not meet shrinks.
  if (options_.grow_shrink) {
    GrowShrink(state, std::holds_alternative<Tick>(event.body), out);
  }
  if (options_.consolidate || options_.defrag) {
    // A job suspended to be moved moves now.
    if (const auto* d = std::get_if<ActionDone>(&event.body)) {
      const Job& j = state.job(d->job);
      if (moving_.count(j.id) && j.state == JobState::kSuspended) {
        moving_.erase(j.id);
        if (!j.busy() && !j.held) MoveJob(state, j, out);
      }
    }
    const bool departure = std::holds_alternative<JobFinished>(event.body) ||
                           std::holds_alternative<KillRequest>(event.body);
    const bool tick = std::holds_alternative<Tick>(event.body);
    if (options_.consolidate && (departure || tick)) Consolidate(state, out);
    if (options_.defrag && tick) Defragment(state, out);
  }
  if (place || !freed.empty()) PullWaiting(state, out);
  if (options_.consolidate) {
    for (const Action& a : out.taken()) {
      if ((a.kind == ActionKind::kStart || a.kind == ActionKind::kMigrate ||
           a.kind == ActionKind::kResume) &&
          !a.gpus.empty() && IsSplit(state.cluster(), a.gpus)) {
        split_.insert(a.job);
      }
    }
    if (const auto* ar = std::get_if<JobArrived>(&event.body)) {
      const Job& j = state.job(ar->id);
      if (j.placed() && IsSplit(state.cluster(), j.gpus)) split_.insert(j.id);
    }
  }
}

std::optional<std::vector<GpuId>> GandivaPolicy::FindFree(
    const Cluster& cluster, int d, bool allow_split) const {
  std::optional<std::vector<GpuId>> gpus;
  auto take_free = [&](const Server& s) {
    gpus = FreeGpusOn(cluster, s, d);
    return gpus.has_value();
  };
  cluster.ForEachWithAffinityAndFree(d, d, take_free);
  if (!gpus) cluster.ForEachWithAffinityAndFree(0, d, take_free);
  if (!gpus) cluster.ForEachWithFree(d, take_free);
  if (!gpus && allow_split) gpus = GatherFreeGpus(cluster, d);
  return gpus;
}

void GandivaPolicy::PullWaiting(const ClusterState& state, Actions& out) {
  const Cluster& cluster = state.cluster();
  if (!options_.migrate_to_idle || state.waiting().empty() ||
      cluster.free_gpus() == 0) {
    return;
  }
  std::array<bool, kMaxLog2Gpus> blocked{};
  // The waiting jobs in order, those of sizes that cannot fit now (more
  // than the free GPUs, or tried in vain) passed over: the next is the
  // first after the last one taken among the heads of the open sizes.
  const auto& sizes = state.waiting_by_size();
  std::optional<JobOrder> last;
  while (true) {
    const int free = cluster.free_gpus();
    if (free == 0) return;
    const JobOrder* next = nullptr;
    for (int k = 0; k < kMaxLog2Gpus && (1 << k) <= free; ++k) {
      if (blocked[k] || sizes[k].empty()) continue;
      auto it = last ? sizes[k].upper_bound(*last) : sizes[k].begin();
      if (it != sizes[k].end() && (next == nullptr || *it < *next)) {
        next = &*it;
      }
    }
    // No size that could still fit is left untried.
    if (next == nullptr) return;
    last = *next;
    const JobId id = next->id;
    const Job& j = state.job(id);
    if (j.state != JobState::kSuspended || j.busy()) continue;
    if (j.launched && j.immovable) continue;
    // A move of it failed lately: not again yet (it may resume in place).
    if (j.launched && state.now() < j.move_retry_at) continue;
    const int d = static_cast<int>(j.gpus.size());
    const int k = std::countr_zero(static_cast<unsigned>(d));
    if (d > free || blocked[k]) continue;
    // Whole servers for jobs larger than one; else steps 1-3, never split
    // (a split job would be slower than its wait for a slice).
    std::optional<std::vector<GpuId>> gpus;
    if (d <= cluster.max_server_gpus()) {
      gpus = FindFree(cluster, d, /*allow_split=*/false);
    } else {
      std::vector<GpuId> acc;
      cluster.ForEachWithAffinity(0, [&](const Server& s) {
        for (GpuId g : cluster.GpusOf(s.id)) {
          if (static_cast<int>(acc.size()) < d) acc.push_back(g);
        }
        return static_cast<int>(acc.size()) >= d;
      });
      if (static_cast<int>(acc.size()) >= d) gpus = std::move(acc);
    }
    if (!gpus) {
      blocked[k] = true;
      continue;
    }
    out.Migrate(id, std::move(*gpus));
  }
}

void GandivaPolicy::PlaceQueued(const ClusterState& state, Actions& out) {
  // Walk each size class in queue order; within a class, once its first job
  // cannot be placed the later ones (same demand, less waiting) cannot
  // either. Across classes, the best head goes first.
  const auto& classes = state.queue_by_size();
  std::array<bool, kMaxLog2Gpus> blocked{};
  while (true) {
    const JobOrder* best = nullptr;
    int best_class = -1;
    for (int k = 0; k < kMaxLog2Gpus; ++k) {
      if (blocked[k] || classes[k].empty()) continue;
      const JobOrder& head = *classes[k].begin();
      if (best == nullptr || head < *best) {
        best = &head;
        best_class = k;
      }
    }
    if (best == nullptr) return;
    const JobId id = best->id;
    if (!Place(state, state.job(id), out)) blocked[best_class] = true;
  }
}

bool GandivaPolicy::UnderCap(const Server& s, int more) const {
  return options_.max_height <= 0 ||
         s.demand + more <= options_.max_height * s.num_gpus();
}

std::optional<GandivaPolicy::Placement> GandivaPolicy::FindPlace(
    const ClusterState& state, const Job& job) const {
  const Cluster& cluster = state.cluster();
  const int d = job.spec.gpus;
  std::optional<std::vector<GpuId>> gpus;
  const bool starving =
      !options_.starvation_timeout.is_infinite() &&
      state.now() - job.waiting_since >= options_.starvation_timeout;

  if (d <= cluster.max_server_gpus()) {
    // 1. Same affinity with room, least loaded first; 2. an empty server;
    // 3. any free GPUs: one server, best fit, else across servers.
    gpus = FindFree(cluster, d, options_.allow_split);
    if (gpus) return Placement{std::move(*gpus), /*shared=*/false};
    if (!options_.time_slicing) return std::nullopt;
    // 4. Time-slice with jobs of the same affinity, least loaded first.
    auto share = [&](const Server& s) {
      if (s.num_gpus() < d || !UnderCap(s, d)) return false;
      gpus = LeastLoadedBlock(cluster, s, d);
      return true;
    };
    // (Only servers under the cap are visited.)
    cluster.ForEachWithRoom(d, d, options_.max_height, d, share);
    if (!gpus && starving) {
      cluster.ForEachWithRoom(Cluster::kAnyAffinity, d, options_.max_height, d,
                              share);
    }
  } else {
    // Larger than any server: whole servers.
    std::vector<GpuId> acc;
    auto take_whole = [&](const Server& s) {
      for (GpuId g : cluster.GpusOf(s.id)) {
        if (static_cast<int>(acc.size()) < d) acc.push_back(g);
      }
      return static_cast<int>(acc.size()) >= d;
    };
    // 2. Empty servers.
    cluster.ForEachWithAffinity(0, take_whole);
    if (static_cast<int>(acc.size()) >= d) gpus = std::move(acc);
    // 3. Free GPUs anywhere.
    if (!gpus) gpus = GatherFreeGpus(cluster, d);
    if (gpus) return Placement{std::move(*gpus), /*shared=*/false};
    if (!options_.time_slicing) return std::nullopt;
    // 4. Share whole servers of the same affinity (then any, if starving).
    auto share_whole = [&](const Server& s) {
      if (!UnderCap(s, s.num_gpus())) return false;
      return take_whole(s);
    };
    acc.clear();
    cluster.ForEachWithRoom(d, 0, options_.max_height, -1, share_whole);
    if (static_cast<int>(acc.size()) < d && starving) {
      acc.clear();
      cluster.ForEachWithRoom(Cluster::kAnyAffinity, 0, options_.max_height, -1,
                              share_whole);
    }
    if (static_cast<int>(acc.size()) >= d) gpus = std::move(acc);
  }
  if (!gpus) return std::nullopt;
  return Placement{std::move(*gpus), /*shared=*/true};
}

bool GandivaPolicy::Place(const ClusterState& state, const Job& job,
                          Actions& out) {
  auto place = PlaceAvoidingFailedStarts(state.cluster(), job,
                                         [&] { return FindPlace(state, job); });
  if (!place) return false;
  if (!place->shared) {
    out.Start(job.id, std::move(place->gpus));
    return true;
  }
  std::vector<GpuId> placed = place->gpus;
  out.Assign(job.id, std::move(place->gpus));
  FillIdle(state, placed, out);
  const Job& now = state.job(job.id);
  if (now.state == JobState::kSuspended) PreemptFor(state, now, false, out);
  return true;
}

bool GandivaPolicy::ClaimedByOther(const ClusterState& state, GpuId gpu,
                                   JobId job) const {
  const JobId c = claim_[gpu.value];
  if (!c.valid() || c == job) return false;
  const Job& claimant = state.job(c);
  return claimant.state == JobState::kSuspended && !claimant.busy() &&
         !claimant.awaits_start_retry(state.now());
}

void GandivaPolicy::FillIdle(const ClusterState& state,
                             const std::vector<GpuId>& gpus, Actions& out) {
  const Cluster& cluster = state.cluster();
  std::vector<JobOrder> candidates;
  for (GpuId g : gpus) {
    if (cluster.gpu(g).active > 0) continue;
    for (JobId id : cluster.gpu(g).jobs) {
      const Job& j = state.job(id);
      if (j.state == JobState::kSuspended && !j.busy() && !j.held &&
          !j.awaits_start_retry(state.now()) && !moving_.count(j.id)) {
        candidates.push_back({-j.spec.priority, j.waiting_since, j.id});
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()),
                   candidates.end());
  for (const JobOrder& c : candidates) {
    const Job& j = state.job(c.id);
    if (j.state != JobState::kSuspended || j.busy()) continue;
    bool can = true;
    for (GpuId g : j.gpus) {
      if (cluster.gpu(g).active > 0 || ClaimedByOther(state, g, j.id)) {
        can = false;
        break;
      }
    }
    if (can) out.Run(j.id);
  }
}

void GandivaPolicy::PreemptFor(const ClusterState& state, const Job& job,
                               bool tick, Actions& out) {
  const Cluster& cluster = state.cluster();
  std::vector<JobId> victims;
  bool allowed = true;
  bool all_lower = true;
  for (GpuId g : job.gpus) {
    for (JobId id : cluster.gpu(g).jobs) {
      const Job& v = state.job(id);
      if (v.state != JobState::kRunning) continue;
      if (std::find(victims.begin(), victims.end(), id) != victims.end()) {
        continue;
      }
      victims.push_back(id);
      if (v.spec.priority > job.spec.priority) allowed = false;
      if (v.spec.priority >= job.spec.priority) all_lower = false;
    }
  }
  if (!allowed) return;
  if (!tick && !all_lower) return;
  if (tick) {
    for (GpuId g : job.gpus) {
      if (!ClaimedByOther(state, g, job.id)) claim_[g.value] = job.id;
    }
  }
  if (victims.empty()) {
    FillIdle(state, job.gpus, out);
    return;
  }
  for (JobId id : victims) {
    const Job& v = state.job(id);
    if (v.busy()) continue;
    // A packed pair shares one slice: it is due when its older member is.
    Time since = v.run_since;
    if (v.packed_with.valid()) {
      since = std::min(since, state.job(v.packed_with).run_since);
    }
    const bool due = tick && v.spec.priority == job.spec.priority &&
                     state.now() - since >= options_.quantum / 2;
    if (v.spec.priority < job.spec.priority || due) out.Suspend(id);
  }
}

void GandivaPolicy::Rotate(const ClusterState& state, Actions& out) {
  std::fill(claim_.begin(), claim_.end(), JobId());
  // Copy: suspending changes nothing in waiting(), but be safe against
  // FillIdle running jobs (which leaves the set) while we walk it.
  std::vector<JobId> order;
  order.reserve(state.waiting().size());
  for (const JobOrder& w : state.waiting()) order.push_back(w.id);
  for (JobId id : order) {
    const Job& j = state.job(id);
    if (j.state != JobState::kSuspended || j.busy()) continue;
    bool claimed = false;
    for (GpuId g : j.gpus) claimed = claimed || ClaimedByOther(state, g, id);
    if (claimed) continue;
    PreemptFor(state, j, /*tick=*/true, out);
  }
}

}  // namespace gandiva::core

namespace gandiva::core {

void GandivaPolicy::JudgePack(const ClusterState& state, const Job& job,
                              Actions& out) {
  if (!job.packed_with.valid() || job.state != JobState::kRunning ||
      job.busy()) {
    return;
  }
  const Job& peer = state.job(job.packed_with);
  if (peer.busy() || peer.packed_with != job.id) return;
  const auto key = PairKey(job.id, peer.id);
  if (good_pairs_.count(key)) return;
  if (state.now() - job.packed_since < options_.pack_settle) return;
  const Profile& a = job.profile;
  const Profile& b = peer.profile;
  const int alone = std::max(1, options_.pack_min_alone_reports);
  if (a.packed_reports < options_.pack_reports ||
      b.packed_reports < options_.pack_reports || a.alone_reports < alone ||
      b.alone_reports < alone || a.rate_alone <= 0 || b.rate_alone <= 0) {
    return;
  }
  const double packed =
      a.rate_packed / a.rate_alone + b.rate_packed / b.rate_alone;
  if (packed > options_.pack_keep_above) {
    good_pairs_.insert(key);
    return;
  }
  bad_pairs_.insert(key);
  // Undo: the job that joined last leaves.
  out.Unpack(job.run_since >= peer.run_since ? job.id : peer.id);
}

void GandivaPolicy::TryPack(const ClusterState& state, Actions& out) {
  const Cluster& cluster = state.cluster();
  if (!cluster.overloaded()) return;
  struct Candidate {
    double peer_util, job_util;
    JobId job, peer;
    auto operator<=>(const Candidate&) const = default;
  };
  std::vector<Candidate> candidates;
  for (const JobOrder& w : state.waiting()) {
    const Job& j = state.job(w.id);
    if (!j.launched ||
        j.profile.alone_reports <
            std::max(1, options_.pack_min_alone_reports) ||
        static_cast<int>(j.gpus.size()) != j.spec.gpus) {
      continue;
    }
    // Packing must not jump the time-slicing queue: only the first waiting
    // job of these GPUs may join the one running there.
    const JobOrder mine{-j.spec.priority, j.waiting_since, j.id};
    bool first = true;
    for (JobId id : cluster.gpu(j.gpus[0]).jobs) {
      const Job& o = state.job(id);
      if (o.state == JobState::kSuspended && !o.busy() && !o.held &&
          !o.awaits_start_retry(state.now()) &&
          JobOrder{-o.spec.priority, o.waiting_since, o.id} < mine) {
        first = false;
        break;
      }
    }
    if (!first) continue;
    // The one job running on exactly these GPUs.
    JobId peer;
    bool single = true;
    for (JobId id : cluster.gpu(j.gpus[0]).jobs) {
      const Job& p = state.job(id);
      if (p.state != JobState::kRunning) continue;
      if (peer.valid()) single = false;
      peer = id;
    }
    if (!peer.valid() || !single) continue;
    const Job& p = state.job(peer);
    if (p.busy() || p.packed_with.valid() || p.gpus != j.gpus ||
        p.profile.alone_reports <
            std::max(1, options_.pack_min_alone_reports) ||
        p.spec.priority != j.spec.priority ||
        bad_pairs_.count(PairKey(j.id, p.id)) ||
        j.profile.gpu_memory_gb + p.profile.gpu_memory_gb >
            PackMemoryGb(cluster, j.gpus[0])) {
      continue;
    }
    candidates.push_back(
        {p.profile.gpu_utilization, j.profile.gpu_utilization, j.id, p.id});
  }
  std::sort(candidates.begin(), candidates.end());
  for (const Candidate& c : candidates) {
    const Job& j = state.job(c.job);
    const Job& p = state.job(c.peer);
    // Earlier packs in this round may have taken either.
    if (j.state != JobState::kSuspended || j.busy() ||
        p.state != JobState::kRunning || p.busy() || p.packed_with.valid()) {
      continue;
    }
    out.Pack(c.job, c.peer);
    packed_.insert(c.job);
  }
}

}  // namespace gandiva::core

namespace gandiva::core {

void GandivaPolicy::GrowShrink(const ClusterState& state, bool tick,
                               Actions& out) {
  const Cluster& cluster = state.cluster();
  const bool demand = !state.queue().empty() || !state.waiting().empty();
  if (demand) {
    idle_since_ = Time::Never();
    // Shrink at once: back to the aligned block it asked for.
    for (JobId id : std::vector<JobId>(grown_.begin(), grown_.end())) {
      const Job& j = state.job(id);
      if (IsTerminal(j.state)) {
        grown_.erase(id);
        continue;
      }
      if (j.state != JobState::kRunning || j.busy() ||
          static_cast<int>(j.gpus.size()) <= j.spec.gpus) {
        continue;
      }
      std::vector<GpuId> keep = j.gpus;
      std::sort(keep.begin(), keep.end());
      keep.resize(j.spec.gpus);
      out.Resize(id, std::move(keep));
    }
    return;
  }
  if (!tick) return;
  if (cluster.free_gpus() == 0) {
    idle_since_ = Time::Never();
    return;
  }
  if (idle_since_ == Time::Never()) idle_since_ = state.now();
  if (state.now() - idle_since_ < options_.grow_idle_timeout) return;
  for (JobId id : std::vector<JobId>(elastic_.begin(), elastic_.end())) {
    const Job& j = state.job(id);
    if (IsTerminal(j.state)) {
      elastic_.erase(id);
      continue;
    }
    if (j.state != JobState::kRunning || j.busy() || j.held ||
        j.packed_with.valid() || state.now() < j.move_retry_at) {
      continue;
    }
    std::vector<GpuId> gpus = j.gpus;
    std::sort(gpus.begin(), gpus.end());
    const Server& s = cluster.server(cluster.gpu(gpus[0]).server);
    const int g = static_cast<int>(gpus.size());
    if (s.cordoned || 2 * g > s.num_gpus() ||
        cluster.SpreadOf(gpus) == Spread::kAcrossServers) {
      continue;
    }
    // The aligned block of 2g GPUs holding its own (which must be aligned).
    const int local = cluster.gpu(gpus[0]).local;
    if (local % g != 0) continue;
    const int base = local - local % (2 * g);
    std::vector<GpuId> block;
    bool ok = true;
    for (int i = base; i < base + 2 * g && ok; ++i) {
      const GpuId gid(s.first_gpu.value + i);
      const bool mine = std::binary_search(gpus.begin(), gpus.end(), gid);
      ok = mine || cluster.gpu(gid).jobs.empty();
      block.push_back(gid);
    }
    if (!ok) continue;
    out.Resize(id, std::move(block));
    grown_.insert(id);
  }
}

}  // namespace gandiva::core

namespace gandiva::core {

bool GandivaPolicy::IsSplit(const Cluster& cluster,
                            const std::vector<GpuId>& gpus) const {
  if (gpus.empty()) return false;
  const Spread actual = cluster.SpreadOf(gpus);
  const ServerSpec& spec = cluster.server(cluster.gpu(gpus[0]).server).spec;
  const int d = static_cast<int>(gpus.size());
  const int per_socket = spec.gpus / spec.sockets;
  const int per_switch = per_socket / spec.switches_per_socket;
  if (d > spec.gpus) {
    std::vector<int32_t> servers;
    for (GpuId g : gpus) servers.push_back(cluster.gpu(g).server.value);
    std::sort(servers.begin(), servers.end());
    const auto distinct =
        std::unique(servers.begin(), servers.end()) - servers.begin();
    return distinct > (d + spec.gpus - 1) / spec.gpus;
  }
  const Spread ideal = d <= per_switch   ? Spread::kSameSwitch
                       : d <= per_socket ? Spread::kAcrossSwitches
                                         : Spread::kAcrossSockets;
  return actual > ideal;
}

std::optional<std::vector<GpuId>> GandivaPolicy::GoodPlace(
    const Cluster& cluster, int d, int avoid_server,
    bool only_busy_servers) const {
  std::optional<std::vector<GpuId>> gpus;
  auto try_server = [&](const Server& s) {
    if (s.id.value == avoid_server) return false;
    if (only_busy_servers &&
        (s.jobs == 0 || 4 * s.free_gpus >= 3 * s.num_gpus())) {
      return false;
    }
    auto g = FreeGpusOn(cluster, s, d);
    if (g && !IsSplit(cluster, *g)) gpus = std::move(g);
    return gpus.has_value();
  };
  if (d <= cluster.max_server_gpus()) {
    cluster.ForEachWithAffinityAndFree(d, d, try_server);
    if (!gpus && !only_busy_servers) {
      cluster.ForEachWithAffinityAndFree(0, d, try_server);
    }
    if (!gpus) cluster.ForEachWithFree(d, try_server);
    return gpus;
  }
  if (only_busy_servers) return std::nullopt;
  std::vector<GpuId> acc;
  cluster.ForEachWithAffinity(0, [&](const Server& s) {
    for (GpuId g : cluster.GpusOf(s.id)) {
      if (static_cast<int>(acc.size()) < d) acc.push_back(g);
    }
    return static_cast<int>(acc.size()) >= d;
  });
  if (static_cast<int>(acc.size()) >= d) return acc;
  return std::nullopt;
}

void GandivaPolicy::MoveJob(const ClusterState& state, const Job& job,
                            Actions& out) {
  if (job.busy() || job.held || job.packed_with.valid() || job.immovable ||
      state.now() < job.move_retry_at) {
    return;
  }
  const Cluster& cluster = state.cluster();
  const int d = static_cast<int>(job.gpus.size());
  const int here = cluster.gpu(job.gpus[0]).server.value;
  const bool split = IsSplit(cluster, job.gpus);
  // Consolidating: anywhere good; defragmenting: off its server, onto a
  // server that is busy and not fragmented itself.
  auto target = GoodPlace(cluster, d, split ? -1 : here, !split);
  if (!target) return;
  if (job.state == JobState::kSuspended) {
    out.Migrate(job.id, std::move(*target));
    split_.erase(job.id);
  } else if (job.state == JobState::kRunning) {
    out.Suspend(job.id);
    moving_.insert(job.id);
  }
}

void GandivaPolicy::Consolidate(const ClusterState& state, Actions& out) {
  for (JobId id : std::vector<JobId>(split_.begin(), split_.end())) {
    const Job& j = state.job(id);
    if (!j.placed() || !IsSplit(state.cluster(), j.gpus)) {
      split_.erase(id);
      continue;
    }
    if (moving_.count(id)) continue;
    MoveJob(state, j, out);
  }
}

void GandivaPolicy::Defragment(const ClusterState& state, Actions& out) {
  if (state.queue().empty()) return;
  const Cluster& cluster = state.cluster();
  int moves = 0;
  std::vector<ServerId> fragmented;
  cluster.ForEachWithFreeDescending([&](const Server& s) {
    if (4 * s.free_gpus < 3 * s.num_gpus()) return true;  // none further
    if (s.jobs > 0) fragmented.push_back(s.id);
    return false;
  });
  for (ServerId sid : fragmented) {
    std::vector<JobId> jobs;
    for (GpuId g : cluster.GpusOf(sid)) {
      for (JobId id : cluster.gpu(g).jobs) {
        if (std::find(jobs.begin(), jobs.end(), id) == jobs.end()) {
          jobs.push_back(id);
        }
      }
    }
    for (JobId id : jobs) {
      if (moves >= options_.defrag_moves_per_tick) return;
      const Job& j = state.job(id);
      if (moving_.count(id) || j.busy() || j.held || j.packed_with.valid()) {
        continue;
      }
      const size_t before = out.taken().size();
      MoveJob(state, j, out);
      if (out.taken().size() > before) ++moves;
    }
  }
}

namespace {

void SavePairs(SnapshotWriter& w,
               const std::set<std::pair<int32_t, int32_t>>& s) {
  w.I64(static_cast<int64_t>(s.size()));
  for (const auto& [a, b] : s) {
    w.I32(a);
    w.I32(b);
  }
}

std::set<std::pair<int32_t, int32_t>> LoadPairs(SnapshotReader& r) {
  std::set<std::pair<int32_t, int32_t>> s;
  const int64_t n = r.Count(8);
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    const int32_t a = r.I32();
    s.insert({a, r.I32()});
  }
  return s;
}

}  // namespace

void GandivaPolicy::Forget(const ClusterState& /*state*/,
                           std::span<const JobId> jobs) {
  const std::set<JobId> gone(jobs.begin(), jobs.end());
  for (JobId& c : claim_) {
    if (gone.contains(c)) c = JobId();
  }
  for (auto* pairs : {&bad_pairs_, &good_pairs_}) {
    std::erase_if(*pairs, [&](const std::pair<int32_t, int32_t>& p) {
      return gone.contains(JobId(p.first)) || gone.contains(JobId(p.second));
    });
  }
  for (auto* ids : {&packed_, &elastic_, &grown_, &split_, &moving_}) {
    for (JobId id : jobs) ids->erase(id);
  }
}

void GandivaPolicy::SaveState(SnapshotWriter& w) const {
  w.Ids(claim_);
  SavePairs(w, bad_pairs_);
  SavePairs(w, good_pairs_);
  w.IdSet(packed_);
  w.IdSet(elastic_);
  w.IdSet(grown_);
  w.At(idle_since_);
  w.IdSet(split_);
  w.IdSet(moving_);
}

void GandivaPolicy::LoadState(SnapshotReader& r) {
  auto claim = r.Ids<JobId>();
  auto bad = LoadPairs(r);
  auto good = LoadPairs(r);
  auto packed = r.IdSet<JobId>();
  auto elastic = r.IdSet<JobId>();
  auto grown = r.IdSet<JobId>();
  const Time idle_since = r.At();
  auto split = r.IdSet<JobId>();
  auto moving = r.IdSet<JobId>();
  if (!r.ok() || !r.at_end()) return;
  claim_ = std::move(claim);
  bad_pairs_ = std::move(bad);
  good_pairs_ = std::move(good);
  packed_ = std::move(packed);
  elastic_ = std::move(elastic);
  grown_ = std::move(grown);
  idle_since_ = idle_since;
  split_ = std::move(split);
  moving_ = std::move(moving);
}

}  // namespace gandiva::core
