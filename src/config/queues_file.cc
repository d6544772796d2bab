#include "config/queues_file.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace gandiva::config {
namespace {

constexpr const char* kKnown =
    "name, quota, weight, limit, members, max_priority, queues";

bool GoodName(const std::string& name, bool member) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                    c == '.' || (member && c == '@');
    if (!ok) return false;
  }
  return true;
}

std::string Raw(const YAML::Node& n) {
  return n.IsScalar() ? n.as<std::string>() : "";
}

// A whole number in [lo, hi] from `n`, or an error naming `field`.
core::StatusOr<long long> WholeNumber(const YAML::Node& n,
                                      const std::string& where,
                                      const std::string& field,
                                      const std::string& what, long long lo,
                                      long long hi) {
  const std::string raw = Raw(n);
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(raw, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != raw.size() || v < lo || v > hi) {
    return core::InvalidArgument(where + ": field '" + field + "': must be " +
                                 what + ", got '" + raw + "'");
  }
  return v;
}

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  // The queues of `list`, under `parent`; `place` numbers them ("1.2.").
  core::Status List(const YAML::Node& list, const std::string& parent,
                    const std::string& place) {
    if (!list.IsSequence()) {
      return core::InvalidArgument(
          source_ + ": " +
          (parent.empty() ? std::string("field 'queues'")
                          : "queue '" + parent + "': field 'queues'") +
          ": must be a list");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      if (core::Status s = One(list[i], parent, place + std::to_string(i + 1));
          !s.ok()) {
        return s;
      }
    }
    return core::Status::Ok();
  }

  std::vector<core::QueueConfig> Take() { return std::move(out_); }

 private:
  core::Status One(const YAML::Node& q, const std::string& parent,
                   const std::string& place) {
    std::string where = source_ + ": queue " + place;
    if (!q.IsMap()) {
      return core::InvalidArgument(where +
                                   ": must be a map with 'name' and 'quota'");
    }
    core::QueueConfig c;
    c.parent = parent;
    if (const YAML::Node name = q["name"]; name) {
      c.name = Raw(name);
      if (!GoodName(c.name, false)) {
        return core::InvalidArgument(
            where +
            ": field 'name': must be 1 to 64 of A-Z a-z 0-9 . _ -, got '" +
            c.name.substr(0, 80) + "'");
      }
      where += " ('" + c.name + "')";
    } else {
      return core::InvalidArgument(where + ": field 'name': is missing");
    }
    if (!names_.insert(c.name).second) {
      return core::InvalidArgument(where + ": field 'name': '" + c.name +
                                   "' is named twice");
    }
    bool have_quota = false;
    std::optional<YAML::Node> children;
    for (const auto& kv : q) {
      const std::string key = kv.first.as<std::string>("");
      const YAML::Node& v = kv.second;
      if (key == "name") continue;
      if (key == "quota") {
        auto n = WholeNumber(v, where, key, "a whole number of GPUs, 0 or more",
                             0, 1 << 20);
        if (!n.ok()) return n.status();
        c.quota = static_cast<int>(*n);
        have_quota = true;
      } else if (key == "limit") {
        auto n = WholeNumber(v, where, key, "a whole number of GPUs, 0 or more",
                             0, 1 << 20);
        if (!n.ok()) return n.status();
        c.limit = static_cast<int>(*n);
      } else if (key == "max_priority") {
        auto n = WholeNumber(v, where, key, "a whole number", -1000000000,
                             1000000000);
        if (!n.ok()) return n.status();
        c.max_priority = static_cast<int>(*n);
      } else if (key == "weight") {
        const std::string raw = Raw(v);
        double w = -1;
        size_t used = 0;
        try {
          w = std::stod(raw, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != raw.size() || !std::isfinite(w) || w < 0 ||
            w > 1e6) {
          return core::InvalidArgument(
              where +
              ": field 'weight': must be a number from 0 to 1e6, got '" + raw +
              "'");
        }
        c.weight = w;
      } else if (key == "members") {
        if (!v.IsSequence()) {
          return core::InvalidArgument(
              where + ": field 'members': must be a list of user names");
        }
        std::set<std::string> seen;
        for (const YAML::Node& m : v) {
          const std::string user = Raw(m);
          if (!GoodName(user, true)) {
            return core::InvalidArgument(
                where +
                ": field 'members': must be user names of 1 to 64 of A-Z a-z "
                "0-9 . _ @ -, got '" +
                user.substr(0, 80) + "'");
          }
          if (seen.insert(user).second) c.members.push_back(user);
        }
      } else if (key == "queues") {
        children = v;
      } else {
        return core::InvalidArgument(where + ": unknown field '" + key +
                                     "' (known: " + kKnown + ")");
      }
    }
    if (!have_quota) {
      return core::InvalidArgument(where + ": field 'quota': is missing");
    }
    const std::string name = c.name;
    out_.push_back(std::move(c));
    if (children) return List(*children, name, place + ".");
    return core::Status::Ok();
  }

  std::string source_;
  std::set<std::string> names_;
  std::vector<core::QueueConfig> out_;
};

}  // namespace

core::StatusOr<std::vector<core::QueueConfig>> ParseQueues(
    const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return core::InvalidArgument(source + ": not YAML: " + e.what());
  }
  if (!root.IsMap() || !root["queues"]) {
    return core::InvalidArgument(source +
                                 ": expected a map with a list 'queues'");
  }
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>("");
    if (key != "queues") {
      return core::InvalidArgument(source + ": unknown field '" + key +
                                   "' (known: queues)");
    }
  }
  Parser parser(source);
  if (core::Status s = parser.List(root["queues"], "", ""); !s.ok()) return s;
  std::vector<core::QueueConfig> queues = parser.Take();
  if (core::Status s = core::CheckQueues(queues); !s.ok()) {
    return core::InvalidArgument(source + ": " + s.message());
  }
  return queues;
}

core::StatusOr<std::vector<core::QueueConfig>> LoadQueuesFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return core::InvalidArgument(path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return ParseQueues(text.str(), path);
}

}  // namespace gandiva::config
