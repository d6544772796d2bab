#include "runtime/scheduler/etcd_store.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

namespace gandiva::runtime {

namespace ep = etcdserverpb;
using json = nlohmann::json;

namespace {

std::string Pad(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020" PRId64, n);
  return buf;
}

ep::RequestOp PutOp(const std::string& key, const std::string& value) {
  ep::RequestOp op;
  ep::PutRequest* p = op.mutable_request_put();
  p->set_key(key);
  p->set_value(value);
  return op;
}

ep::RequestOp DeleteOp(const std::string& key, const std::string& end) {
  ep::RequestOp op;
  ep::DeleteRangeRequest* d = op.mutable_request_delete_range();
  d->set_key(key);
  d->set_range_end(end);
  return op;
}

json JobJson(const JobRow& r) {
  return {{"id", r.id},
          {"spec", r.spec_json},
          {"state", r.state},
          {"submitted_us", r.submitted_us},
          {"started_us", r.started_us},
          {"ended_us", r.ended_us},
          {"exit_code", r.exit_code ? json(*r.exit_code) : json()},
          {"minibatches", r.minibatches},
          {"minibatch_rate", r.minibatch_rate},
          {"uses_library", r.uses_library},
          {"server", r.server},
          {"gpus", r.gpus_json},
          {"suspends", r.suspends},
          {"resumes", r.resumes},
          {"metric", r.metric},
          {"metric_minibatches", r.metric_minibatches},
          {"metric_reports", r.metric_reports}};
}

JobRow JobOf(const json& j) {
  JobRow r;
  r.id = j.at("id").get<int64_t>();
  r.spec_json = j.at("spec").get<std::string>();
  r.state = j.at("state").get<int>();
  r.submitted_us = j.at("submitted_us").get<int64_t>();
  r.started_us = j.at("started_us").get<int64_t>();
  r.ended_us = j.at("ended_us").get<int64_t>();
  if (!j.at("exit_code").is_null()) {
    r.exit_code = j.at("exit_code").get<int32_t>();
  }
  r.minibatches = j.at("minibatches").get<int64_t>();
  r.minibatch_rate = j.at("minibatch_rate").get<double>();
  r.uses_library = j.at("uses_library").get<bool>();
  r.server = j.at("server").get<std::string>();
  r.gpus_json = j.at("gpus").get<std::string>();
  r.suspends = j.at("suspends").get<int32_t>();
  r.resumes = j.at("resumes").get<int32_t>();
  r.metric = j.value("metric", 0.0);
  r.metric_minibatches = j.value("metric_minibatches", int64_t{0});
  r.metric_reports = j.value("metric_reports", int64_t{0});
  return r;
}

json ServerJson(const ServerRow& r) {
  return {{"id", r.id},
          {"name", r.name},
          {"address", r.address},
          {"gpus", r.gpus_json},
          {"sockets", r.sockets},
          {"switches_per_socket", r.switches_per_socket},
          {"away_since_us", r.away_since_us},
          {"away_cordon", r.away_cordon}};
}

ServerRow ServerOf(const json& j) {
  return ServerRow{
      j.at("id").get<int32_t>(), j.at("name").get<std::string>(),
      j.at("address").get<std::string>(), j.at("gpus").get<std::string>(),
      j.at("sockets").get<int32_t>(),
      j.at("switches_per_socket").get<int32_t>(),
      // Absent in rows from before agents said they stopped.
      j.value("away_since_us", int64_t{0}), j.value("away_cordon", false)};
}

json HistoryJson(const HistoryRow& r) {
  return {{"job", r.job}, {"time_us", r.time_us}, {"action", r.action},
          {"ok", r.ok},   {"took_us", r.took_us}, {"detail", r.detail}};
}

HistoryRow HistoryOf(const json& j) {
  return HistoryRow{
      j.at("job").get<int64_t>(),        j.at("time_us").get<int64_t>(),
      j.at("action").get<std::string>(), j.at("ok").get<bool>(),
      j.at("took_us").get<int64_t>(),    j.at("detail").get<std::string>()};
}

// Parses a stored value; a bad one names its key.
template <typename T, typename F>
core::StatusOr<T> Parse(const ep::KeyValue& kv, F&& of) {
  try {
    return of(json::parse(kv.value()));
  } catch (const json::exception& e) {
    return core::IoError("etcd key '" + kv.key() + "': " + e.what());
  }
}

// The name in a job's spec JSON ("" none, or not JSON).
std::string SpecName(const std::string& spec_json) {
  const json spec = json::parse(spec_json, nullptr, false);
  if (!spec.is_object()) return "";
  auto it = spec.find("name");
  return it != spec.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

EtcdStore::EtcdStore(std::shared_ptr<Leadership> leadership)
    : lead_(std::move(leadership)),
      etcd_(lead_->client()),
      p_(lead_->prefix()) {}

std::string EtcdStore::Key(const std::string& table, int64_t n) const {
  return p_ + table + "/" + Pad(n);
}

core::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(
    std::shared_ptr<Leadership> leadership) {
  std::unique_ptr<EtcdStore> s(new EtcdStore(std::move(leadership)));
  auto job = s->Counter("job");
  if (!job.ok()) return job.status();
  auto history = s->Counter("history");
  if (!history.ok()) return history.status();
  auto seq = s->Counter("event");
  if (!seq.ok()) return seq.status();
  s->last_job_ = *job;
  s->last_history_ = *history;
  s->last_seq_ = *seq;
  ep::RangeRequest r;
  r.set_key(s->p_ + "snapshot");
  auto head = s->etcd_.Range(r);
  if (!head.ok()) return head.status();
  if (!head->kvs().empty()) {
    auto h =
        Parse<std::pair<int64_t, int64_t>>(head->kvs(0), [](const json& j) {
          return std::pair(j.at("seq").get<int64_t>(),
                           j.at("gen").get<int64_t>());
        });
    if (!h.ok()) return h.status();
    s->snapshot_seq_ = h->first;
    s->snapshot_gen_ = h->second;
  }
  // Archives from before archive-ended/ existed get their keys there.
  GANDIVA_RETURN_IF_ERROR(s->IndexArchive());
  return s;
}

core::StatusOr<int64_t> EtcdStore::Counter(const std::string& name) {
  ep::RangeRequest r;
  r.set_key(p_ + "counters/" + name);
  auto rep = etcd_.Range(r);
  if (!rep.ok()) return rep.status();
  if (rep->kvs().empty()) return int64_t{0};
  try {
    return std::stoll(rep->kvs(0).value());
  } catch (const std::exception&) {
    return core::IoError("etcd key '" + r.key() + "': not a number");
  }
}

core::StatusOr<ep::TxnResponse> EtcdStore::Fenced(
    std::vector<ep::RequestOp> ops) {
  ep::TxnRequest t;
  ep::Compare* c = t.add_compare();
  c->set_key(lead_->leader_key());
  c->set_target(ep::Compare::CREATE);
  c->set_result(ep::Compare::EQUAL);
  c->set_create_revision(lead_->fence());
  for (ep::RequestOp& op : ops) *t.add_success() = std::move(op);
  auto rep = etcd_.Txn(t);
  if (!rep.ok()) return rep.status();
  if (!rep->succeeded()) {
    const std::string why =
        "a write to etcd was refused: this daemon no longer holds '" +
        lead_->leader_key() + "'";
    lead_->MarkLost(why);
    return core::FailedPrecondition(why);
  }
  return rep;
}

core::Status EtcdStore::Scan(
    const std::string& from, const std::string& end, int64_t page,
    const std::function<core::Status(const ep::KeyValue&)>& f) {
  ep::RangeRequest r;
  r.set_key(from);
  r.set_range_end(end);
  r.set_limit(page);
  for (;;) {
    auto rep = etcd_.Range(r);
    if (!rep.ok()) return rep.status();
    // Every page at the revision of the first: one consistent view.
    if (r.revision() == 0) r.set_revision(rep->header().revision());
    for (const ep::KeyValue& kv : rep->kvs()) GANDIVA_RETURN_IF_ERROR(f(kv));
    if (!rep->more() || rep->kvs().empty()) return core::Status::Ok();
    r.set_key(rep->kvs(rep->kvs_size() - 1).key() + std::string(1, '\0'));
  }
}

core::StatusOr<std::optional<std::string>> EtcdStore::GetMeta(
    const std::string& key) {
  std::lock_guard lock(mu_);
  ep::RangeRequest r;
  r.set_key(p_ + "meta/" + key);
  auto rep = etcd_.Range(r);
  if (!rep.ok()) return rep.status();
  if (rep->kvs().empty()) return std::optional<std::string>();
  return std::optional<std::string>(rep->kvs(0).value());
}

core::Status EtcdStore::SetMeta(const std::string& key,
                                const std::string& value) {
  std::lock_guard lock(mu_);
  std::vector<ep::RequestOp> ops;
  ops.push_back(PutOp(p_ + "meta/" + key, value));
  return Fenced(std::move(ops)).status();
}

std::pair<size_t, core::Status> EtcdStore::PutNumbered(
    const std::string& table, const std::string& counter, size_t n,
    const std::function<std::string(size_t)>& value, int64_t* last) {
  size_t put = 0;
  std::vector<ep::RequestOp> ops;
  size_t bytes = 0;
  int64_t number = *last;
  auto flush = [&]() -> core::Status {
    if (ops.empty()) return core::Status::Ok();
    const size_t rows = ops.size();
    ops.push_back(PutOp(p_ + "counters/" + counter, std::to_string(number)));
    GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
    *last = number;
    put += rows;
    ops.clear();
    bytes = 0;
    return core::Status::Ok();
  };
  for (size_t i = 0; i < n; ++i) {
    std::string key = Key(table, number + 1);
    std::string v = value(i);
    // Room for the counter's put.
    if (static_cast<int>(ops.size()) + 2 > kMaxOps ||
        bytes + key.size() + v.size() > kMaxBytes) {
      if (core::Status s = flush(); !s.ok()) return {put, s};
    }
    ++number;
    bytes += key.size() + v.size();
    ops.push_back(PutOp(key, v));
  }
  return {put, flush()};
}

Store::Inserted EtcdStore::InsertJobs(std::span<const std::string> specs_json,
                                      int64_t submitted_us) {
  std::lock_guard lock(mu_);
  const int64_t first = last_job_ + 1;
  auto [count, status] = PutNumbered(
      "jobs", "job", specs_json.size(),
      [&](size_t i) {
        JobRow row;
        row.id = first + static_cast<int64_t>(i);
        row.spec_json = specs_json[i];
        row.state = 1;  // QUEUED
        row.submitted_us = submitted_us;
        row.gpus_json = "[]";
        return JobJson(row).dump();
      },
      &last_job_);
  return {count, count > 0 ? first : 0, std::move(status)};
}

core::StatusOr<std::pair<int64_t, int64_t>> EtcdStore::MarkJobIdsLost(
    int64_t id) {
  std::lock_guard lock(mu_);
  // The leader is the only writer: last_job_ is the counter's value.
  if (id <= last_job_) return std::pair<int64_t, int64_t>{0, 0};
  auto read = LostIdsLocked();
  if (!read.ok()) return read.status();
  IdRanges lost = std::move(*read);
  const std::pair<int64_t, int64_t> added{last_job_ + 1, id};
  AddIdRange(&lost, added.first, added.second);
  std::vector<ep::RequestOp> ops;
  ops.push_back(PutOp(p_ + "counters/job", std::to_string(id)));
  ops.push_back(
      PutOp(p_ + "meta/" + kRestoreLostJobsMeta, FormatIdRanges(lost)));
  GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
  last_job_ = id;
  return added;
}

core::Status EtcdStore::AdoptJob(int64_t id, const std::string& spec_json,
                                 int64_t submitted_us) {
  std::lock_guard lock(mu_);
  auto read = LostIdsLocked();
  if (!read.ok()) return read.status();
  IdRanges lost = std::move(*read);
  GANDIVA_RETURN_IF_ERROR(TakeLostId(&lost, id));
  JobRow row;
  row.id = id;
  row.spec_json = spec_json;
  row.state = 1;  // QUEUED
  row.submitted_us = submitted_us;
  row.gpus_json = "[]";
  std::vector<ep::RequestOp> ops;
  ops.push_back(PutOp(Key("jobs", id), JobJson(row).dump()));
  ops.push_back(
      PutOp(p_ + "meta/" + kRestoreLostJobsMeta, FormatIdRanges(lost)));
  return Fenced(std::move(ops)).status();
}

core::StatusOr<IdRanges> EtcdStore::LostIdsLocked() {
  const std::string key = p_ + "meta/" + kRestoreLostJobsMeta;
  ep::RangeRequest r;
  r.set_key(key);
  auto rep = etcd_.Range(r);
  if (!rep.ok()) return rep.status();
  if (rep->kvs().empty()) return IdRanges{};
  auto parsed = ParseIdRanges(rep->kvs(0).value());
  if (!parsed.ok()) {
    return core::IoError("etcd key '" + key +
                         "': " + parsed.status().message());
  }
  return parsed;
}

core::StatusOr<std::vector<JobRow>> EtcdStore::LoadJobs() {
  std::lock_guard lock(mu_);
  std::vector<JobRow> out;
  GANDIVA_RETURN_IF_ERROR(Scan(p_ + "jobs/",
                               EtcdClient::PrefixEnd(p_ + "jobs/"), 1000,
                               [&](const ep::KeyValue& kv) -> core::Status {
                                 auto r = Parse<JobRow>(kv, JobOf);
                                 if (!r.ok()) return r.status();
                                 out.push_back(std::move(*r));
                                 return core::Status::Ok();
                               }));
  return out;
}

core::StatusOr<std::optional<JobRow>> EtcdStore::LoadJob(int64_t id) {
  std::lock_guard lock(mu_);
  for (const char* table : {"jobs", "archive"}) {
    ep::RangeRequest r;
    r.set_key(Key(table, id));
    auto rep = etcd_.Range(r);
    if (!rep.ok()) return rep.status();
    if (rep->kvs().empty()) continue;
    auto row = Parse<JobRow>(rep->kvs(0), JobOf);
    if (!row.ok()) return row.status();
    return std::optional<JobRow>(std::move(*row));
  }
  return std::optional<JobRow>();
}

core::StatusOr<std::vector<JobRow>> EtcdStore::LoadArchivedJobs(
    int64_t after_id, int limit, const std::optional<std::string>& name) {
  std::lock_guard lock(mu_);
  std::vector<JobRow> out;
  if (!name) {
    ep::RangeRequest r;
    r.set_key(Key("archive", std::max<int64_t>(after_id, 0) + 1));
    r.set_range_end(EtcdClient::PrefixEnd(p_ + "archive/"));
    r.set_limit(limit);
    auto rep = etcd_.Range(r);
    if (!rep.ok()) return rep.status();
    for (const ep::KeyValue& kv : rep->kvs()) {
      auto row = Parse<JobRow>(kv, JobOf);
      if (!row.ok()) return row.status();
      out.push_back(std::move(*row));
    }
    return out;
  }
  // The ids from the name's index, then their rows, kMaxOps reads a
  // transaction (a row pruned meanwhile is passed by).
  ep::RangeRequest r;
  r.set_key(NameKey(*name, std::max<int64_t>(after_id, 0) + 1));
  r.set_range_end(EtcdClient::PrefixEnd(NamePrefix(*name)));
  r.set_limit(limit);
  r.set_keys_only(true);
  auto keys = etcd_.Range(r);
  if (!keys.ok()) return keys.status();
  for (int at = 0; at < keys->kvs_size(); at += kMaxOps) {
    ep::TxnRequest t;
    for (int i = at; i < std::min(keys->kvs_size(), at + kMaxOps); ++i) {
      const std::string& key = keys->kvs(i).key();
      int64_t id = 0;
      try {
        id = std::stoll(key.substr(key.rfind('/') + 1));
      } catch (const std::exception&) {
        return core::IoError("etcd key '" + key + "': no job id at its end");
      }
      t.add_success()->mutable_request_range()->set_key(Key("archive", id));
    }
    auto rep = etcd_.Txn(t);
    if (!rep.ok()) return rep.status();
    for (const ep::ResponseOp& op : rep->responses()) {
      for (const ep::KeyValue& kv : op.response_range().kvs()) {
        auto row = Parse<JobRow>(kv, JobOf);
        if (!row.ok()) return row.status();
        out.push_back(std::move(*row));
      }
    }
  }
  return out;
}

std::string EtcdStore::EndedKey(int64_t ended_us, int64_t id) const {
  return p_ + "archive-ended/" + Pad(ended_us) + "/" + Pad(id);
}

std::string EtcdStore::NamePrefix(const std::string& name) const {
  // In hex: a name holding '/' is not a prefix of another's keys.
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string key = p_ + "archive-name/";
  for (unsigned char c : name) {
    key += kDigits[c >> 4];
    key += kDigits[c & 15];
  }
  return key + "/";
}

std::string EtcdStore::NameKey(const std::string& name, int64_t id) const {
  return NamePrefix(name) + Pad(id);
}

core::Status EtcdStore::ArchiveJobs(std::span<const JobRow> rows) {
  std::lock_guard lock(mu_);
  // Each job's row moves from jobs/ to archive/, with its keys in
  // archive-ended/ and archive-name/, in one transaction.
  std::vector<ep::RequestOp> ops;
  size_t bytes = 0;
  for (const JobRow& r : rows) {
    if (r.id <= 0 || r.id > last_job_) continue;  // never stored: ids are dense
    const std::string value = JobJson(r).dump();
    const std::string key = Key("jobs", r.id);
    const std::string ended = EndedKey(r.ended_us, r.id);
    const std::string named = NameKey(SpecName(r.spec_json), r.id);
    const size_t size =
        2 * key.size() + ended.size() + 2 * named.size() + value.size();
    if (static_cast<int>(ops.size()) + 4 > kMaxOps ||
        bytes + size > kMaxBytes) {
      GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
      ops.clear();
      bytes = 0;
    }
    bytes += size;
    ops.push_back(PutOp(Key("archive", r.id), value));
    ops.push_back(PutOp(ended, named));
    ops.push_back(PutOp(named, ""));
    ops.push_back(DeleteOp(key, ""));
  }
  if (ops.empty()) return core::Status::Ok();
  return Fenced(std::move(ops)).status();
}

core::Status EtcdStore::IndexArchive() {
  const std::string markers[] = {p_ + "counters/archive-ended",
                                 p_ + "counters/archive-name"};
  bool done = true;
  for (const std::string& marker : markers) {
    ep::RangeRequest r;
    r.set_key(marker);
    auto rep = etcd_.Range(r);
    if (!rep.ok()) return rep.status();
    done = done && !rep->kvs().empty();
  }
  if (done) return core::Status::Ok();
  std::vector<ep::RequestOp> ops;
  core::Status scanned = Scan(
      p_ + "archive/", EtcdClient::PrefixEnd(p_ + "archive/"), 1000,
      [&](const ep::KeyValue& kv) -> core::Status {
        auto row = Parse<JobRow>(kv, JobOf);
        if (!row.ok()) return row.status();
        if (static_cast<int>(ops.size()) + 2 > kMaxOps) {
          GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
          ops.clear();
        }
        const std::string named = NameKey(SpecName(row->spec_json), row->id);
        ops.push_back(PutOp(EndedKey(row->ended_us, row->id), named));
        ops.push_back(PutOp(named, ""));
        return core::Status::Ok();
      });
  if (!scanned.ok()) return scanned;
  if (static_cast<int>(ops.size()) + 2 > kMaxOps) {
    GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
    ops.clear();
  }
  for (const std::string& marker : markers) ops.push_back(PutOp(marker, "1"));
  return Fenced(std::move(ops)).status();
}

core::StatusOr<int64_t> EtcdStore::PruneArchive(int64_t ended_before_us,
                                                int64_t limit) {
  std::lock_guard lock(mu_);
  const std::string from = p_ + "archive-ended/";
  const std::string end = from + Pad(std::max<int64_t>(ended_before_us, 0));
  int64_t deleted = 0;
  while (deleted < limit) {
    const int64_t want = std::min<int64_t>(limit - deleted, kMaxOps / 4);
    ep::RangeRequest r;
    r.set_key(from);
    r.set_range_end(end);
    r.set_limit(want);
    auto rep = etcd_.Range(r);
    if (!rep.ok()) return rep.status();
    std::vector<ep::RequestOp> ops;
    for (const ep::KeyValue& kv : rep->kvs()) {
      // archive-ended/ENDED/ID
      const std::string& key = kv.key();
      int64_t id = 0;
      try {
        id = std::stoll(key.substr(key.rfind('/') + 1));
      } catch (const std::exception&) {
        return core::IoError("etcd key '" + key + "': no job id at its end");
      }
      const std::string history = Key("history", id) + "/";
      ops.push_back(DeleteOp(Key("archive", id), ""));
      ops.push_back(DeleteOp(history, EtcdClient::PrefixEnd(history)));
      ops.push_back(DeleteOp(key, ""));
      // Its archive-name/ key (none from before those keys: IndexArchive
      // puts them at Open).
      if (!kv.value().empty()) ops.push_back(DeleteOp(kv.value(), ""));
    }
    if (ops.empty()) break;
    GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
    deleted += rep->kvs_size();
    if (rep->kvs_size() < want) break;
  }
  return deleted;
}

core::StatusOr<std::vector<ServerRow>> EtcdStore::LoadServers() {
  std::lock_guard lock(mu_);
  std::vector<ServerRow> out;
  GANDIVA_RETURN_IF_ERROR(Scan(p_ + "servers/",
                               EtcdClient::PrefixEnd(p_ + "servers/"), 1000,
                               [&](const ep::KeyValue& kv) -> core::Status {
                                 auto r = Parse<ServerRow>(kv, ServerOf);
                                 if (!r.ok()) return r.status();
                                 out.push_back(std::move(*r));
                                 return core::Status::Ok();
                               }));
  return out;
}

core::StatusOr<std::vector<HistoryRow>> EtcdStore::History(int64_t job) {
  std::lock_guard lock(mu_);
  const std::string prefix = Key("history", job) + "/";
  std::vector<HistoryRow> out;
  GANDIVA_RETURN_IF_ERROR(Scan(prefix, EtcdClient::PrefixEnd(prefix), 1000,
                               [&](const ep::KeyValue& kv) -> core::Status {
                                 auto r = Parse<HistoryRow>(kv, HistoryOf);
                                 if (!r.ok()) return r.status();
                                 out.push_back(std::move(*r));
                                 return core::Status::Ok();
                               }));
  return out;
}

core::Status EtcdStore::Write(const WriteBatch& batch) {
  std::lock_guard lock(mu_);
  std::vector<ep::RequestOp> ops;
  size_t bytes = 0;
  int64_t history = last_history_;
  auto flush = [&]() -> core::Status {
    if (ops.empty()) return core::Status::Ok();
    if (history != last_history_) {
      ops.push_back(PutOp(p_ + "counters/history", std::to_string(history)));
    }
    GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
    last_history_ = history;
    ops.clear();
    bytes = 0;
    return core::Status::Ok();
  };
  auto add = [&](std::string key, std::string value) -> core::Status {
    // Room for the history counter's put.
    if (static_cast<int>(ops.size()) + 2 > kMaxOps ||
        bytes + key.size() + value.size() > kMaxBytes) {
      GANDIVA_RETURN_IF_ERROR(flush());
    }
    bytes += key.size() + value.size();
    ops.push_back(PutOp(key, value));
    return core::Status::Ok();
  };
  for (const JobRow& r : batch.jobs) {
    GANDIVA_RETURN_IF_ERROR(add(Key("jobs", r.id), JobJson(r).dump()));
  }
  for (const ServerRow& r : batch.servers) {
    GANDIVA_RETURN_IF_ERROR(add(Key("servers", r.id), ServerJson(r).dump()));
  }
  for (const HistoryRow& r : batch.history) {
    ++history;
    GANDIVA_RETURN_IF_ERROR(
        add(Key("history", r.job) + "/" + Pad(history), HistoryJson(r).dump()));
  }
  return flush();
}

Store::Appended EtcdStore::AppendEvents(std::span<const EventRow> events) {
  std::lock_guard lock(mu_);
  auto [count, status] = PutNumbered(
      "events", "event", events.size(),
      [&](size_t i) {
        const EventRow& e = events[i];
        return json{{"time_us", e.time_us}, {"kind", e.kind}, {"json", e.json}}
            .dump();
      },
      &last_seq_);
  return {count, count > 0 ? last_seq_ : 0, std::move(status)};
}

core::Status EtcdStore::ForEachEvent(
    const std::function<core::Status(const EventRow&)>& f, int64_t after) {
  std::lock_guard lock(mu_);
  const std::string prefix = p_ + "events/";
  return Scan(
      Key("events", std::max<int64_t>(after, 0) + 1),
      EtcdClient::PrefixEnd(prefix), 1000,
      [&](const ep::KeyValue& kv) -> core::Status {
        int64_t seq = 0;
        try {
          seq = std::stoll(kv.key().substr(prefix.size()));
        } catch (const std::exception&) {
          return core::IoError("etcd key '" + kv.key() + "': not an event's");
        }
        auto e = Parse<EventRow>(kv, [seq](const json& j) {
          return EventRow{seq, j.at("time_us").get<int64_t>(),
                          j.at("kind").get<std::string>(),
                          j.at("json").get<std::string>()};
        });
        if (!e.ok()) return e.status();
        return f(*e);
      });
}

core::StatusOr<int64_t> EtcdStore::EventCount() {
  std::lock_guard lock(mu_);
  ep::RangeRequest r;
  r.set_key(p_ + "events/");
  r.set_range_end(EtcdClient::PrefixEnd(p_ + "events/"));
  r.set_count_only(true);
  auto rep = etcd_.Range(r);
  if (!rep.ok()) return rep.status();
  return rep->count();
}

int64_t EtcdStore::LastEventSeq() {
  std::lock_guard lock(mu_);
  return last_seq_;
}

core::Status EtcdStore::WriteSnapshot(const SnapshotRow& snap) {
  std::lock_guard lock(mu_);
  if (snap.seq < 0 || snap.seq > last_seq_) {
    return core::InvalidArgument(
        "snapshot after event " + std::to_string(snap.seq) +
        ", but the last event logged is " + std::to_string(last_seq_));
  }
  const int64_t gen = snapshot_gen_ + 1;
  const std::string data = p_ + "snapshot-data/" + Pad(gen) + "/";
  // The chunks first, one transaction each: nothing names them yet.
  auto put_chunks = [&](const std::string& part,
                        const std::string& bytes) -> core::StatusOr<int64_t> {
    int64_t n = 0;
    for (size_t at = 0; at < bytes.size() || n == 0; at += kMaxBytes, ++n) {
      std::vector<ep::RequestOp> ops;
      ops.push_back(
          PutOp(data + part + "/" + Pad(n), bytes.substr(at, kMaxBytes)));
      GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
    }
    return n;
  };
  auto core_chunks = put_chunks("core", snap.core);
  if (!core_chunks.ok()) return core_chunks.status();
  auto daemon_chunks = put_chunks("daemon", snap.daemon);
  if (!daemon_chunks.ok()) return daemon_chunks.status();
  const json head = {{"seq", snap.seq},
                     {"time_us", snap.time_us},
                     {"gen", gen},
                     {"core_chunks", *core_chunks},
                     {"daemon_chunks", *daemon_chunks}};
  std::vector<ep::RequestOp> ops;
  ops.push_back(PutOp(p_ + "snapshot", head.dump()));
  // The older snapshots' chunks go with it.
  ops.push_back(DeleteOp(p_ + "snapshot-data/", data));
  GANDIVA_RETURN_IF_ERROR(Fenced(std::move(ops)).status());
  snapshot_gen_ = gen;
  snapshot_seq_ = snap.seq;
  return core::Status::Ok();
}

core::StatusOr<int64_t> EtcdStore::DeleteCompactedEvents(int64_t limit) {
  std::lock_guard lock(mu_);
  if (limit <= 0) return int64_t{0};
  ep::RangeRequest r;
  r.set_key(p_ + "events/");
  r.set_range_end(Key("events", snapshot_seq_ + 1));
  r.set_limit(limit);
  r.set_keys_only(true);
  auto keys = etcd_.Range(r);
  if (!keys.ok()) return keys.status();
  const int64_t n = keys->kvs_size();
  if (n > 0) {
    std::vector<ep::RequestOp> ops;
    ops.push_back(DeleteOp(
        keys->kvs(0).key(),
        keys->kvs(static_cast<int>(n - 1)).key() + std::string(1, '\0')));
    auto rep = Fenced(std::move(ops));
    if (!rep.ok()) return rep.status();
    if (n < limit) {
      // The last of them: drop etcd's history of what was overwritten or
      // deleted up to here (best effort; a later compaction does it).
      (void)etcd_.Compact(rep->header().revision());
    }
  }
  return n;
}

core::StatusOr<std::string> EtcdStore::ReadChunks(int64_t gen,
                                                  const std::string& part,
                                                  int64_t chunks) {
  const std::string prefix =
      p_ + "snapshot-data/" + Pad(gen) + "/" + part + "/";
  std::string out;
  int64_t n = 0;
  GANDIVA_RETURN_IF_ERROR(
      Scan(prefix, EtcdClient::PrefixEnd(prefix), 2,
           [&](const ep::KeyValue& kv) -> core::Status {
             if (kv.key() != prefix + Pad(n)) {
               return core::IoError("etcd key '" + kv.key() +
                                    "': expected chunk " + std::to_string(n));
             }
             out += kv.value();
             ++n;
             return core::Status::Ok();
           }));
  if (n != chunks) {
    return core::IoError("etcd: snapshot " + std::to_string(gen) + " has " +
                         std::to_string(n) + " " + part + " chunks, not " +
                         std::to_string(chunks));
  }
  return out;
}

core::StatusOr<std::optional<SnapshotRow>> EtcdStore::LoadSnapshot() {
  std::lock_guard lock(mu_);
  ep::RangeRequest r;
  r.set_key(p_ + "snapshot");
  auto rep = etcd_.Range(r);
  if (!rep.ok()) return rep.status();
  if (rep->kvs().empty()) return std::optional<SnapshotRow>();
  struct Head {
    int64_t seq, time_us, gen, core_chunks, daemon_chunks;
  };
  auto head = Parse<Head>(rep->kvs(0), [](const json& j) {
    return Head{j.at("seq").get<int64_t>(), j.at("time_us").get<int64_t>(),
                j.at("gen").get<int64_t>(), j.at("core_chunks").get<int64_t>(),
                j.at("daemon_chunks").get<int64_t>()};
  });
  if (!head.ok()) return head.status();
  auto core_bytes = ReadChunks(head->gen, "core", head->core_chunks);
  if (!core_bytes.ok()) return core_bytes.status();
  auto daemon = ReadChunks(head->gen, "daemon", head->daemon_chunks);
  if (!daemon.ok()) return daemon.status();
  return std::optional<SnapshotRow>(SnapshotRow{
      head->seq, head->time_us, std::move(*core_bytes), std::move(*daemon)});
}

}  // namespace gandiva::runtime
