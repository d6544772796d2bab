// A job's row in the store (JobRow) and its published info (rpc::JobInfo),
// each from the other. Stateless; thread-safe.
#pragma once

#include "proto/gandiva.pb.h"
#include "runtime/scheduler/daemon_types.h"
#include "runtime/scheduler/store.h"

namespace gandiva::runtime {

// The row of a job whose published info is `i`.
JobRow RowOf(const rpc::JobInfo& i, const JobExtra& x);

// Whether the row written last for the job (x.written) is RowOf(i, x),
// without building it; with `but_progress`, apart from the progress
// (mini-batches, rate, metric).
bool SameAsWritten(const rpc::JobInfo& i, const JobExtra& x,
                   bool but_progress = false);

// A forgotten job's info, from its row (RowOf's inverse, as far as the row
// goes).
rpc::JobInfo InfoOfArchived(const JobRow& r);

}  // namespace gandiva::runtime
