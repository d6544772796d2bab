// File helpers shared by the supervisor and its parts (held checkpoints,
// the exit journal): whole-file writes, the size of a checkpoint directory,
// and job directory names.
//
// Thread-safety: all functions are thread-safe (no state of their own);
// concurrent writes of one path are the caller's to avoid.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gandiva::runtime {

// Writes `text` to `path` whole or not at all (a temporary file, path.tmp,
// renamed over it). False when that failed.
bool WriteWhole(const std::string& path, const std::string& text);

// The regular files under `dir` (recursively), less the warm start's own
// (IsNoteFile): their total size in *bytes, their number in *files;
// 0 and 0 when `dir` cannot be read.
void DirStats(const std::string& dir, int64_t* bytes, int* files);

// The mini-batch of the periodic checkpoint whose note (GANDIVA_SAVED_FILE,
// progress_page.h) is in `dir`: when the note reads and the file it names
// is there, a regular file with the mtime it gives (0: the note gave no
// mini-batch); nullopt otherwise.
std::optional<int64_t> PeriodicCheckpointAt(const std::string& dir);

// A job's directory name ("<id>") as its id; nullopt for any other name.
std::optional<int64_t> JobIdOfDirName(const std::string& name);

}  // namespace gandiva::runtime
