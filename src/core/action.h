// Actions: what the scheduler asks the world to do.
//
// Contract with the world, for every action: carry it out and report
// ActionDone (with the time it took) or ActionFailed (the job stays as it was
// before the action). Kill and SetPriority need no report. The scheduler does
// not ask for a second mechanism for a job while one is under way.
//
//   Start(job, gpus)     launch the job on these GPUs
//   Suspend(job)         stop it at its next mini-batch boundary; its GPUs
//                        stay assigned to it (it counts towards height)
//   Resume(job, gpus)    continue a suspended job on its GPUs (carried
//                        there first if `relocates`)
//   Migrate(job, gpus)   move a suspended job to other GPUs (checkpoint,
//                        transfer, load) and run it there; on failure it
//                        stays suspended where it was
//   Pack(job, peer)      run a suspended job on the GPUs `peer` is running
//                        on, both at once (start it if `launch`; carry it
//                        there first if `relocates`)
//   Unpack(job)          suspend a packed job; its peer runs on alone
//   Grow(job, gpus)      restart an elastic job from its checkpoint on more
//   Shrink(job, gpus)    or fewer GPUs (`gpus`: all it will have); on
//                        failure it runs on as it was
//   Restart(job, gpus)   run again on its GPUs a running job whose process
//                        was lost (ProcessLost): from the checkpoint the
//                        world kept (`relocates`) or from the beginning
//                        (`launch`); on failure it is not running there
//   Kill(job)            stop it for good and free its GPUs
//   SetPriority(job, p)  tell the job's environment its new priority
#pragma once

#include <string>
#include <vector>

#include "core/ids.h"
#include "core/job.h"

namespace gandiva::core {

struct Action {
  ActionId id;
  ActionKind kind = ActionKind::kNone;
  JobId job;
  // Start, Resume, Migrate, Pack, Grow, Shrink: where to run.
  std::vector<GpuId> gpus;
  // Pack: the job whose GPUs it shares; and whether the job is launched
  // (never ran) rather than resumed. Restart: whether it starts from the
  // beginning (no checkpoint of it was kept).
  JobId peer;
  bool launch = false;
  // Whether the job's work must be carried to `gpus` (saved where its
  // process last ran, restored there) rather than go on in place; the
  // core decides it from where the job last ran (Job::ran_on):
  //   Migrate, Grow, Shrink: always (the job restarts from a checkpoint,
  //                          even on a subset of its GPUs);
  //   Resume, Pack without `launch`: when `gpus` are not laid out as the
  //                          GPUs the job last ran on (Cluster::SameLayout:
  //                          a job requeued by its policy and placed anew,
  //                          an operator's pack onto another job's GPUs);
  //   Restart: when it goes on from the checkpoint the world kept
  //                          (ProcessLost::checkpoint);
  //   Start, Pack with `launch`, and the others: never (nothing to carry).
  // A job whose process was lost (ProcessLost) has run nowhere since: its
  // next Resume relocates it from the checkpoint the world kept, wherever
  // it resumes. A world may find more to carry than the core knows of (a
  // checkpoint kept elsewhere), never less.
  bool relocates = false;
  // Suspend: stopped at once, what the job trained since its last
  // checkpoint lost (Actions::Preempt).
  bool lossy = false;
  // SetPriority: the new priority.
  int priority = 0;
  // Why (for logs and `gandiva show`).
  std::string reason;
};

}  // namespace gandiva::core
