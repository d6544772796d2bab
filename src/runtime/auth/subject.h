// A TLS certificate's subject as gRPC gives it ("CN=node-1,OU=agent,O=lab"):
// its attributes, and whose certificate it is.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gandiva::runtime {

// The subject's attributes in order, split at unescaped commas (and '+'),
// unescaped: {{"CN", "node-1"}, {"OU", "agent"}, ...}.
std::vector<std::pair<std::string, std::string>> SubjectAttributes(
    std::string_view subject);

// The agent a certificate names: its CN when its first OU is "agent" (as
// `gandiva certs issue NAME --role agent` makes it), else "".
std::string AgentOfSubject(std::string_view subject);

// Whether a fetch ticket for agent `destination` may be used by the peer
// whose certificate subjects (GRPC_X509_SUBJECT_PROPERTY_NAME) are
// `subjects`: "" when so (no certificate, or none of an agent: nothing
// to hold it to; an agent's naming `destination`), else why not.
std::string CheckFetchCaller(const std::vector<std::string>& subjects,
                             std::string_view destination);

}  // namespace gandiva::runtime
