// Bounded job logs. A job's process writes its log through a file
// descriptor opened O_APPEND (stdout and stderr), which outlives the agent:
// the log cannot be rotated by renaming it, nor copied and truncated
// without losing what is written meanwhile. CapLog instead drops the
// oldest output by punching a hole over it (fallocate PUNCH_HOLE): the
// blocks are freed, the file keeps its size and every later byte its
// offset, so a reader following the log (TailLog) goes on where it was and
// only skips the hole (NextData).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace gandiva::runtime {

// If the output kept in the file at `path` (from its first data byte to its
// end) exceeds `max_bytes`, drops the oldest of it, keeping about the last
// `max_bytes / 2` (the hole ends on a 4 KiB boundary). Returns the bytes
// dropped now (0: nothing to do, or no such file). Fails (IoError) where
// the file system cannot punch holes.
core::StatusOr<int64_t> CapLog(const std::string& path, int64_t max_bytes);

// The offset of the first byte of data at or after `offset` in `fd` (past
// a hole CapLog left); `size` when there is none before it.
int64_t NextData(int fd, int64_t offset, int64_t size);

}  // namespace gandiva::runtime
