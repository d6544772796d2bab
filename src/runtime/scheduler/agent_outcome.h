// What an agent's answer to one of the daemon's calls says, typed: the
// daemon decides by the status code, never by the words of the message.
#pragma once

#include <grpcpp/grpcpp.h>

namespace gandiva::runtime {

enum class AgentOutcome {
  // Done as asked.
  kDone,
  // ALREADY_EXISTS: what was asked holds already. A start: a process of the
  // job runs there (the agent keeps it); a suspend: it is suspended; a
  // resume: it runs.
  kAlreadySo,
  // UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED: the agent could not be
  // reached, or did not answer in time; what it did is not known.
  kUnreachable,
  // Any other code: the agent refused or failed; the message says why.
  kFailed,
};

inline AgentOutcome OutcomeOf(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      return AgentOutcome::kDone;
    case grpc::StatusCode::ALREADY_EXISTS:
      return AgentOutcome::kAlreadySo;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
      return AgentOutcome::kUnreachable;
    default:
      return AgentOutcome::kFailed;
  }
}

}  // namespace gandiva::runtime
