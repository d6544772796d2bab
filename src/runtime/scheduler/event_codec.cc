#include "runtime/scheduler/event_codec.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "core/policies/queues.h"

namespace gandiva::runtime {

using nlohmann::json;

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// An integer field's value: a JSON integer that T holds, else
// json::type_error (reported as malformed). get<T>() would take a number
// with a fraction or an exponent, or cut a larger integer short (undefined
// behaviour for a float past T's range).
template <class T>
T Int(const json& j) {
  using Limits = std::numeric_limits<T>;
  if (j.is_number_unsigned()) {
    const auto v = j.get<uint64_t>();
    if (std::in_range<T>(v)) return static_cast<T>(v);
  } else if (j.is_number_integer()) {
    const auto v = j.get<int64_t>();
    if (std::in_range<T>(v)) return static_cast<T>(v);
  }
  throw json::type_error::create(
      302,
      "expected an integer from " + std::to_string(Limits::min()) + " to " +
          std::to_string(Limits::max()) + ", got " + j.dump(),
      &j);
}

// Throws json::type_error (reported as malformed) for a member list that
// is not one of strings.
std::vector<std::string> Strings(const json& j) {
  if (!j.is_array()) {
    throw json::type_error::create(302, "expected a list of names", &j);
  }
  std::vector<std::string> out;
  for (const json& v : j) out.push_back(v.get<std::string>());
  return out;
}

// Throws json::exception (reported as malformed).
std::vector<core::QueueConfig> QueuesOf(const json& j) {
  std::vector<core::QueueConfig> out;
  if (j.is_object()) {  // an older store's {"name": quota}
    std::map<std::string, int> quotas;
    for (const auto& [name, quota] : j.items()) quotas[name] = Int<int>(quota);
    return core::FlatQueues(quotas);
  }
  if (!j.is_array()) {
    throw json::type_error::create(302, "expected a list of queues", &j);
  }
  for (const json& o : j) {
    core::QueueConfig q;
    q.name = o.at("name").get<std::string>();
    q.quota = Int<int>(o.at("quota"));
    q.parent = o.value("parent", "");
    if (o.contains("weight")) {
      if (!o.at("weight").is_number()) {
        throw json::type_error::create(302, "expected a number", &o);
      }
      q.weight = o.at("weight").get<double>();
    }
    if (o.contains("limit")) q.limit = Int<int>(o.at("limit"));
    if (o.contains("members")) q.members = Strings(o.at("members"));
    if (o.contains("max_priority")) {
      q.max_priority = Int<int>(o.at("max_priority"));
    }
    out.push_back(std::move(q));
  }
  return out;
}

json SpecToJson(const core::JobSpec& s) {
  json j{{"name", s.name},         {"gpus", s.gpus},
         {"priority", s.priority}, {"owner", s.owner},
         {"group", s.group},       {"vc", s.vc},
         {"elastic", s.elastic},   {"total_minibatches", s.total_minibatches},
         {"model", s.model},       {"carrier", core::CarrierName(s.carrier)}};
  if (s.retries != 0) j["retries"] = s.retries;
  return j;
}

// Throws json::type_error (reported as malformed) for a name no carrier
// has.
core::Carrier CarrierFromJson(const json& j) {
  const std::string name = j.get<std::string>();
  for (core::Carrier c : {core::Carrier::kSelf, core::Carrier::kRestart,
                          core::Carrier::kProcessImage}) {
    if (name == core::CarrierName(c)) return c;
  }
  throw json::type_error::create(302, "unknown carrier '" + name + "'", &j);
}

core::JobSpec SpecFromJson(const json& j) {
  core::JobSpec s;
  s.name = j.at("name").get<std::string>();
  s.gpus = Int<int>(j.at("gpus"));
  s.priority = Int<int>(j.at("priority"));
  s.owner = j.at("owner").get<std::string>();
  s.group = j.at("group").get<std::string>();
  s.vc = j.at("vc").get<std::string>();
  s.elastic = j.at("elastic").get<bool>();
  s.total_minibatches = Int<int64_t>(j.at("total_minibatches"));
  s.model = Int<int32_t>(j.at("model"));
  // Absent from logs written before it was logged: moves freely, until
  // the daemon learns otherwise (CarrierKnown).
  if (j.contains("carrier")) s.carrier = CarrierFromJson(j.at("carrier"));
  if (j.contains("retries")) s.retries = Int<int>(j.at("retries"));
  return s;
}

}  // namespace

const char* EventKindName(const core::EventBody& body) {
  return core::EventName(body);
}

std::string EncodeCoreSpec(const core::JobSpec& spec) {
  return SpecToJson(spec).dump();
}

json QueuesToJson(std::vector<core::QueueConfig> queues) {
  std::sort(queues.begin(), queues.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  json out = json::array();
  for (const core::QueueConfig& q : queues) {
    json o = {{"name", q.name}, {"quota", q.quota}};
    if (!q.parent.empty()) o["parent"] = q.parent;
    if (q.weight >= 0) o["weight"] = q.weight;
    if (q.limit >= 0) o["limit"] = q.limit;
    if (!q.members.empty()) o["members"] = q.members;
    if (q.max_priority) o["max_priority"] = *q.max_priority;
    out.push_back(std::move(o));
  }
  return out;
}

core::StatusOr<std::vector<core::QueueConfig>> QueuesFromJson(const json& j) {
  try {
    return QueuesOf(j);
  } catch (const json::exception& e) {
    return core::InvalidArgument(std::string("queues: ") + e.what());
  }
}

std::string EncodeEvent(const core::EventBody& body) {
  json j = std::visit(
      Overloaded{
          [](const core::JobArrived& e) {
            json out{{"id", e.id.value}, {"spec", SpecToJson(e.spec)}};
            if (!e.placed_on.empty()) {  // an adopted job only
              json gpus = json::array();
              for (core::GpuId g : e.placed_on) gpus.push_back(g.value);
              out["placed_on"] = std::move(gpus);
              out["suspended"] = e.suspended;
            }
            if (e.submitted != core::Time::Never()) {
              out["submitted_us"] = e.submitted.micros();
            }
            return out;
          },
          [](const core::JobFinished& e) {
            json out{{"job", e.job.value}, {"success", e.success}};
            if (e.permanent) out["permanent"] = true;
            if (e.checkpoint) out["checkpoint"] = true;
            return out;
          },
          [](const core::ProfileReport& e) {
            return json{{"job", e.job.value},
                        {"minibatch_rate", e.minibatch_rate},
                        {"minibatches", e.minibatches},
                        {"gpu_memory_gb", e.gpu_memory_gb},
                        {"gpu_utilization", e.gpu_utilization}};
          },
          [](const core::ActionDone& e) {
            return json{{"action", e.action.value},
                        {"job", e.job.value},
                        {"took_us", e.took.micros()}};
          },
          [](const core::ActionFailed& e) {
            return json{{"action", e.action.value},
                        {"job", e.job.value},
                        {"took_us", e.took.micros()},
                        {"reason", e.reason},
                        {"permanent", e.permanent}};
          },
          [](const core::ServerUp& e) {
            return json{
                {"id", e.id.value},
                {"name", e.spec.name},
                {"gpus", e.spec.gpus},
                {"sockets", e.spec.sockets},
                {"switches_per_socket", e.spec.switches_per_socket},
                {"gpu_memory_gb", e.spec.gpu_memory_gb},
                {"process_images_unusable", e.spec.process_images_unusable}};
          },
          [](const core::ServerDown& e) {
            return json{{"id", e.id.value}};
          },
          [](const core::Tick&) { return json::object(); },
          [](const core::KillRequest& e) {
            return json{{"job", e.job.value}, {"reason", e.reason}};
          },
          [](const core::PriorityRequest& e) {
            return json{{"job", e.job.value}, {"priority", e.priority}};
          },
          [](const core::HoldRequest& e) {
            return json{{"job", e.job.value}, {"hold", e.hold}};
          },
          [](const core::MechanismRequest& e) {
            return json{{"job", e.job.value},
                        {"mechanism", core::MechanismKindName(e.kind)},
                        {"server", e.server.value},
                        {"with", e.with.value},
                        {"gpus", e.gpus}};
          },
          [](const core::JobFound& e) {
            json gpus = json::array();
            for (core::GpuId g : e.placed_on) gpus.push_back(g.value);
            return json{{"job", e.job.value},
                        {"placed_on", std::move(gpus)},
                        {"suspended", e.suspended}};
          },
          [](const core::CordonRequest& e) {
            return json{{"server", e.server.value}, {"cordon", e.cordon}};
          },
          [](const core::DrainRequest& e) {
            return json{{"server", e.server.value},
                        {"cordon_only", e.cordon_only}};
          },
          [](const core::CarrierKnown& e) {
            return json{{"job", e.job.value},
                        {"carrier", core::CarrierName(e.carrier)}};
          },
          [](const core::ProcessLost& e) {
            return json{{"job", e.job.value}, {"checkpoint", e.checkpoint}};
          },
          [](const core::QueuesChanged& e) {
            return json{{"queues", QueuesToJson(e.queues)},
                        {"previous", QueuesToJson(e.previous)}};
          },
      },
      body);
  j["kind"] = EventKindName(body);
  return j.dump();
}

core::StatusOr<core::EventBody> DecodeEvent(const std::string& text) {
  try {
    const json j = json::parse(text);
    const std::string kind = j.at("kind").get<std::string>();
    auto job = [&] { return core::JobId(Int<int32_t>(j.at("job"))); };
    auto took = [&] {
      return core::Duration::Micros(Int<int64_t>(j.at("took_us")));
    };
    if (kind == "JobArrived") {
      core::JobArrived e(core::JobId(Int<int32_t>(j.at("id"))),
                         SpecFromJson(j.at("spec")));
      if (j.contains("placed_on")) {
        for (const json& g : j.at("placed_on")) {
          e.placed_on.emplace_back(Int<int32_t>(g));
        }
        e.suspended = j.at("suspended").get<bool>();
      }
      if (j.contains("submitted_us")) {
        e.submitted =
            core::Time::FromMicros(Int<int64_t>(j.at("submitted_us")));
      }
      return core::EventBody(std::move(e));
    }
    if (kind == "JobFinished") {
      return core::EventBody(core::JobFinished{
          job(), j.at("success").get<bool>(), j.value("permanent", false),
          j.value("checkpoint", false)});
    }
    if (kind == "ProfileReport") {
      core::ProfileReport p;
      p.job = job();
      p.minibatch_rate = j.at("minibatch_rate").get<double>();
      p.minibatches = Int<int64_t>(j.at("minibatches"));
      p.gpu_memory_gb = j.at("gpu_memory_gb").get<double>();
      p.gpu_utilization = j.at("gpu_utilization").get<double>();
      return core::EventBody(p);
    }
    if (kind == "ActionDone") {
      return core::EventBody(core::ActionDone{
          core::ActionId(Int<int64_t>(j.at("action"))), job(), took()});
    }
    if (kind == "ActionFailed") {
      return core::EventBody(core::ActionFailed{
          core::ActionId(Int<int64_t>(j.at("action"))), job(), took(),
          j.at("reason").get<std::string>(), j.value("permanent", false)});
    }
    if (kind == "ServerUp") {
      core::ServerUp e;
      e.id = core::ServerId(Int<int32_t>(j.at("id")));
      e.spec.name = j.at("name").get<std::string>();
      e.spec.gpus = Int<int>(j.at("gpus"));
      e.spec.sockets = Int<int>(j.at("sockets"));
      e.spec.switches_per_socket = Int<int>(j.at("switches_per_socket"));
      // Absent from logs written before servers reported it: unknown.
      e.spec.gpu_memory_gb = j.value("gpu_memory_gb", 0.0);
      // Absent from logs written before it was logged: usable.
      e.spec.process_images_unusable =
          j.value("process_images_unusable", std::string());
      return core::EventBody(e);
    }
    if (kind == "ServerDown") {
      return core::EventBody(
          core::ServerDown{core::ServerId(Int<int32_t>(j.at("id")))});
    }
    if (kind == "Tick") return core::EventBody(core::Tick{});
    if (kind == "KillRequest") {
      return core::EventBody(
          core::KillRequest{job(), j.at("reason").get<std::string>()});
    }
    if (kind == "PriorityRequest") {
      return core::EventBody(
          core::PriorityRequest{job(), Int<int>(j.at("priority"))});
    }
    if (kind == "HoldRequest") {
      return core::EventBody(
          core::HoldRequest{job(), j.at("hold").get<bool>()});
    }
    if (kind == "MechanismRequest") {
      core::MechanismRequest m;
      m.job = job();
      const std::string mech = j.at("mechanism").get<std::string>();
      using K = core::MechanismRequest::Kind;
      bool known = false;
      for (K k : {K::kMigrate, K::kPack, K::kUnpack, K::kResize}) {
        if (mech == core::MechanismKindName(k)) {
          m.kind = k;
          known = true;
        }
      }
      if (!known) {
        return core::InvalidArgument("event: unknown mechanism '" + mech + "'");
      }
      m.server = core::ServerId(Int<int32_t>(j.at("server")));
      m.with = core::JobId(Int<int32_t>(j.at("with")));
      m.gpus = Int<int>(j.at("gpus"));
      return core::EventBody(m);
    }
    if (kind == "JobFound") {
      core::JobFound e{job(), {}, j.at("suspended").get<bool>()};
      for (const json& g : j.at("placed_on")) {
        e.placed_on.emplace_back(Int<int32_t>(g));
      }
      return core::EventBody(std::move(e));
    }
    if (kind == "CordonRequest") {
      return core::EventBody(
          core::CordonRequest{core::ServerId(Int<int32_t>(j.at("server"))),
                              j.at("cordon").get<bool>()});
    }
    if (kind == "DrainRequest") {
      return core::EventBody(
          core::DrainRequest{core::ServerId(Int<int32_t>(j.at("server"))),
                             j.at("cordon_only").get<bool>()});
    }
    if (kind == "CarrierKnown") {
      return core::EventBody(
          core::CarrierKnown{job(), CarrierFromJson(j.at("carrier"))});
    }
    if (kind == "ProcessLost") {
      return core::EventBody(
          core::ProcessLost{job(), j.at("checkpoint").get<bool>()});
    }
    if (kind == "QueuesChanged") {
      return core::EventBody(core::QueuesChanged{QueuesOf(j.at("queues")),
                                                 QueuesOf(j.at("previous"))});
    }
    return core::InvalidArgument("event: unknown kind '" + kind + "'");
  } catch (const json::exception& e) {
    return core::InvalidArgument(std::string("event: malformed JSON: ") +
                                 e.what());
  }
}

}  // namespace gandiva::runtime
