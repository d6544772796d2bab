// Job spec files: the YAML a user hands to `gandiva submit`, read and checked
// into the wire JobSpec before anything is sent to the daemon.
//
// Fields (every one is documented in examples/README.md):
//   name               string, default: the file's name without extension;
//                      1-64 characters of [A-Za-z0-9._-]
//   command            required; a string run by /bin/sh -c, or a list of
//                      words (each shell-quoted, then joined)
//   gpus               integer, a power of two >= 1, default 1
//   priority           integer, default 0
//   owner              string, default $USER (else the login name)
//   queue              string, default "" (the shared queue): one of the
//                      daemon's queues (gandiva-scheduler --queues)
//   group              string, default "" (none)
//   elastic            boolean, default false
//   restartable        boolean, default false: the job keeps its own
//                      checkpoints in $GANDIVA_CHECKPOINT_DIR and resumes
//                      from $GANDIVA_RESUME_FROM, so it may be stopped with
//                      SIGTERM and restarted elsewhere (migration without
//                      the job-side library)
//   workdir            string, default the spec file's directory; a relative
//                      path is taken from that directory; made absolute; must
//                      be an existing directory
//   env                map of NAME: value (NAME matches [A-Za-z_][A-Za-z0-9_]*;
//                      values are scalars), default empty
//   total_minibatches  integer >= 0, default 0 (unknown)
//   retries            integer 0-100, default the daemon's --default-retries:
//                      runs that may fail (a nonzero exit, a kill from
//                      outside) before the job does; each is queued again
//                      after a backoff, from its last periodic checkpoint
//                      or else from the beginning
//   checkpoint_every   mini-batches ("500") or a time ("90s", "10m", "1.5h",
//                      at least 1 s), default none: a job using the
//                      job-side library saves a checkpoint that often, at a
//                      mini-batch boundary, which a failed run goes on from
// Any other top-level key is refused ("job.yaml:3: unknown field 'gpu'").
//
// Pure functions of their input (and, for defaults, of the environment and
// the file system): thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/job_spec_check.h"
#include "core/status.h"
#include "proto/gandiva.pb.h"

namespace gandiva::cli {

// The fields a spec may have, in documentation order.
inline constexpr std::string_view kJobSpecFields[] = {
    "name",        "command",         "gpus",  "priority",
    "owner",       "queue",           "group", "elastic",
    "restartable", "workdir",         "env",   "total_minibatches",
    "retries",     "checkpoint_every"};

// Reads and checks the specs in the file at `path`: one per YAML document
// (documents separated by `---`; empty ones are skipped). Without a `name`,
// a file's one job is named after the file (`cnn.yaml`: cnn), its several
// jobs FILE-1, FILE-2, ... in order. Errors are INVALID_ARGUMENT (or IO
// when the file cannot be read) with a message that starts with the file
// name (and the line, when known) and names the field:
//   "job.yaml:4: field 'gpus': must be a power of two >= 1, got 3".
// The first error refuses the whole file. Path "-" reads standard input,
// named "<stdin>" in messages (jobs without a name: job, or job-1, job-2,
// ...; the default workdir: the current directory).
core::StatusOr<std::vector<rpc::JobSpec>> LoadJobSpecs(const std::string& path);
inline constexpr char kStdinName[] = "<stdin>";
// The same for a file that must hold exactly one spec.
core::StatusOr<rpc::JobSpec> LoadJobSpec(const std::string& path);

// The same for YAML text; `path` is used in messages and for the default
// name and workdir.
core::StatusOr<std::vector<rpc::JobSpec>> ParseJobSpecs(
    const std::string& yaml_text, const std::string& path);
core::StatusOr<rpc::JobSpec> ParseJobSpec(const std::string& yaml_text,
                                          const std::string& path);

// Checks a job name against the rule above; empty when valid, else why not.
using config::CheckJobName;

// Quotes one word for /bin/sh (unchanged when it needs no quoting).
std::string ShellQuote(std::string_view word);

}  // namespace gandiva::cli
