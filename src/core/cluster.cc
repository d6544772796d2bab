#include "core/cluster.h"

#include <algorithm>
#include <cmath>

#include "core/snapshot.h"
#include "core/status.h"

namespace gandiva::core {

std::string ValidateServerSpec(const ServerSpec& spec) {
  if (spec.gpus < 1) {
    return "field 'gpus': must be at least 1, got " + std::to_string(spec.gpus);
  }
  if (spec.sockets < 1 || spec.gpus % spec.sockets != 0) {
    return "field 'sockets': must be at least 1 and divide gpus (" +
           std::to_string(spec.gpus) + "), got " + std::to_string(spec.sockets);
  }
  const int per_socket = spec.gpus / spec.sockets;
  if (spec.switches_per_socket < 1 || per_socket % spec.switches_per_socket) {
    return "field 'switches_per_socket': must be at least 1 and divide the "
           "GPUs per socket (" +
           std::to_string(per_socket) + "), got " +
           std::to_string(spec.switches_per_socket);
  }
  if (!(spec.gpu_memory_gb >= 0) || !std::isfinite(spec.gpu_memory_gb)) {
    return "field 'gpu_memory_gb': must be a finite number >= 0, got " +
           std::to_string(spec.gpu_memory_gb);
  }
  return {};
}

const char* SpreadName(Spread s) {
  switch (s) {
    case Spread::kSameSwitch:
      return "same-switch";
    case Spread::kAcrossSwitches:
      return "across-switches";
    case Spread::kAcrossSockets:
      return "across-sockets";
    case Spread::kAcrossServers:
      return "across-servers";
  }
  return "?";
}

ServerId Cluster::AddServer(const ServerSpec& spec) {
  GANDIVA_CHECK_MSG(ValidateServerSpec(spec).empty(), ValidateServerSpec(spec));
  Server s;
  s.id = ServerId(static_cast<int32_t>(servers_.size()));
  s.spec = spec;
  s.first_gpu = GpuId(static_cast<int32_t>(gpus_.size()));
  s.free_gpus = spec.gpus;
  const int per_socket = spec.gpus / spec.sockets;
  const int per_switch = per_socket / spec.switches_per_socket;
  for (int i = 0; i < spec.gpus; ++i) {
    Gpu g;
    g.id = GpuId(static_cast<int32_t>(gpus_.size()));
    g.server = s.id;
    g.local = i;
    g.socket = i / per_socket;
    g.pcie_switch = i / per_switch;
    gpus_.push_back(std::move(g));
  }
  servers_.push_back(s);
  up_gpus_ += spec.gpus;
  free_gpus_ += spec.gpus;
  max_server_gpus_ = std::max(max_server_gpus_, spec.gpus);
  Index(servers_.back());
  return s.id;
}

std::vector<GpuId> Cluster::GpusOf(ServerId id) const {
  const Server& s = server(id);
  std::vector<GpuId> out;
  out.reserve(s.spec.gpus);
  for (int i = 0; i < s.spec.gpus; ++i) {
    out.push_back(GpuId(s.first_gpu.value + i));
  }
  return out;
}

int Cluster::height() const {
  for (auto it = heights_.rbegin(); it != heights_.rend(); ++it) {
    if (it->second > 0) return it->first;
  }
  return 0;
}

Spread Cluster::SpreadOf(std::span<const GpuId> gpus) const {
  if (gpus.empty()) return Spread::kSameSwitch;
  const Gpu& first = gpu(gpus[0]);
  Spread worst = Spread::kSameSwitch;
  for (GpuId id : gpus.subspan(1)) {
    const Gpu& g = gpu(id);
    if (g.server != first.server) return Spread::kAcrossServers;
    if (g.socket != first.socket) {
      worst = Spread::kAcrossSockets;
    } else if (g.pcie_switch != first.pcie_switch &&
               worst < Spread::kAcrossSwitches) {
      worst = Spread::kAcrossSwitches;
    }
  }
  return worst;
}

bool Cluster::SameLayout(std::span<const GpuId> a,
                         std::span<const GpuId> b) const {
  if (a.size() != b.size()) return false;
  if (std::equal(a.begin(), a.end(), b.begin())) return true;
  // Lists on one server each are their own grouping (the common case).
  auto on_one = [this](std::span<const GpuId> gpus) {
    for (GpuId g : gpus) {
      if (gpu(g).server != gpu(gpus[0]).server) return false;
    }
    return true;
  };
  if (on_one(a) && on_one(b)) return false;
  // Each list grouped by server, the servers in order of first appearance.
  auto grouped = [this](std::span<const GpuId> gpus) {
    std::vector<ServerId> servers;
    for (GpuId g : gpus) {
      const ServerId s = gpu(g).server;
      if (std::find(servers.begin(), servers.end(), s) == servers.end()) {
        servers.push_back(s);
      }
    }
    std::vector<GpuId> out;
    out.reserve(gpus.size());
    for (ServerId s : servers) {
      for (GpuId g : gpus) {
        if (gpu(g).server == s) out.push_back(g);
      }
    }
    return out;
  };
  return grouped(a) == grouped(b);
}

void Cluster::Unindex(const Server& s) {
  if (!s.up) return;
  auto it = heights_.find(s.height());
  if (it != heights_.end() && --it->second == 0) heights_.erase(it);
  if (s.cordoned) return;
  spare_affinity_free_.Take(by_affinity_free_,
                            {s.affinity, s.free_gpus, s.demand, s.id.value});
  spare_size_affinity_.Take(by_size_affinity_,
                            {s.spec.gpus, s.affinity, s.demand, s.id.value});
  spare_size_demand_.Take(by_size_demand_,
                          {s.spec.gpus, 0, s.demand, s.id.value});
  spare_free_.Take(by_free_, {s.free_gpus, s.id.value});
}

void Cluster::Index(const Server& s) {
  if (!s.up) return;
  ++heights_[s.height()];
  if (s.cordoned) return;
  spare_affinity_free_.Put(by_affinity_free_,
                           {s.affinity, s.free_gpus, s.demand, s.id.value});
  spare_size_affinity_.Put(by_size_affinity_,
                           {s.spec.gpus, s.affinity, s.demand, s.id.value});
  spare_size_demand_.Put(by_size_demand_,
                         {s.spec.gpus, 0, s.demand, s.id.value});
  if (s.free_gpus > 0) spare_free_.Put(by_free_, {s.free_gpus, s.id.value});
}

void Cluster::Place(JobId job, int job_gpus, std::span<const GpuId> gpus,
                    bool more) {
  // GPUs of one server are contiguous in `gpus` or not; group by server.
  size_t i = 0;
  std::vector<GpuId> sorted(gpus.begin(), gpus.end());
  std::sort(sorted.begin(), sorted.end());
  GANDIVA_CHECK_MSG(
      std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
      "a job is placed twice on one GPU");
  while (i < sorted.size()) {
    Server& s = servers_[gpu(sorted[i]).server.value];
    GANDIVA_CHECK_MSG(s.up, "placement on a server that is down");
    Unindex(s);
    // More GPUs for a job (a grow) on a server it was not on yet: it is
    // placed on that server, as a new placement would be.
    const bool new_here = !more || !Holds(s, job);
    int here = 0;
    for (; i < sorted.size() && gpus_[sorted[i].value].server == s.id; ++i) {
      Gpu& g = gpus_[sorted[i].value];
      if (g.jobs.empty()) {
        --s.free_gpus;
        if (Open(s)) --free_gpus_;
      }
      g.jobs.push_back(job);
      ++here;
    }
    if (new_here) {
      if (s.jobs == 0) s.affinity = job_gpus;
      ++s.jobs;
    }
    s.demand += here;
    Index(s);
  }
}

void Cluster::Unplace(JobId job, std::span<const GpuId> gpus, bool some) {
  std::vector<GpuId> sorted(gpus.begin(), gpus.end());
  std::sort(sorted.begin(), sorted.end());
  size_t i = 0;
  while (i < sorted.size()) {
    Server& s = servers_[gpu(sorted[i]).server.value];
    Unindex(s);
    int here = 0;
    for (; i < sorted.size() && gpus_[sorted[i].value].server == s.id; ++i) {
      Gpu& g = gpus_[sorted[i].value];
      auto it = std::find(g.jobs.begin(), g.jobs.end(), job);
      GANDIVA_CHECK_MSG(it != g.jobs.end(), "unplacing a job not placed here");
      g.jobs.erase(it);
      if (g.jobs.empty()) {
        ++s.free_gpus;
        if (Open(s)) ++free_gpus_;
      }
      ++here;
    }
    // Some of its GPUs (a shrink): the job leaves the server only with
    // its last GPU there.
    if (!some || !Holds(s, job)) --s.jobs;
    s.demand -= here;
    if (s.jobs == 0) s.affinity = 0;
    Index(s);
  }
}

bool Cluster::Holds(const Server& s, JobId job) const {
  for (int k = 0; k < s.spec.gpus; ++k) {
    const Gpu& g = gpus_[s.first_gpu.value + k];
    if (std::find(g.jobs.begin(), g.jobs.end(), job) != g.jobs.end()) {
      return true;
    }
  }
  return false;
}

void Cluster::Activate(std::span<const GpuId> gpus) {
  for (GpuId id : gpus) ++gpus_[id.value].active;
}

void Cluster::Deactivate(std::span<const GpuId> gpus) {
  for (GpuId id : gpus) {
    GANDIVA_CHECK(gpus_[id.value].active > 0);
    --gpus_[id.value].active;
  }
}

void Cluster::SetUp(ServerId id, bool up) {
  Server& s = servers_[id.value];
  if (s.up == up) return;
  if (!up) {
    Unindex(s);
    up_gpus_ -= s.spec.gpus;
    if (Open(s)) free_gpus_ -= s.free_gpus;
    s.up = false;
  } else {
    s.up = true;
    up_gpus_ += s.spec.gpus;
    if (Open(s)) free_gpus_ += s.free_gpus;
    Index(s);
  }
}

void Cluster::SetProcessImagesUnusable(ServerId id, std::string why) {
  servers_[id.value].spec.process_images_unusable = std::move(why);
}

void Cluster::SetCordoned(ServerId id, bool cordoned) {
  Server& s = servers_[id.value];
  if (s.cordoned == cordoned) return;
  Unindex(s);
  if (Open(s)) free_gpus_ -= s.free_gpus;
  s.cordoned = cordoned;
  if (Open(s)) free_gpus_ += s.free_gpus;
  Index(s);
}

void Cluster::Save(SnapshotWriter& w) const {
  w.I64(num_servers());
  for (const Server& s : servers_) {
    w.Str(s.spec.name);
    w.I32(s.spec.gpus);
    w.I32(s.spec.sockets);
    w.I32(s.spec.switches_per_socket);
    w.F64(s.spec.gpu_memory_gb);
    w.Str(s.spec.process_images_unusable);
    w.Bool(s.up);
    w.Bool(s.cordoned);
    w.I32(s.affinity);
    for (int i = 0; i < s.spec.gpus; ++i) {
      const Gpu& g = gpus_[s.first_gpu.value + i];
      w.Ids(g.jobs);
      w.I32(g.active);
    }
  }
}

Cluster Cluster::Load(SnapshotReader& r, int32_t version) {
  Cluster c;
  const int64_t n = r.Count(8);
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    ServerSpec spec;
    spec.name = r.Str();
    spec.gpus = r.I32();
    spec.sockets = r.I32();
    spec.switches_per_socket = r.I32();
    spec.gpu_memory_gb = r.F64();
    if (version >= 5) spec.process_images_unusable = r.Str();
    const bool up = r.Bool();
    const bool cordoned = r.Bool();
    const int affinity = r.I32();
    if (!r.ok()) break;
    if (std::string err = ValidateServerSpec(spec); !err.empty()) {
      r.Fail("server " + std::to_string(i) + ": " + err);
      break;
    }
    if (spec.gpus > (1 << 24) || affinity < 0) {
      r.Fail("server " + std::to_string(i) + ": bad GPU count or affinity");
      break;
    }
    const ServerId id = c.AddServer(spec);
    Server& s = c.servers_[id.value];
    c.Unindex(s);
    std::set<int32_t> jobs_here;
    for (int k = 0; k < spec.gpus && r.ok(); ++k) {
      Gpu& g = c.gpus_[s.first_gpu.value + k];
      g.jobs = r.Ids<JobId>();
      g.active = r.I32();
      for (JobId j : g.jobs) {
        if (!j.valid()) r.Fail("a GPU holds an invalid job id");
        jobs_here.insert(j.value);
      }
      if (g.active < 0 || g.active > static_cast<int>(g.jobs.size())) {
        r.Fail("a GPU's active count is out of range");
      }
      if (!g.jobs.empty()) {
        --s.free_gpus;
        --c.free_gpus_;
      }
      s.demand += static_cast<int>(g.jobs.size());
    }
    s.jobs = static_cast<int>(jobs_here.size());
    s.affinity = affinity;
    if (!up || cordoned) c.free_gpus_ -= s.free_gpus;
    if (!up) {
      s.up = false;
      c.up_gpus_ -= spec.gpus;
    }
    s.cordoned = cordoned;
    c.Index(s);
  }
  if (!r.ok()) return Cluster();
  return c;
}

}  // namespace gandiva::core
