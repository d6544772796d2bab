// Event <-> JSON: how the daemon writes core events to its event log and
// reads them back for replay after a crash.
//
// Every field of every core::EventBody alternative round-trips exactly
// (times and durations as integer microseconds). Pure functions:
// thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/job.h"
#include "core/status.h"

namespace gandiva::runtime {

// The event's kind, for the log's `kind` column and for messages:
// "JobArrived", "HoldRequest", ...
const char* EventKindName(const core::EventBody& body);

// The event body as a JSON object (the time is stored beside it).
std::string EncodeEvent(const core::EventBody& body);
// Inverse of EncodeEvent; InvalidArgument on anything malformed.
core::StatusOr<core::EventBody> DecodeEvent(const std::string& json);

// Queues as JSON, as the daemon stores them with its policy options and in
// QueuesChanged: a list of objects, by name; the fields left at their
// defaults are left out.
nlohmann::json QueuesToJson(std::vector<core::QueueConfig> queues);
// Inverse of QueuesToJson; an object of quotas by name (a store made
// before queues had trees) reads as queues at the top. InvalidArgument
// ("queues: ...") on anything malformed.
core::StatusOr<std::vector<core::QueueConfig>> QueuesFromJson(
    const nlohmann::json& j);

// A core JobSpec as JSON and back (also used inside JobArrived).
std::string EncodeCoreSpec(const core::JobSpec& spec);

}  // namespace gandiva::runtime
