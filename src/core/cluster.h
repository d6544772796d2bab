// The cluster as the scheduler sees it: servers of GPUs with their topology
// inside a server (CPU sockets, PCIe switches), which jobs are placed on each
// GPU and which of them run there now, and the Gandiva quantities derived from
// that: a server's height and affinity, and the cluster's height.
//
// Height of a server = ceil(M / N): M GPUs demanded by the jobs placed on it
// (suspended ones included), N its GPUs. Affinity = the GPU count of the jobs
// placed on it, set by the first job placed on an empty server, 0 when empty.
//
// Placement changes go through the Scheduler only (it keeps the indexes that
// make placement O(log servers)); policies read. Thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ids.h"

namespace gandiva::core {

class SnapshotReader;
class SnapshotWriter;

// A server's hardware. GPUs are split evenly over sockets, and each socket's
// GPUs evenly over its PCIe switches.
struct ServerSpec {
  std::string name;
  int gpus = 4;
  int sockets = 1;
  int switches_per_socket = 1;
  // Each GPU's memory in GiB (the smallest, if they differ); 0: unknown
  // (policies then use their own default). Packing checks jobs' measured
  // memory against it.
  double gpu_memory_gb = 0;
  // Why an image of a process cannot be saved here (CRIU unusable, and
  // what was found); empty: it can. Jobs carried only so
  // (Carrier::kProcessImage) move only between servers where it can.
  // ServerUp of a server coming back brings it up to date.
  std::string process_images_unusable = {};
};

// Empty when valid, else names the field and the problem.
std::string ValidateServerSpec(const ServerSpec& spec);

// How far apart a set of GPUs is, nearest first.
enum class Spread : uint8_t {
  kSameSwitch,
  kAcrossSwitches,  // one socket, several PCIe switches
  kAcrossSockets,   // one server, several sockets
  kAcrossServers,
};
const char* SpreadName(Spread s);

struct Gpu {
  GpuId id;
  ServerId server;
  int local = 0;  // index inside its server
  int socket = 0;
  int pcie_switch = 0;  // index inside its server
  // Jobs placed here (running or suspended), in placement order.
  std::vector<JobId> jobs;
  // How many of them hold it actively now (more than one when packed).
  int active = 0;
};

struct Server {
  ServerId id;
  ServerSpec spec;
  GpuId first_gpu;
  bool up = true;
  // Cordoned by an operator (drain): nothing new is placed here; the jobs
  // placed here stay (and time-slice) until they end or are moved.
  bool cordoned = false;
  // M: GPUs demanded here by the jobs placed here, suspended ones included.
  int demand = 0;
  // GPUs with no job placed on them.
  int free_gpus = 0;
  int affinity = 0;
  int jobs = 0;

  int num_gpus() const { return spec.gpus; }
  // ceil(M / N); 0 when empty.
  int height() const { return (demand + spec.gpus - 1) / spec.gpus; }
};

class Cluster {
 public:
  Cluster() = default;

  // Adds a server; its GPUs take the next GPU ids. The spec must be valid.
  ServerId AddServer(const ServerSpec& spec);

  int num_servers() const { return static_cast<int>(servers_.size()); }
  int num_gpus() const { return static_cast<int>(gpus_.size()); }
  // The most GPUs any one server has.
  int max_server_gpus() const { return max_server_gpus_; }
  // GPUs on servers that are up.
  int up_gpus() const { return up_gpus_; }
  // Up GPUs with no job placed on them, on servers that are not cordoned:
  // where new placements can go.
  int free_gpus() const { return free_gpus_; }
  const Server& server(ServerId id) const { return servers_[id.value]; }
  const Gpu& gpu(GpuId id) const { return gpus_[id.value]; }
  std::span<const Server> servers() const { return servers_; }
  std::span<const Gpu> gpus() const { return gpus_; }
  // GPU ids of a server, in local order.
  std::vector<GpuId> GpusOf(ServerId id) const;

  // Max server height over servers that are up; 0 for an idle cluster.
  int height() const;
  bool overloaded() const { return height() > 1; }

  Spread SpreadOf(std::span<const GpuId> gpus) const;
  // Whether a job's processes on `a` would be laid out as on `b`: the same
  // servers in the same order (of first appearance, the order of a job's
  // parts: the first is its rank 0), with the same GPUs in the same order
  // on each. A process goes on in place only where it is laid out alike.
  bool SameLayout(std::span<const GpuId> a, std::span<const GpuId> b) const;
  // Some GPU of `s` has `job` placed on it.
  bool Holds(const Server& s, JobId job) const;

  // Ordered views for placement. Each calls f(const Server&) in order and
  // stops early when f returns true. Servers that are down or cordoned are
  // never visited, nor those an Avoiding scope names.
  //
  // Servers of one affinity (0 = empty servers), least demand first.
  template <typename F>
  void ForEachWithAffinity(int affinity, F&& f) const {
    ForEachWithAffinityAndFree(affinity, 0, f);
  }
  // The servers ForEachWithAffinity visits, in its order, that have at
  // least `min_free` free GPUs: a caller that accepts no other server
  // visits only these (the cost of a call is the servers visited, not the
  // servers of that affinity).
  template <typename F>
  void ForEachWithAffinityAndFree(int affinity, int min_free, F&& f) const {
    Ranges ranges;
    // One run of (affinity, free) per free count, each by (demand, id).
    for (auto it =
             by_affinity_free_.lower_bound({affinity, min_free, kMin, kMin});
         it != by_affinity_free_.end() && std::get<0>(*it) == affinity;) {
      auto end = by_affinity_free_.lower_bound(
          {affinity, std::get<1>(*it) + 1, kMin, kMin});
      ranges.push_back({it, end});
      it = end;
    }
    VisitMerged(ranges, f);
  }
  // Servers with at least `min_free` free GPUs, fewest free first (best fit).
  template <typename F>
  void ForEachWithFree(int min_free, F&& f) const {
    for (auto it = by_free_.lower_bound({min_free, -1}); it != by_free_.end();
         ++it) {
      if (!Avoided(it->second) && f(servers_[it->second])) return;
    }
  }
  // Servers with free GPUs, most free first.
  template <typename F>
  void ForEachWithFreeDescending(F&& f) const {
    for (auto it = by_free_.rbegin(); it != by_free_.rend(); ++it) {
      if (!Avoided(it->second) && f(servers_[it->second])) return;
    }
  }
  // All up servers, least demand first.
  template <typename F>
  void ForEachByDemand(F&& f) const {
    ForEachWithRoom(kAnyAffinity, 0, 0, 0, f);
  }
  // The servers ForEachWithAffinity(affinity) visits (with kAnyAffinity,
  // those ForEachByDemand visits), in its order, that have at least
  // `min_gpus` GPUs and room for `more` more GPUs of demand (more < 0: as
  // many as the server has) within `max_height` per GPU: demand + more <=
  // max_height x GPUs (max_height <= 0: no limit). Costs the servers
  // visited, as ForEachWithAffinityAndFree.
  static constexpr int kAnyAffinity = -1;
  template <typename F>
  void ForEachWithRoom(int affinity, int min_gpus, int max_height, int more,
                       F&& f) const {
    const auto& index =
        affinity == kAnyAffinity ? by_size_demand_ : by_size_affinity_;
    const int a = affinity == kAnyAffinity ? 0 : affinity;
    Ranges ranges;
    // One run per server size, each by (demand, id): a prefix of it fits.
    for (auto it = index.lower_bound({min_gpus, kMin, kMin, kMin});
         it != index.end();) {
      const int gpus = std::get<0>(*it);
      auto first = index.lower_bound({gpus, a, kMin, kMin});
      const int64_t limit = max_height <= 0
                                ? kMax
                                : static_cast<int64_t>(max_height) * gpus -
                                      (more < 0 ? gpus : more);
      auto end =
          limit < kMin
              ? first
              : index.upper_bound(
                    {gpus, a, static_cast<int>(std::min<int64_t>(limit, kMax)),
                     kMax});
      if (first != end) ranges.push_back({first, end});
      it = index.lower_bound({gpus + 1, kMin, kMin, kMin});
    }
    VisitMerged(ranges, f);
  }

  // While it lives, the placement views above skip `servers`: a policy
  // looks for a place for a job elsewhere first (Job::start_failed_on),
  // then, with the scope gone, everywhere. One scope at a time; `servers`
  // must outlive it. Counts (free_gpus()...) still include those servers.
  class Avoiding {
   public:
    Avoiding(const Cluster& cluster, std::span<const ServerId> servers)
        : cluster_(cluster) {
      cluster_.avoid_ = servers;
    }
    ~Avoiding() { cluster_.avoid_ = {}; }
    Avoiding(const Avoiding&) = delete;
    Avoiding& operator=(const Avoiding&) = delete;

   private:
    const Cluster& cluster_;
  };

  // --- Mutation: the Scheduler's only. ---

  // Records `job` (asking for `job_gpus` GPUs in all) as placed on `gpus`.
  // With `more`, the job already has GPUs on these servers and gets more
  // (grow): it is not counted as another job there.
  void Place(JobId job, int job_gpus, std::span<const GpuId> gpus,
             bool more = false);
  // Undoes Place. With `some`, the job keeps other GPUs on these servers
  // (shrink) and still counts as placed there.
  void Unplace(JobId job, std::span<const GpuId> gpus, bool some = false);
  void Activate(std::span<const GpuId> gpus);
  void Deactivate(std::span<const GpuId> gpus);
  void SetUp(ServerId id, bool up);
  void SetCordoned(ServerId id, bool cordoned);
  void SetProcessImagesUnusable(ServerId id, std::string why);

  // Snapshots (core/snapshot.h): the servers, and the jobs on each GPU.
  // Load rebuilds the counts and indexes; on bad bytes it fails `r` (and
  // returns an empty cluster).
  void Save(SnapshotWriter& w) const;
  // `version`: the snapshot's (before 5, no process_images_unusable).
  static Cluster Load(SnapshotReader& r, int32_t version);

 private:
  // Whether new placements may go to `s` (indexed, its free GPUs counted).
  static bool Open(const Server& s) { return s.up && !s.cordoned; }
  bool Avoided(int server) const {
    for (ServerId s : avoid_) {
      if (s.value == server) return true;
    }
    return false;
  }
  void Unindex(const Server& s);
  void Index(const Server& s);

  // Runs of an index, each in (demand, server) order (a tuple's last two
  // fields).
  using Key = std::tuple<int, int, int, int>;
  using Ranges = std::vector<
      std::pair<std::set<Key>::const_iterator, std::set<Key>::const_iterator>>;
  static constexpr int kMin = std::numeric_limits<int>::min();
  static constexpr int kMax = std::numeric_limits<int>::max();
  // Calls f on the servers of `ranges` merged in (demand, server) order,
  // skipping avoided ones, until f returns true.
  template <typename F>
  void VisitMerged(Ranges& ranges, F&& f) const {
    while (true) {
      auto* best = static_cast<typename Ranges::value_type*>(nullptr);
      for (auto& r : ranges) {
        if (r.first == r.second) continue;
        if (best == nullptr ||
            std::pair(std::get<2>(*r.first), std::get<3>(*r.first)) <
                std::pair(std::get<2>(*best->first),
                          std::get<3>(*best->first))) {
          best = &r;
        }
      }
      if (best == nullptr) return;
      const int id = std::get<3>(*best->first);
      ++best->first;
      if (!Avoided(id) && f(servers_[id])) return;
    }
  }

  std::vector<Server> servers_;
  std::vector<Gpu> gpus_;
  int up_gpus_ = 0;
  int max_server_gpus_ = 0;
  int free_gpus_ = 0;
  // Open servers (up, not cordoned) by (affinity, free GPUs, demand,
  // server), by (GPUs, affinity, demand, server) and by (GPUs, 0, demand,
  // server): runs of these merged give the views above.
  std::set<Key> by_affinity_free_;
  std::set<Key> by_size_affinity_;
  std::set<Key> by_size_demand_;
  // (free GPUs, server) for open servers with a free GPU.
  std::set<std::pair<int, int>> by_free_;
  // height -> number of up servers at that height (cordoned ones included).
  std::map<int, int> heights_;
  // A node Unindex took out of an index, which Index puts back with the
  // server's new key: placing and unplacing jobs then allocates nothing
  // for the indexes. Scratch: a copy of the cluster starts without one.
  template <typename Set>
  struct Spare {
    typename Set::node_type node;
    Spare() = default;
    Spare(const Spare&) {}
    Spare& operator=(const Spare&) { return *this; }
    Spare(Spare&&) = default;
    Spare& operator=(Spare&&) = default;
    void Take(Set& set, const typename Set::key_type& key) {
      if (auto n = set.extract(key); !n.empty()) node = std::move(n);
    }
    void Put(Set& set, const typename Set::key_type& key) {
      if (node.empty()) {
        set.insert(key);
      } else {
        node.value() = key;
        set.insert(std::move(node));
      }
    }
  };
  Spare<std::set<Key>> spare_affinity_free_, spare_size_affinity_,
      spare_size_demand_;
  Spare<std::set<std::pair<int, int>>> spare_free_;
  // The servers an Avoiding scope names (placement state, never saved).
  mutable std::span<const ServerId> avoid_;
};

}  // namespace gandiva::core
