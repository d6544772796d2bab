#include "runtime/scheduler/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <utility>

namespace gandiva::runtime {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void Add(MetricFamily& f, double value,
         std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

// A family of one unlabelled value.
MetricFamily One(std::string name, std::string help, MetricType type,
                 double value) {
  MetricFamily f = Family(std::move(name), std::move(help), type);
  Add(f, value);
  return f;
}

}  // namespace

// The gauges and counters, computed from a sample at each scrape.
class MetricsExporter::Gauges final : public prometheus::Collectable {
 public:
  explicit Gauges(std::function<MetricsSample()> sample)
      : sample_(std::move(sample)) {}

  std::vector<MetricFamily> Collect() const override {
    const MetricsSample s = sample_();
    std::vector<MetricFamily> out;

    auto jobs = Family("gandiva_jobs", "Jobs by state.", MetricType::Gauge);
    for (const auto& [state, n] : s.jobs_by_state) {
      Add(jobs, static_cast<double>(n), {{"state", state}});
    }
    out.push_back(std::move(jobs));
    out.push_back(One("gandiva_jobs_archived",
                      "Ended jobs the daemon forgot (--keep-ended-jobs, "
                      "--keep-ended-for), archived in its store (those "
                      "since deleted from it included).",
                      MetricType::Gauge, static_cast<double>(s.jobs_archived)));
    out.push_back(One("gandiva_archive_deleted_total",
                      "Archived jobs this daemon process deleted from its "
                      "store (--keep-archived-for).",
                      MetricType::Counter,
                      static_cast<double>(s.archive_deleted)));

    auto gpus =
        Family("gandiva_gpus",
               "GPUs of the registered servers: all, on servers up, "
               "free (up, not cordoned, no job placed), training (a job "
               "runs).",
               MetricType::Gauge);
    Add(gpus, static_cast<double>(s.gpus), {{"state", "all"}});
    Add(gpus, static_cast<double>(s.gpus_up), {{"state", "up"}});
    Add(gpus, static_cast<double>(s.gpus_free), {{"state", "free"}});
    Add(gpus, static_cast<double>(s.gpus_training), {{"state", "training"}});
    out.push_back(std::move(gpus));

    auto servers = Family("gandiva_servers",
                          "Registered servers: up, or down (those away, out of "
                          "reach or awaiting registration after a restart "
                          "included); cordoned: up and taking no new jobs "
                          "(counted in up too); out_of_reach: its agent not "
                          "heard of for --agent-timeout-s, its jobs kept "
                          "there (counted in down too).",
                          MetricType::Gauge);
    Add(servers, static_cast<double>(s.servers_up), {{"state", "up"}});
    Add(servers, static_cast<double>(s.servers_down), {{"state", "down"}});
    Add(servers, static_cast<double>(s.servers_cordoned),
        {{"state", "cordoned"}});
    Add(servers, static_cast<double>(s.servers_out_of_reach),
        {{"state", "out_of_reach"}});
    out.push_back(std::move(servers));

    auto actions = Family("gandiva_actions_total",
                          "Actions the scheduling core took, by kind (failed: "
                          "actions the agents could not carry out).",
                          MetricType::Counter);
    const core::Counters& c = s.actions;
    for (const auto& [kind, n] : std::vector<std::pair<const char*, int64_t>>{
             {"start", c.starts},
             {"suspend", c.suspends},
             {"resume", c.resumes},
             {"migrate", c.migrations},
             {"pack", c.packs},
             {"unpack", c.unpacks},
             {"grow", c.grows},
             {"shrink", c.shrinks},
             {"kill", c.kills},
             {"failed", c.actions_failed}}) {
      Add(actions, static_cast<double>(n), {{"kind", kind}});
    }
    out.push_back(std::move(actions));

    out.push_back(One("gandiva_core_events_total",
                      "Events the scheduling core handled.",
                      MetricType::Counter, static_cast<double>(c.events)));

    out.push_back(One("gandiva_event_log_events",
                      "Events logged since the last snapshot: what a "
                      "recovery would replay.",
                      MetricType::Gauge, static_cast<double>(s.log_events)));

    out.push_back(One("gandiva_event_log_last_seq",
                      "Sequence number of the last event logged.",
                      MetricType::Gauge,
                      static_cast<double>(s.last_event_seq)));

    out.push_back(
        One("gandiva_event_log_appends_total",
            "Appends to the event log by this process: events logged "
            "together (the profile reports and action outcomes of a loop "
            "pass, with the next event) share one.",
            MetricType::Counter, static_cast<double>(s.log_appends)));

    out.push_back(One("gandiva_event_log_compactions_total",
                      "Compactions of the event log by this process.",
                      MetricType::Counter, static_cast<double>(s.compactions)));

    out.push_back(One("gandiva_event_log_last_compaction_seconds",
                      "How long the last compaction held the event "
                      "loop.",
                      MetricType::Gauge, s.last_compaction_seconds));

    auto rate = Family("gandiva_job_minibatches_per_second",
                       "Each running job's smoothed mini-batch rate.",
                       MetricType::Gauge);
    auto done =
        Family("gandiva_job_minibatches",
               "Mini-batches each running job has trained.", MetricType::Gauge);
    auto util = Family("gandiva_job_gpu_utilization",
                       "Each running job's share of its GPUs' time busy, 0 to "
                       "1, from NVML (0 on virtual GPUs).",
                       MetricType::Gauge);
    auto memory = Family("gandiva_job_gpu_memory_bytes",
                         "GPU memory each running job holds, from NVML (0 on "
                         "virtual GPUs).",
                         MetricType::Gauge);
    for (const MetricsSample::RunningJob& j : s.running) {
      const std::vector<ClientMetric::Label> labels = {
          {"job", std::to_string(j.id)}, {"name", j.name}};
      Add(rate, j.minibatch_rate, labels);
      Add(done, static_cast<double>(j.minibatches), labels);
      Add(util, j.gpu_utilization, labels);
      Add(memory, static_cast<double>(j.gpu_memory_bytes), labels);
    }
    out.push_back(std::move(rate));
    out.push_back(std::move(done));
    out.push_back(std::move(util));
    out.push_back(std::move(memory));

    using Q = MetricsSample::Queue;
    struct PerQueue {
      const char* name;
      const char* help;
      double Q::*value;
    };
    const PerQueue per_queue[] = {
        {"quota_gpus", "Each queue's guaranteed GPUs (a parent's: its own).",
         &Q::quota},
        {"fair_share_gpus",
         "Each queue's fair share of the GPUs up now, for what its jobs ask.",
         &Q::fair_share},
        {"gpus_asked", "GPUs asked for by each queue's jobs not ended.",
         &Q::gpus_asked},
        {"gpus_running", "GPUs held by each queue's running jobs.",
         &Q::gpus_running},
        {"jobs_running", "Each queue's running jobs.", &Q::jobs_running},
        {"jobs_waiting",
         "Each queue's jobs waiting (queued, suspended or migrating).",
         &Q::jobs_waiting},
        {"gpu_seconds_last_day",
         "GPU-seconds each queue's jobs used over the last 24 hours (from "
         "the start of that hour).",
         &Q::gpu_seconds_day}};
    for (const PerQueue& m : per_queue) {
      auto f = Family(std::string("gandiva_queue_") + m.name, m.help,
                      MetricType::Gauge);
      for (const Q& q : s.queues) {
        Add(f, q.*m.value, {{"queue", q.name}, {"parent", q.parent}});
      }
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
  std::function<MetricsSample()> sample_;
};

core::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& listen, std::function<MetricsSample()> sample) {
  std::unique_ptr<MetricsExporter> m(new MetricsExporter());
  if (!listen.empty()) {
    try {
      m->exposer_ = std::make_unique<prometheus::Exposer>(listen, 2);
    } catch (const std::exception& e) {
      return core::InvalidArgument("--metrics-listen: cannot listen on '" +
                                   listen + "': " + e.what());
    }
    const std::vector<int> ports = m->exposer_->GetListeningPorts();
    if (ports.empty()) {
      return core::InvalidArgument("--metrics-listen: cannot listen on '" +
                                   listen + "'");
    }
    m->port_ = ports.front();
  }
  m->registry_ = std::make_shared<prometheus::Registry>();
  m->mechanisms_ =
      &prometheus::BuildHistogram()
           .Name("gandiva_mechanism_seconds")
           .Help(
               "How long each mechanism took, as the agents measured it: "
               "start, suspend, resume, migrate, pack, unpack, grow, "
               "shrink; outcome ok or failed.")
           .Register(*m->registry_);
  m->gauges_ = std::make_shared<Gauges>(std::move(sample));
  if (m->exposer_) {
    m->exposer_->RegisterCollectable(m->gauges_);
    m->exposer_->RegisterCollectable(m->registry_);
  }
  return m;
}

std::string MetricsExporter::Text() const {
  // What the exposer collects, in the order it registered them.
  std::vector<prometheus::MetricFamily> families = gauges_->Collect();
  for (prometheus::MetricFamily& f : registry_->Collect()) {
    families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
}

MetricsExporter::~MetricsExporter() {
  // Stop serving before what it serves goes.
  exposer_.reset();
}

void MetricsExporter::ObserveMechanism(const std::string& action, bool ok,
                                       double seconds) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300};
  mechanisms_
      ->Add({{"action", action}, {"outcome", ok ? "ok" : "failed"}}, kBuckets)
      .Observe(seconds);
}

}  // namespace gandiva::runtime
