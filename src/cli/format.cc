#include "cli/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace gandiva::cli {

std::string FormatTook(int64_t us) {
  char buf[32];
  if (us < 0) us = 0;
  if (us < 1000) {
    std::snprintf(buf, sizeof buf, "%lldus", static_cast<long long>(us));
  } else if (us < 10'000) {
    std::snprintf(buf, sizeof buf, "%.2fms", static_cast<double>(us) / 1e3);
  } else if (us < 1'000'000) {
    std::snprintf(buf, sizeof buf, "%.1fms", static_cast<double>(us) / 1e3);
  } else if (us < 60'000'000) {
    std::snprintf(buf, sizeof buf, "%.2fs", static_cast<double>(us) / 1e6);
  } else {
    return FormatAge(us);
  }
  return buf;
}

std::string FormatAge(int64_t us) {
  const long long s = std::max<int64_t>(us, 0) / 1'000'000;
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", s / 86400, (s / 3600) % 24);
  }
  return buf;
}

std::string StateName(rpc::JobState state) {
  switch (state) {
    case rpc::QUEUED:
      return "queued";
    case rpc::RUNNING:
      return "running";
    case rpc::SUSPENDED:
      return "suspended";
    case rpc::MIGRATING:
      return "migrating";
    case rpc::FINISHED:
      return "finished";
    case rpc::FAILED:
      return "failed";
    case rpc::KILLED:
      return "killed";
    default:
      return "?";
  }
}

bool IsEnded(rpc::JobState state) {
  return state == rpc::FINISHED || state == rpc::FAILED || state == rpc::KILLED;
}

std::string FormatProgress(int64_t minibatches, int64_t total) {
  std::string s = std::to_string(minibatches);
  if (total > 0) s += "/" + std::to_string(total);
  return s;
}

std::string FormatClock(int64_t unix_us) {
  if (unix_us <= 0) return "-";
  const time_t secs = static_cast<time_t>(unix_us / 1'000'000);
  tm local{};
  localtime_r(&secs, &local);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%03d",
                local.tm_year + 1900, local.tm_mon + 1, local.tm_mday,
                local.tm_hour, local.tm_min, local.tm_sec,
                static_cast<int>((unix_us / 1000) % 1000));
  return buf;
}

std::string JoinGpus(const google::protobuf::RepeatedField<int32_t>& gpus) {
  std::string s;
  for (int32_t g : gpus) {
    if (!s.empty()) s += ",";
    s += std::to_string(g);
  }
  return s;
}

std::string Placement(const rpc::JobInfo& job) {
  if (job.parts_size() > 1) {
    std::string s;
    for (const rpc::JobPart& p : job.parts()) {
      if (!s.empty()) s += "+";
      s += p.server() + ":" + JoinGpus(p.gpus());
    }
    return s;
  }
  if (job.server().empty()) return "-";
  if (job.gpus_size() == 0) return job.server();
  return job.server() + ":" + JoinGpus(job.gpus());
}

int GpusOf(const rpc::JobInfo& job) {
  const bool placed =
      job.state() == rpc::RUNNING || job.state() == rpc::SUSPENDED;
  if (!placed || job.server().empty()) return job.spec().gpus();
  if (job.parts_size() > 1) {
    int n = 0;
    for (const rpc::JobPart& p : job.parts()) n += p.gpus_size();
    return n;
  }
  return job.gpus_size() > 0 ? job.gpus_size() : job.spec().gpus();
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace gandiva::cli
