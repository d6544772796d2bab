#include "sim/workload/trace_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

namespace gandiva::sim {
namespace {

using core::Duration;
using core::InvalidArgument;
using core::Rng;
using core::Status;
using core::StatusOr;
using core::Time;

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::IoError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return core::IoError(path + ": read error");
  return ss.str();
}

// Splits text into lines (without "\n" or a trailing "\r").
std::vector<std::string_view> Lines(const std::string& text) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    pos = end + 1;
  }
  return out;
}

std::vector<std::string_view> Split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (true) {
    const size_t end = line.find(sep, pos);
    if (end == std::string_view::npos) {
      out.push_back(line.substr(pos));
      return out;
    }
    out.push_back(line.substr(pos, end - pos));
    pos = end + 1;
  }
}

std::string Quoted(std::string_view v) {
  std::string s(v.substr(0, 60));
  if (v.size() > 60) s += "...";
  return "'" + s + "'";
}

// Where a row came from, for error messages.
struct RowContext {
  const std::string& file;
  size_t line;  // 1-based

  Status Error(const std::string& what) const {
    return InvalidArgument(file + ":" + std::to_string(line) + ": " + what);
  }
  Status FieldError(const char* field, const std::string& what) const {
    return Error(std::string("field '") + field + "': " + what);
  }
};

bool ParseDouble(std::string_view v, double& out) {
  if (v.empty()) return false;
  const char* end = v.data() + v.size();
  const auto r = std::from_chars(v.data(), end, out);
  return r.ec == std::errc() && r.ptr == end && std::isfinite(out);
}

bool ParseInt(std::string_view v, int64_t& out) {
  if (v.empty()) return false;
  const char* end = v.data() + v.size();
  const auto r = std::from_chars(v.data(), end, out);
  return r.ec == std::errc() && r.ptr == end;
}

// A number > 0 (positive) or >= 0.
StatusOr<double> Number(const RowContext& ctx, const char* field,
                        std::string_view v, bool positive) {
  double x = 0.0;
  const char* want = positive ? "expected a positive number"
                              : "expected a non-negative number";
  if (!ParseDouble(v, x) || (positive ? !(x > 0) : !(x >= 0))) {
    return ctx.FieldError(field, std::string(want) + ", got " + Quoted(v));
  }
  return x;
}

// A time or duration in seconds, > 0 (positive) or >= 0, within what the
// simulator's clock holds with room to run (kMaxTraceSeconds).
StatusOr<double> Seconds(const RowContext& ctx, const char* field,
                         std::string_view v, bool positive) {
  StatusOr<double> n = Number(ctx, field, v, positive);
  if (!n.ok()) return n.status();
  const double x = *n;
  if (x > kMaxTraceSeconds) {
    return ctx.FieldError(
        field, Quoted(v) +
                   " s is past what the simulator's "
                   "clock takes (at most " +
                   std::to_string(static_cast<int64_t>(kMaxTraceSeconds)) +
                   " s, about 31 years)");
  }
  return x;
}

StatusOr<int64_t> Integer(const RowContext& ctx, const char* field,
                          std::string_view v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (!ParseInt(v, x) || x < lo || x > hi) {
    const std::string want = lo == 1   ? "expected a positive integer"
                             : lo == 0 ? "expected a non-negative integer"
                                       : "expected an integer";
    std::string range;
    if (ParseInt(v, x)) {
      range = " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    }
    return ctx.FieldError(field, want + range + ", got " + Quoted(v));
  }
  return x;
}

// GPUs requested: a positive integer up to Catalog::kMaxGpus.
StatusOr<int> Gpus(const RowContext& ctx, const char* field,
                   std::string_view v) {
  auto g = Integer(ctx, field, v, 1, Catalog::kMaxGpus);
  if (!g.ok()) return g.status();
  return static_cast<int>(*g);
}

int RoundUpPow2(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "YYYY-MM-DD HH:MM:SS" -> seconds since 1970 (the trace's local time, no
// zone: only differences matter).
StatusOr<int64_t> Timestamp(const RowContext& ctx, const char* field,
                            std::string_view v) {
  auto bad = [&] {
    return ctx.FieldError(field,
                          "expected 'YYYY-MM-DD HH:MM:SS', got " + Quoted(v));
  };
  if (v.size() != 19 || v[4] != '-' || v[7] != '-' || v[10] != ' ' ||
      v[13] != ':' || v[16] != ':') {
    return bad();
  }
  int64_t parts[6];
  const size_t at[6] = {0, 5, 8, 11, 14, 17};
  const size_t len[6] = {4, 2, 2, 2, 2, 2};
  for (int i = 0; i < 6; ++i) {
    if (!ParseInt(v.substr(at[i], len[i]), parts[i]) || parts[i] < 0) {
      return bad();
    }
  }
  if (parts[1] < 1 || parts[1] > 12 || parts[2] < 1 || parts[2] > 31 ||
      parts[3] > 23 || parts[4] > 59 || parts[5] > 60) {
    return bad();
  }
  return DaysFromCivil(parts[0], parts[1], parts[2]) * 86400 + parts[3] * 3600 +
         parts[4] * 60 + parts[5];
}

Status CheckColumns(const RowContext& ctx,
                    const std::vector<std::string_view>& cols, size_t want,
                    const char* sep_name) {
  if (cols.size() != want) {
    return ctx.Error("expected " + std::to_string(want) + " " + sep_name +
                     "-separated fields, got " + std::to_string(cols.size()));
  }
  return Status::Ok();
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

#define ASSIGN_OR_RETURN_IMPL(var, expr, tmp) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  var = std::move(tmp).value()
#define ASSIGN_CAT2(a, b) a##b
#define ASSIGN_CAT(a, b) ASSIGN_CAT2(a, b)
#define ASSIGN_OR_RETURN(var, expr) \
  ASSIGN_OR_RETURN_IMPL(var, expr, ASSIGN_CAT(status_or_, __LINE__))

// Stable-sorts by submit, re-bases to the earliest job.
void Finish(std::vector<TraceJob>& jobs) {
  SortBySubmit(jobs);
  if (jobs.empty()) return;
  const Time first = jobs.front().submit;
  for (TraceJob& j : jobs) j.submit = Time::Zero() + (j.submit - first);
}

}  // namespace

core::StatusOr<Workload> ReadPhillyTrace(const std::string& path,
                                         const Catalog& catalog,
                                         const PhillyOptions& options) {
  ASSIGN_OR_RETURN(const ModelPicker picker,
                   ModelPicker::Make(catalog, options.model_mix));
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const std::vector<std::string_view> lines = Lines(text);
  static constexpr std::string_view kHeader =
      "timestamp,duration,num_gpus,gpu_time,cluster";
  if (lines.empty() || lines[0] != kHeader) {
    return InvalidArgument(path + ":1: expected the header '" +
                           std::string(kHeader) + "'");
  }
  struct Row {
    int64_t ts;
    size_t line;
    double duration;
    int gpus;
    std::string_view vc;
  };
  std::vector<Row> rows;
  size_t total = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const RowContext ctx{path, i + 1};
    const auto cols = Split(lines[i], ',');
    GANDIVA_RETURN_IF_ERROR(CheckColumns(ctx, cols, 5, "comma"));
    Row r;
    r.line = i + 1;
    ASSIGN_OR_RETURN(r.ts, Timestamp(ctx, "timestamp", cols[0]));
    ASSIGN_OR_RETURN(r.duration, Seconds(ctx, "duration", cols[1], true));
    ASSIGN_OR_RETURN(r.gpus, Gpus(ctx, "num_gpus", cols[2]));
    ASSIGN_OR_RETURN(const double gpu_time,
                     Number(ctx, "gpu_time", cols[3], false));
    if (cols[4].empty()) return ctx.FieldError("cluster", "empty");
    r.vc = cols[4];
    ++total;
    if (!options.vc.empty() && r.vc != options.vc) continue;
    if (r.duration < options.min_duration.seconds()) continue;
    if (options.max_gpu_hours > 0 && gpu_time >= options.max_gpu_hours * 3600) {
      continue;
    }
    rows.push_back(r);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.ts < b.ts; });
  if (options.max_jobs > 0 && rows.size() > options.max_jobs) {
    rows.resize(options.max_jobs);
  }
  Workload w;
  w.jobs.reserve(rows.size());
  size_t rounded = 0;
  std::map<int, size_t> by_gpus;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    TraceJob j;
    j.name = "philly-L" + std::to_string(r.line);
    if (static_cast<double>(r.ts - rows.front().ts) > kMaxTraceSeconds) {
      return InvalidArgument(
          path + ":" + std::to_string(r.line) +
          ": field 'timestamp': " + std::to_string(r.ts - rows.front().ts) +
          " s after the first job kept, past what the simulator's clock "
          "takes (at most " +
          std::to_string(static_cast<int64_t>(kMaxTraceSeconds)) + " s)");
    }
    j.submit = Time::FromMicros((r.ts - rows.front().ts) * 1000000);
    j.duration = Duration::FromSeconds(r.duration);
    j.gpus = RoundUpPow2(r.gpus);
    if (j.gpus != r.gpus) ++rounded;
    ++by_gpus[j.gpus];
    Rng rng = Rng::Derive(options.seed, i);
    j.model = picker.Pick(rng, j.gpus);
    j.vc = std::string(r.vc);
    w.jobs.push_back(std::move(j));
  }
  Finish(w.jobs);
  std::ostringstream d;
  d << "philly: " << path << ": " << total << " rows, kept " << w.jobs.size();
  if (!options.vc.empty()) d << " (vc " << options.vc << ")";
  if (options.min_duration > Duration()) {
    d << ", dropped runs < " << options.min_duration.seconds() << " s";
  }
  if (options.max_gpu_hours > 0) {
    d << ", dropped gpu_time >= " << options.max_gpu_hours << " GPU-h";
  }
  if (options.max_jobs > 0) d << ", first " << options.max_jobs << " by time";
  d << "; GPUs";
  for (const auto& [g, n] : by_gpus) d << " " << g << ":" << n;
  d << "; " << rounded
    << " non-power-of-two GPU counts rounded up; model types drawn with seed "
    << options.seed;
  w.description = d.str();
  return w;
}

core::StatusOr<Workload> ReadGavelTrace(const std::string& path,
                                        const Catalog& catalog,
                                        const GavelOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const std::vector<std::string_view> lines = Lines(text);
  std::string vc = BaseName(path);
  if (vc.size() > 6 && vc.ends_with(".trace")) vc.resize(vc.size() - 6);
  Workload w;
  size_t total = 0;
  size_t skipped = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const RowContext ctx{path, i + 1};
    const auto cols = Split(lines[i], '\t');
    GANDIVA_RETURN_IF_ERROR(CheckColumns(ctx, cols, 7, "tab"));
    ++total;
    if (cols[0].empty()) return ctx.FieldError("job_type", "empty");
    if (cols[1].empty()) return ctx.FieldError("command", "empty");
    if (cols[3] != "0" && cols[3] != "1") {
      return ctx.FieldError("needs_data_dir",
                            "expected 0 or 1, got " + Quoted(cols[3]));
    }
    ASSIGN_OR_RETURN(const int64_t steps,
                     Integer(ctx, "total_steps", cols[4], 1, INT64_C(1) << 50));
    ASSIGN_OR_RETURN(const double arrival,
                     Seconds(ctx, "arrival_time", cols[5], false));
    ASSIGN_OR_RETURN(const int gpus, Gpus(ctx, "scale_factor", cols[6]));
    const auto model = catalog.Find(cols[0]);
    if (!model || !catalog.IsMeasured(*model, gpus)) {
      if (options.skip_unknown) {
        ++skipped;
        continue;
      }
      const std::string pair =
          "('" + std::string(cols[0]) + "', " + std::to_string(gpus) + ")";
      return model
                 ? ctx.FieldError("scale_factor",
                                  "Gavel has no throughput for " + pair +
                                      " on " + GpuTypeName(catalog.gpu_type()) +
                                      " (skip_unknown drops such rows)")
                 : ctx.FieldError("job_type", "unknown model type " +
                                                  Quoted(cols[0]) +
                                                  " (not in the catalog)");
    }
    TraceJob j;
    j.name = vc + "-L" + std::to_string(i + 1);
    j.submit = Time::Zero() + Duration::FromSeconds(arrival);
    const double seconds =
        static_cast<double>(steps) / catalog.IsolatedRate(*model, gpus);
    if (!(seconds <= kMaxTraceSeconds)) {
      return ctx.FieldError(
          "total_steps",
          std::to_string(steps) + " steps take " + std::to_string(seconds) +
              " s alone, past what the simulator's clock "
              "takes (at most " +
              std::to_string(static_cast<int64_t>(kMaxTraceSeconds)) + " s)");
    }
    j.duration = Duration::FromSeconds(seconds);
    j.gpus = gpus;
    j.model = *model;
    j.vc = vc;
    w.jobs.push_back(std::move(j));
  }
  Finish(w.jobs);
  std::ostringstream d;
  d << "gavel: " << path << ": " << total << " rows, kept " << w.jobs.size()
    << ", skipped " << skipped
    << " with no measured (type, scale) throughput on "
    << GpuTypeName(catalog.gpu_type());
  w.description = d.str();
  return w;
}

std::string TiresiasFamily(const std::string& name) {
  if (name.starts_with("vgg") || name == "alexnet") return "VGG16";
  if (name == "resnet18" || name == "resnet34") return "ResNet-18";
  if (name.starts_with("resnet")) return "ResNet-50";
  if (name.starts_with("inception") || name == "googlenet") {
    return "InceptionV3";
  }
  return "";
}

core::StatusOr<Workload> ReadTiresiasTrace(const std::string& path,
                                           const Catalog& catalog) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  const std::vector<std::string_view> lines = Lines(text);
  static constexpr std::string_view kHeader =
      "job_id,num_gpu,submit_time,iterations,model_name,duration,interval";
  if (lines.empty() || lines[0] != kHeader) {
    return InvalidArgument(path + ":1: expected the header '" +
                           std::string(kHeader) + "'");
  }
  Workload w;
  std::map<std::string, size_t> by_family;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const RowContext ctx{path, i + 1};
    const auto cols = Split(lines[i], ',');
    GANDIVA_RETURN_IF_ERROR(CheckColumns(ctx, cols, 7, "comma"));
    ASSIGN_OR_RETURN(const int64_t id,
                     Integer(ctx, "job_id", cols[0], 0, INT64_C(1) << 50));
    ASSIGN_OR_RETURN(const int gpus, Gpus(ctx, "num_gpu", cols[1]));
    ASSIGN_OR_RETURN(const double submit,
                     Seconds(ctx, "submit_time", cols[2], false));
    ASSIGN_OR_RETURN(const int64_t iterations,
                     Integer(ctx, "iterations", cols[3], 1, INT64_C(1) << 50));
    (void)iterations;
    const std::string family = TiresiasFamily(std::string(cols[4]));
    const auto model =
        family.empty() ? std::nullopt : catalog.FindFamily(family);
    if (!model) {
      return ctx.FieldError("model_name",
                            "no catalog family for " + Quoted(cols[4]));
    }
    ASSIGN_OR_RETURN(const double duration,
                     Seconds(ctx, "duration", cols[5], true));
    ASSIGN_OR_RETURN(const double interval,
                     Number(ctx, "interval", cols[6], false));
    (void)interval;
    TraceJob j;
    j.name = "tiresias-" + std::to_string(id);
    j.submit = Time::Zero() + Duration::FromSeconds(submit);
    j.duration = Duration::FromSeconds(duration);
    j.gpus = RoundUpPow2(gpus);
    j.model = *model;
    w.jobs.push_back(std::move(j));
    ++by_family[family];
  }
  Finish(w.jobs);
  std::ostringstream d;
  d << "tiresias: " << path << ": " << w.jobs.size() << " jobs; families";
  for (const auto& [f, n] : by_family) d << " " << f << ":" << n;
  w.description = d.str();
  return w;
}

}  // namespace gandiva::sim
