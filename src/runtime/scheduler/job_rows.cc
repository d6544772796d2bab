// A job's row in the store and its published info, each from the other
// (job_rows.h).

#include "runtime/scheduler/job_rows.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>

namespace gandiva::runtime {

using nlohmann::json;

rpc::JobInfo InfoOfArchived(const JobRow& r) {
  rpc::JobInfo i;
  i.set_id(r.id);
  (void)google::protobuf::util::JsonStringToMessage(r.spec_json,
                                                    i.mutable_spec());
  i.set_state(static_cast<rpc::JobState>(r.state));
  i.set_submitted_us(r.submitted_us);
  i.set_started_us(r.started_us);
  i.set_ended_us(r.ended_us);
  if (r.exit_code) i.set_exit_code(*r.exit_code);
  rpc::Progress* p = i.mutable_progress();
  p->set_minibatches(r.minibatches);
  p->set_minibatch_rate(r.minibatch_rate);
  p->set_metric(r.metric);
  p->set_metric_minibatches(r.metric_minibatches);
  p->set_metric_reports(r.metric_reports);
  p->set_uses_library(r.uses_library);
  i.set_uses_library(r.uses_library);
  i.set_server(r.server);
  try {
    for (int32_t g : json::parse(r.gpus_json).get<std::vector<int32_t>>()) {
      i.add_gpus(g);
    }
  } catch (const json::exception&) {
    // Left empty: the row's GPUs are not a list of indices.
  }
  i.set_suspends(r.suspends);
  i.set_resumes(r.resumes);
  i.set_priority(i.spec().priority());
  i.set_archived(true);
  return i;
}

JobRow RowOf(const rpc::JobInfo& i, const JobExtra& x) {
  JobRow r;
  r.id = i.id();
  r.spec_json = x.spec_json;
  r.state = i.state();
  r.submitted_us = i.submitted_us();
  r.started_us = i.started_us();
  r.ended_us = i.ended_us();
  r.exit_code = x.exit_code;
  r.minibatches = i.progress().minibatches();
  r.minibatch_rate = i.progress().minibatch_rate();
  r.uses_library = i.uses_library();
  r.server = i.server();
  r.gpus_json =
      json(std::vector<int32_t>(i.gpus().begin(), i.gpus().end())).dump();
  r.suspends = i.suspends();
  r.resumes = i.resumes();
  r.metric = i.progress().metric();
  r.metric_minibatches = i.progress().metric_minibatches();
  r.metric_reports = i.progress().metric_reports();
  return r;
}

bool SameAsWritten(const rpc::JobInfo& i, const JobExtra& x,
                   bool but_progress) {
  const JobRow& w = x.written;
  if (x.exit_code != w.exit_code || i.state() != w.state ||
      i.started_us() != w.started_us || i.ended_us() != w.ended_us ||
      i.submitted_us() != w.submitted_us ||
      i.uses_library() != w.uses_library || i.server() != w.server ||
      i.suspends() != w.suspends || i.resumes() != w.resumes) {
    return false;
  }
  if (!but_progress &&
      (i.progress().minibatches() != w.minibatches ||
       i.progress().minibatch_rate() != w.minibatch_rate ||
       i.progress().metric() != w.metric ||
       i.progress().metric_minibatches() != w.metric_minibatches ||
       i.progress().metric_reports() != w.metric_reports)) {
    return false;
  }
  // The GPUs as RowOf writes them ("[0,1]"), compared in place.
  const std::string& g = w.gpus_json;
  size_t at = 0;
  auto take = [&](char c) { return at < g.size() && g[at++] == c; };
  if (!take('[')) return false;
  for (int k = 0; k < i.gpus_size(); ++k) {
    if (k > 0 && !take(',')) return false;
    char buf[16];
    const auto r = std::to_chars(buf, buf + sizeof buf, i.gpus(k));
    for (const char* c = buf; c != r.ptr; ++c) {
      if (!take(*c)) return false;
    }
  }
  return take(']') && at == g.size();
}

}  // namespace gandiva::runtime
