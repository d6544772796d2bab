#include "core/job.h"

#include <bit>

namespace gandiva::core {

std::string ValidateJobSpec(const JobSpec& spec) {
  if (spec.gpus < 1) {
    return "field 'gpus': must be at least 1, got " + std::to_string(spec.gpus);
  }
  if (!std::has_single_bit(static_cast<unsigned>(spec.gpus))) {
    return "field 'gpus': must be a power of two, got " +
           std::to_string(spec.gpus);
  }
  if (spec.gpus > (1 << 20)) {
    return "field 'gpus': at most 1048576, got " + std::to_string(spec.gpus);
  }
  if (spec.retries < 0 || spec.retries > kMaxRetries) {
    return "field 'retries': must be 0 to " + std::to_string(kMaxRetries) +
           ", got " + std::to_string(spec.retries);
  }
  if (spec.total_minibatches < 0) {
    return "field 'total_minibatches': must not be negative, got " +
           std::to_string(spec.total_minibatches);
  }
  return {};
}

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kSuspended:
      return "suspended";
    case JobState::kMigrating:
      return "migrating";
    case JobState::kFinished:
      return "finished";
    case JobState::kFailed:
      return "failed";
    case JobState::kKilled:
      return "killed";
  }
  return "?";
}

bool IsTerminal(JobState s) {
  return s == JobState::kFinished || s == JobState::kFailed ||
         s == JobState::kKilled;
}

bool CanTransition(JobState from, JobState to) {
  if (IsTerminal(from)) return false;
  if (IsTerminal(to)) return true;  // any live job may end
  switch (from) {
    case JobState::kQueued:
      return to == JobState::kRunning;
    case JobState::kRunning:
      return to == JobState::kSuspended || to == JobState::kMigrating ||
             to == JobState::kQueued;  // lost its server, or a failed start
    case JobState::kSuspended:
      return to == JobState::kRunning || to == JobState::kMigrating ||
             to == JobState::kQueued;
    case JobState::kMigrating:
      return to == JobState::kRunning || to == JobState::kSuspended ||
             to == JobState::kQueued;
    default:
      return false;
  }
}

std::string_view CarrierName(Carrier c) {
  switch (c) {
    case Carrier::kSelf:
      return "self";
    case Carrier::kRestart:
      return "restart";
    case Carrier::kProcessImage:
      return "process-image";
  }
  return "unknown";
}

std::string_view ActionKindName(ActionKind k) {
  switch (k) {
    case ActionKind::kNone:
      return "none";
    case ActionKind::kStart:
      return "start";
    case ActionKind::kSuspend:
      return "suspend";
    case ActionKind::kResume:
      return "resume";
    case ActionKind::kMigrate:
      return "migrate";
    case ActionKind::kPack:
      return "pack";
    case ActionKind::kUnpack:
      return "unpack";
    case ActionKind::kGrow:
      return "grow";
    case ActionKind::kShrink:
      return "shrink";
    case ActionKind::kKill:
      return "kill";
    case ActionKind::kSetPriority:
      return "set-priority";
    case ActionKind::kRestart:
      return "restart";
  }
  return "?";
}

}  // namespace gandiva::core
