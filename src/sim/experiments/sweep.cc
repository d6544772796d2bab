#include "sim/experiments/sweep.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "sim/experiments/svg_plot.h"

namespace gandiva::sim::experiments {
namespace {

// At most this many values in one list: a sweep is runs of whole
// simulations, and a typo like 1..1000000 should not start a million.
constexpr size_t kMaxListValues = 10'000;

std::vector<std::string> Items(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  if (!text.empty() && text.back() == ',') out.push_back("");
  return out;
}

bool ParseUnsigned(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19 ||
      !std::all_of(s.begin(), s.end(),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *out = std::strtoull(s.c_str(), nullptr, 10);
  return true;
}

core::Status BadItem(const std::string& flag, const std::string& item,
                     const std::string& expected) {
  return core::InvalidArgument(flag + ": expected " + expected +
                               " (comma-separated), got '" + item + "'");
}

std::string Num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string Fixed(double v, int digits) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// Which input a sweep's plot runs along.
enum class Axis { kGpus, kLoad, kSeed };

Axis AxisOf(const std::vector<SweepRun>& runs) {
  std::set<int> gpus;
  std::set<double> loads;
  for (const SweepRun& r : runs) {
    gpus.insert(r.gpus);
    loads.insert(r.load);
  }
  if (gpus.size() > 1) return Axis::kGpus;
  if (loads.size() > 1) return Axis::kLoad;
  return Axis::kSeed;
}

double XOf(const SweepRun& r, Axis axis) {
  switch (axis) {
    case Axis::kGpus:
      return r.gpus;
    case Axis::kLoad:
      return r.load;
    case Axis::kSeed:
      return static_cast<double>(r.seed);
  }
  return 0;
}

// Comma-separated whole numbers N or inclusive ranges A..B; `expected`
// says what, in an error.
core::StatusOr<std::vector<uint64_t>> ParseRanges(const std::string& flag,
                                                  const std::string& text,
                                                  const std::string& expected) {
  std::vector<uint64_t> out;
  for (const std::string& item : Items(text)) {
    const size_t dots = item.find("..");
    uint64_t a = 0, b = 0;
    if (dots == std::string::npos) {
      if (!ParseUnsigned(item, &a)) return BadItem(flag, item, expected);
      b = a;
    } else if (!ParseUnsigned(item.substr(0, dots), &a) ||
               !ParseUnsigned(item.substr(dots + 2), &b)) {
      return BadItem(flag, item, expected);
    } else if (b < a) {
      return core::InvalidArgument(flag + ": range '" + item +
                                   "' is empty (its end is below its start)");
    }
    if (b - a >= kMaxListValues || out.size() + (b - a + 1) > kMaxListValues) {
      return core::InvalidArgument(flag + ": more than " +
                                   std::to_string(kMaxListValues) +
                                   " values in '" + text + "'");
    }
    for (uint64_t v = a; v <= b; ++v) out.push_back(v);
  }
  if (out.empty()) return BadItem(flag, text, expected);
  return out;
}

}  // namespace

core::StatusOr<std::vector<uint64_t>> ParseSeedList(const std::string& flag,
                                                    const std::string& text) {
  return ParseRanges(flag, text, "seeds N or ranges A..B");
}

core::StatusOr<std::vector<int>> ParsePositiveIntList(const std::string& flag,
                                                      const std::string& text) {
  auto values =
      ParseRanges(flag, text, "positive whole numbers N or ranges A..B");
  if (!values.ok()) return values.status();
  std::vector<int> out;
  for (uint64_t v : *values) {
    if (v == 0 || v > 1'000'000'000) {
      return core::InvalidArgument(flag + ": " + std::to_string(v) +
                                   " is out of range (1 to 1,000,000,000)");
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

core::StatusOr<std::vector<double>> ParsePositiveNumberList(
    const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : Items(text)) {
    char* end = nullptr;
    const double v = item.empty() ? 0 : std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v) || v <= 0) {
      return BadItem(flag, item, "positive numbers");
    }
    if (out.size() >= kMaxListValues) {
      return core::InvalidArgument(flag + ": more than " +
                                   std::to_string(kMaxListValues) + " values");
    }
    out.push_back(v);
  }
  if (out.empty()) return BadItem(flag, text, "positive numbers");
  return out;
}

std::string LoadText(double load) { return Num(load); }

void ScaleArrivals(Workload& workload, double load) {
  if (load == 1) return;
  for (TraceJob& j : workload.jobs) {
    j.submit = core::Time::FromMicros(static_cast<int64_t>(
        std::llround(static_cast<double>(j.submit.micros()) / load)));
  }
  workload.description += "; arrivals at " + Num(load) + "x the load";
}

void RunParallel(size_t n, int parallel,
                 const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  const size_t threads =
      std::min(n, static_cast<size_t>(std::max(1, parallel)));
  std::vector<std::thread> others;
  for (size_t t = 1; t < threads; ++t) others.emplace_back(work);
  work();
  for (std::thread& t : others) t.join();
}

const std::vector<std::string>& MetricNames() {
  static const std::vector<std::string> names = {
      "jobs_finished",
      "mean_jct_s",
      "median_jct_s",
      "p95_jct_s",
      "makespan_s",
      "gpu_utilization",
      "gpu_busy",
      "mean_time_to_first_feedback_s",
      "median_time_to_first_feedback_s",
      "mean_queueing_s",
      "starts",
      "suspends",
      "resumes",
      "migrations",
      "packs",
      "unpacks",
      "events"};
  return names;
}

const std::vector<std::string>& FairnessMetricNames() {
  static const std::vector<std::string> names = {"jain_fairness",
                                                 "share_windows_within_10pct",
                                                 "mean_finish_time_fairness",
                                                 "max_finish_time_fairness",
                                                 "finish_time_fairness_above_1",
                                                 "mean_reclaim_wait_s",
                                                 "lost_gpu_hours"};
  return names;
}

core::Status CheckMetric(const std::string& name) {
  const auto& plain = MetricNames();
  const auto& fair = FairnessMetricNames();
  if (std::find(plain.begin(), plain.end(), name) != plain.end() ||
      std::find(fair.begin(), fair.end(), name) != fair.end()) {
    return core::Status::Ok();
  }
  std::string known;
  for (const auto* list : {&plain, &fair}) {
    for (const std::string& n : *list) {
      known += (known.empty() ? "" : ", ") + n;
    }
  }
  return core::InvalidArgument("unknown metric '" + name +
                               "' (one of: " + known + ")");
}

core::StatusOr<double> Metric(const SimResult& r, const std::string& name) {
  GANDIVA_RETURN_IF_ERROR(CheckMetric(name));
  if (name == "lost_gpu_hours") return r.lost_gpu_hours;
  const auto& fair = FairnessMetricNames();
  if (std::find(fair.begin(), fair.end(), name) != fair.end()) {
    if (!r.fairness) {
      return core::Status(core::StatusCode::kFailedPrecondition,
                          "metric '" + name +
                              "' is measured only in runs with queues "
                              "(--queues)");
    }
    const FairnessResult& f = *r.fairness;
    if (name == "jain_fairness") return f.jain_fairness;
    if (name == "share_windows_within_10pct") {
      return f.share_windows_within_10pct;
    }
    if (name == "mean_reclaim_wait_s") return r.mean_reclaim_wait_s;
    if (!f.finish_time_measured) {
      return core::Status(core::StatusCode::kFailedPrecondition,
                          "metric '" + name + "' was not measured in this run");
    }
    if (name == "mean_finish_time_fairness") {
      return f.mean_finish_time_fairness;
    }
    if (name == "max_finish_time_fairness") return f.max_finish_time_fairness;
    return f.finish_time_fairness_above_1;
  }
  const std::map<std::string, double> values = {
      {"jobs_finished", static_cast<double>(r.jobs_finished)},
      {"mean_jct_s", r.mean_jct_s},
      {"median_jct_s", r.median_jct_s},
      {"p95_jct_s", r.p95_jct_s},
      {"makespan_s", r.makespan_s},
      {"gpu_utilization", r.gpu_utilization},
      {"gpu_busy", r.gpu_busy},
      {"mean_time_to_first_feedback_s", r.mean_time_to_first_feedback_s},
      {"median_time_to_first_feedback_s", r.median_time_to_first_feedback_s},
      {"mean_queueing_s", r.mean_queueing_s},
      {"starts", static_cast<double>(r.starts)},
      {"suspends", static_cast<double>(r.suspends)},
      {"resumes", static_cast<double>(r.resumes)},
      {"migrations", static_cast<double>(r.migrations)},
      {"packs", static_cast<double>(r.packs)},
      {"unpacks", static_cast<double>(r.unpacks)},
      {"events", static_cast<double>(r.events)}};
  return values.at(name);
}

std::string SweepJson(const std::vector<SweepRun>& runs) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const SweepRun& r : runs) {
    nlohmann::ordered_json j;
    j["policy"] = r.policy;
    j["seed"] = r.seed;
    j["gpus"] = r.gpus;
    j["load"] = r.load;
    j["result"] = nlohmann::ordered_json::parse(ResultJson(r.result));
    list.push_back(std::move(j));
  }
  return list.dump(2) + "\n";
}

std::string SweepCsv(const std::vector<SweepRun>& runs) {
  std::vector<std::string> metrics = MetricNames();
  if (std::any_of(runs.begin(), runs.end(), [](const SweepRun& r) {
        return r.result.fairness.has_value();
      })) {
    const auto& fair = FairnessMetricNames();
    metrics.insert(metrics.end(), fair.begin(), fair.end());
  }
  std::string out = "policy,seed,gpus,load";
  for (const std::string& m : metrics) out += "," + m;
  out += ",wall_s\n";
  for (const SweepRun& r : runs) {
    out += r.policy + "," + std::to_string(r.seed) + "," +
           std::to_string(r.gpus) + "," + Num(r.load);
    for (const std::string& m : metrics) {
      const core::StatusOr<double> got = Metric(r.result, m);
      if (!got.ok()) {
        out += ",";  // not measured in this run
        continue;
      }
      const double v = *got;
      out += "," + (v == std::floor(v) && std::fabs(v) < 1e15 ? Fixed(v, 0)
                                                              : Fixed(v, 4));
    }
    out += "," + Fixed(r.result.wall_s, 3) + "\n";
  }
  return out;
}

std::string SweepTable(const std::vector<SweepRun>& runs) {
  std::set<int> gpus;
  std::set<double> loads;
  std::set<uint64_t> seeds;
  for (const SweepRun& r : runs) {
    gpus.insert(r.gpus);
    loads.insert(r.load);
    seeds.insert(r.seed);
  }
  std::string out;
  char line[256];
  std::string head = "policy              ";
  if (gpus.size() > 1) head += "  gpus";
  if (loads.size() > 1) head += "   load";
  if (seeds.size() > 1) head += "  seed";
  out += head +
         "  mean JCT   median JCT  p95 JCT    makespan   util   1st fb   "
         "wall\n";
  for (const SweepRun& r : runs) {
    std::string row = r.policy;
    row.resize(std::max<size_t>(20, row.size()), ' ');
    if (gpus.size() > 1) {
      std::snprintf(line, sizeof line, "  %4d", r.gpus);
      row += line;
    }
    if (loads.size() > 1) {
      std::snprintf(line, sizeof line, "  %5s", Num(r.load).c_str());
      row += line;
    }
    if (seeds.size() > 1) {
      std::snprintf(line, sizeof line, "  %4llu",
                    static_cast<unsigned long long>(r.seed));
      row += line;
    }
    const SimResult& s = r.result;
    std::snprintf(
        line, sizeof line, "  %-10s %-11s %-10s %-10s %5.1f%%  %-8s %.1fs\n",
        core::FormatDuration(core::Duration::FromSeconds(s.mean_jct_s)).c_str(),
        core::FormatDuration(core::Duration::FromSeconds(s.median_jct_s))
            .c_str(),
        core::FormatDuration(core::Duration::FromSeconds(s.p95_jct_s)).c_str(),
        core::FormatDuration(core::Duration::FromSeconds(s.makespan_s)).c_str(),
        100 * s.gpu_utilization,
        core::FormatDuration(
            core::Duration::FromSeconds(s.mean_time_to_first_feedback_s))
            .c_str(),
        s.wall_s);
    out += row + line;
  }
  return out;
}

core::StatusOr<std::string> SweepSvg(const std::vector<SweepRun>& runs,
                                     const std::string& metric) {
  GANDIVA_RETURN_IF_ERROR(CheckMetric(metric));
  const Axis axis = AxisOf(runs);
  // Per policy (in the sweep's order), per x: the sum and count.
  std::vector<std::string> policies;
  std::map<std::string, std::map<double, std::pair<double, int>>> points;
  for (const SweepRun& r : runs) {
    if (!points.contains(r.policy)) policies.push_back(r.policy);
    auto& [sum, count] = points[r.policy][XOf(r, axis)];
    const core::StatusOr<double> v = Metric(r.result, metric);
    if (!v.ok()) return v.status();
    sum += *v;
    ++count;
  }
  std::vector<PlotSeries> series;
  for (const std::string& p : policies) {
    PlotSeries s{p, {}, {}};
    for (const auto& [x, sc] : points[p]) {
      s.x.push_back(x);
      s.y.push_back(sc.first / sc.second);
    }
    series.push_back(std::move(s));
  }
  PlotOptions o;
  o.x_label = axis == Axis::kGpus   ? "GPUs"
              : axis == Axis::kLoad ? "load (x the workload's)"
                                    : "seed";
  o.y_label = metric;
  o.title = metric + " against " + o.x_label +
            (axis == Axis::kSeed ? "" : " (mean over seeds)");
  // Cluster sizes usually double from one to the next.
  o.log_x = axis == Axis::kGpus;
  return LineChartSvg(series, o);
}

}  // namespace gandiva::sim::experiments
