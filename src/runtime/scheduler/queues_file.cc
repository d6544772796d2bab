#include "runtime/scheduler/queues_file.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

namespace gandiva::runtime {
namespace {

bool GoodName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

core::StatusOr<std::map<std::string, int>> ParseQueues(
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
  const YAML::Node list = root["queues"];
  if (!list.IsSequence()) {
    return core::InvalidArgument(source + ": field 'queues': must be a list");
  }
  std::map<std::string, int> quotas;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node q = list[i];
    std::string where = source + ": queue " + std::to_string(i + 1);
    if (!q.IsMap()) {
      return core::InvalidArgument(where +
                                   ": must be a map with 'name' and 'quota'");
    }
    std::string name;
    bool have_quota = false;
    int quota = 0;
    for (const auto& kv : q) {
      const std::string key = kv.first.as<std::string>("");
      if (key == "name") {
        if (!kv.second.IsScalar()) {
          return core::InvalidArgument(where +
                                       ": field 'name': must be a string");
        }
        name = kv.second.as<std::string>();
        if (!GoodName(name)) {
          return core::InvalidArgument(
              where +
              ": field 'name': must be 1 to 64 of A-Z a-z 0-9 . _ -, "
              "got '" +
              name + "'");
        }
        where += " ('" + name + "')";
      }
    }
    for (const auto& kv : q) {
      const std::string key = kv.first.as<std::string>("");
      if (key == "name") continue;
      if (key != "quota") {
        return core::InvalidArgument(where + ": unknown field '" + key +
                                     "' (known: name, quota)");
      }
      const std::string raw =
          kv.second.IsScalar() ? kv.second.as<std::string>() : "";
      long long v = -1;
      size_t used = 0;
      try {
        v = std::stoll(raw, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != raw.size() || v < 0 || v > (1 << 20)) {
        return core::InvalidArgument(
            where +
            ": field 'quota': must be a whole number of GPUs, 0 or more, got "
            "'" +
            raw + "'");
      }
      quota = static_cast<int>(v);
      have_quota = true;
    }
    if (name.empty()) {
      return core::InvalidArgument(where + ": field 'name': is missing");
    }
    if (!have_quota) {
      return core::InvalidArgument(where + ": field 'quota': is missing");
    }
    if (!quotas.emplace(name, quota).second) {
      return core::InvalidArgument(where + ": field 'name': '" + name +
                                   "' is named twice");
    }
  }
  return quotas;
}

core::StatusOr<std::map<std::string, int>> LoadQueuesFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) return core::InvalidArgument(path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return ParseQueues(text.str(), path);
}

}  // namespace gandiva::runtime
