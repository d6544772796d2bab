// MetricsExporter: the scheduler daemon's Prometheus endpoint
// (`--metrics-listen HOST:PORT`, GET /metrics in the text format), served by
// prometheus-cpp.
//
// What it exports (README.md, "Metrics"): jobs by state, GPUs (all, up,
// free, training), servers up and down, the core's actions and events, the
// event log (events since its last snapshot, compactions), each running
// job's mini-batch rate, and a histogram of each mechanism's duration as
// the agents measured it.
//
// The gauges are read at each scrape through a callback (a sample of the
// state the daemon last published); the histogram is fed as mechanisms
// conclude. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/state.h"
#include "core/status.h"

namespace prometheus {
class Exposer;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace gandiva::runtime {

struct MetricsSample {
  // Jobs by state name ("queued", "running", ...); every state is present.
  std::map<std::string, int64_t> jobs_by_state;
  // Ended jobs forgotten and archived (--keep-ended-jobs, --keep-ended-for):
  // in no state above (those since deleted from the archive included).
  int64_t jobs_archived = 0;
  // Archived jobs this daemon process deleted (--keep-archived-for).
  int64_t archive_deleted = 0;
  int64_t gpus = 0;           // on registered servers
  int64_t gpus_up = 0;        // on servers up
  int64_t gpus_free = 0;      // up, with no job placed on them
  int64_t gpus_training = 0;  // with a job running on them
  int64_t servers_up = 0;
  int64_t servers_down = 0;      // down
  int64_t servers_cordoned = 0;  // up and cordoned (counted in up too)
  // Whose agent is out of reach, within --agent-grace-s (in down too).
  int64_t servers_out_of_reach = 0;
  core::Counters actions;  // the core's counters (events included)
  int64_t log_events = 0;  // events logged since the last snapshot
  int64_t last_event_seq = 0;
  int64_t log_appends = 0;  // appends to the log by this daemon process
  int64_t compactions = 0;  // by this daemon process
  double last_compaction_seconds = 0;
  struct RunningJob {
    int64_t id = 0;
    std::string name;
    double minibatch_rate = 0;
    int64_t minibatches = 0;
    double gpu_utilization = 0;  // 0..1, from NVML (0 on virtual GPUs)
    int64_t gpu_memory_bytes = 0;
  };
  std::vector<RunningJob> running;
  // Each queue as `gandiva queues` shows it ("(shared)": the shared queue).
  struct Queue {
    std::string name;
    std::string parent;
    double quota = 0;
    double fair_share = 0;
    double gpus_asked = 0;
    double gpus_running = 0;
    double jobs_running = 0;
    double jobs_waiting = 0;
    double gpu_seconds_day = 0;
  };
  std::vector<Queue> queues;
};

class MetricsExporter {
 public:
  // Serves /metrics at `listen` (HOST:PORT; port 0 picks a free one; empty:
  // on no socket, read through Text alone). `sample` is called at each
  // scrape, from the HTTP server's threads (and Text's caller).
  // InvalidArgument naming --metrics-listen when it cannot listen there
  // (SchedulerServer::Start has checked the HOST:PORT form already).
  static core::StatusOr<std::unique_ptr<MetricsExporter>> Start(
      const std::string& listen, std::function<MetricsSample()> sample);
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // The port it listens on (0: none).
  int port() const { return port_; }
  // The page a scrape of /metrics gets (Prometheus' text format).
  std::string Text() const;
  // A mechanism concluded: `action` ("suspend", "migrate", ...) took
  // `seconds`, and succeeded or not.
  void ObserveMechanism(const std::string& action, bool ok, double seconds);

 private:
  class Gauges;
  MetricsExporter() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Gauges> gauges_;
  prometheus::Family<prometheus::Histogram>* mechanisms_ = nullptr;
  int port_ = 0;
};

}  // namespace gandiva::runtime
