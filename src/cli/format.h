// Text formatting for the cluster commands: durations, ages, job states and
// aligned tables. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/gandiva.pb.h"

namespace gandiva::cli {

// A measured cost: "850us", "3.1ms", "1.25s", "2m05s".
std::string FormatTook(int64_t us);
// An age or elapsed time at second resolution: "7s", "3m04s", "2h05m", "3d04h".
std::string FormatAge(int64_t us);
// "queued", "running", ... ("?" for unknown values).
std::string StateName(rpc::JobState state);
// True for FINISHED, FAILED and KILLED.
bool IsEnded(rpc::JobState state);
// "123/400" or "123" when the total is unknown.
std::string FormatProgress(int64_t minibatches, int64_t total);
// Local wall-clock time of a Unix time in microseconds: "14:03:07.123".
std::string FormatClock(int64_t unix_us);
// A message as JSON (proto3's mapping: field names in lowerCamelCase, 64-bit
// integers as strings), on one line.
std::string ToJson(const google::protobuf::Message& m);
// Comma-separated GPU indices: "0,1".
std::string JoinGpus(const google::protobuf::RepeatedField<int32_t>& gpus);
// Where a job is: "agent-1:0,1"; for a job that spans servers every part in
// rank order, "agent-1:0,1+agent-2:0"; "-" when it is nowhere.
std::string Placement(const rpc::JobInfo& job);
// The GPUs a job holds while it is placed (running or suspended: a resize
// changes them), else those its spec asks for.
int GpusOf(const rpc::JobInfo& job);

// Rows of cells printed as left-aligned columns separated by two spaces (the
// first row is the header). Trailing spaces are trimmed.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace gandiva::cli
