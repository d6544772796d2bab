#include "runtime/auth/subject.h"

namespace gandiva::runtime {

std::vector<std::pair<std::string, std::string>> SubjectAttributes(
    std::string_view subject) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string part;
  auto flush = [&] {
    const size_t eq = part.find('=');
    if (eq != std::string::npos) {
      out.emplace_back(part.substr(0, eq), part.substr(eq + 1));
    }
    part.clear();
  };
  for (size_t i = 0; i < subject.size(); ++i) {
    const char c = subject[i];
    if (c == '\\' && i + 1 < subject.size()) {
      part += subject[++i];
    } else if (c == ',' || c == '+') {
      flush();
    } else {
      part += c;
    }
  }
  flush();
  return out;
}

std::string AgentOfSubject(std::string_view subject) {
  std::string cn;
  bool ou_seen = false;
  bool agent = false;
  for (const auto& [key, value] : SubjectAttributes(subject)) {
    if (key == "CN") cn = value;
    if (key == "OU" && !ou_seen) {
      ou_seen = true;
      agent = value == "agent";
    }
  }
  return agent ? cn : "";
}

std::string CheckFetchCaller(const std::vector<std::string>& subjects,
                             std::string_view destination) {
  for (const std::string& subject : subjects) {
    const std::string agent = AgentOfSubject(subject);
    if (agent.empty() || agent == destination) continue;
    return "the fetch ticket is for agent '" + std::string(destination) +
           "', and the caller's certificate names agent '" + agent + "'";
  }
  return "";
}

}  // namespace gandiva::runtime
