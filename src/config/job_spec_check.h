// The one check of a job's spec, for every way a spec comes in: `gandiva
// submit` (after reading the YAML, src/cli/job_spec.h) and the daemon's
// Submit and SubmitJobs (whatever a gRPC client sent).
//
// A spec is refused, naming the field, when:
//   name               is not 1-64 of [A-Za-z0-9._-] (empty: the daemon
//                      takes it; the command line always names a job)
//   command            is empty or blank, holds a NUL byte, or is longer
//                      than one argument execve takes (128 KiB with its
//                      NUL: the agent runs it as `sh -c COMMAND`)
//   gpus               is not a power of two from 1 to 2^20
//   total_minibatches  is negative
//   retries            is not 0 to 100
//   checkpoint_every   gives both mini-batches and a time, mini-batches
//                      below 0 or past 10^12, or a time other than 0 or
//                      1 s to 30 days
//   owner, group,      are longer than 256 bytes or hold a control
//   queue              character
//   workdir            is not an absolute path, is longer than 4095 bytes or
//                      holds a NUL byte
//   env                has more than 4096 variables; a name that is not
//                      [A-Za-z_][A-Za-z0-9_]* or longer than 256; a value
//                      with a NUL byte; NAME=value over 128 KiB; all of them
//                      over 1 MiB together
// and when any string is not valid UTF-8. Pure: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proto/gandiva.pb.h"

namespace gandiva::config {

inline constexpr size_t kMaxArgBytes = 128 * 1024;  // execve's, with NUL
inline constexpr size_t kMaxLabelBytes = 256;       // owner, group, queue
inline constexpr size_t kMaxPathBytes = 4095;
inline constexpr size_t kMaxEnvVars = 4096;
inline constexpr size_t kMaxEnvBytes = 1024 * 1024;
inline constexpr int64_t kMaxCheckpointEveryMinibatches = 1'000'000'000'000;
inline constexpr int64_t kMinCheckpointEveryUs = 1'000'000;
inline constexpr int64_t kMaxCheckpointEveryUs = 30LL * 24 * 3600 * 1'000'000;

// "" when `spec` passes, else "field 'F': why".
std::string CheckJobSpec(const rpc::JobSpec& spec);

// JobSpec's checkpoint_every_* from the text a user writes: a count of
// mini-batches ("500") or a time, a number with a unit s, m or h ("90s",
// "10m", "1.5h"). "" when it reads, else why not; the range is
// CheckJobSpec's.
std::string ParseCheckpointEvery(std::string_view text, int64_t* minibatches,
                                 int64_t* us);

// checkpoint_every's rule (above), for JobSpec's two fields; "" when they
// pass, else why not.
std::string CheckCheckpointEvery(int64_t minibatches, int64_t us);

// A job name's rule (above); "" when valid, else why not.
std::string CheckJobName(std::string_view name);
// Whether every byte of `s` is one of [A-Za-z0-9._-] (a job's or a
// server's name).
bool OnlyNameChars(std::string_view s);
// A text a client makes up (owner, group, queue; an agent's strings): ""
// when at most `max` bytes without a control character, else
// "field 'F': why".
std::string CheckText(std::string_view field, std::string_view s, size_t max);
// Whether `name` is an environment variable name POSIX allows.
bool ValidEnvName(std::string_view name);
// `s` as a message quotes what a client sent: its first 64 bytes, each
// control character as '?', in single quotes ("...'" when cut).
std::string Shown(std::string_view s);
// Whether `s` is valid UTF-8 (no overlongs, surrogates or code points past
// U+10FFFF).
bool ValidUtf8(std::string_view s);

}  // namespace gandiva::config
